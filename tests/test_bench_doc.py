"""bench/doc.py: ``make bench`` (or one bench alone) rewrites docs/benchmarks.md's generated blocks and keeps every
byte written between them. A run used to rewrite the file whole (``bench/run.py``) or a section up to the next
``## `` heading (the benches run alone), and the dated before/after measurements written there went with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import idle_cpu
from bench.doc import BEGIN, END, blocks, key_of, merge, merge_into
from tests.support import REPO

DOC = REPO / "docs" / "benchmarks.md"

NOTES = "A dated note, 2026-11-29: 1,000 → 2,000 targets/s (`python -m bench.x`, load 1.2).\n"
START = (
    "Intro written by hand.\n\n"
    + BEGIN.format("One")
    + "\n## One\n\nold figures of one\n"
    + END.format("One")
    + "\n\n"
    + NOTES
    + "\n### A profile written by hand\n\nits table\n\n"
    + BEGIN.format("Two")
    + "\n## Two\n\nold figures of two\n"
    + END.format("Two")
    + "\n\nThe last note.\n"
)


def _outside(doc: str) -> str:
    """``doc`` with every block's content taken out (the marks kept): what a run must leave as it was."""
    for key, inner in blocks(doc):
        doc = doc.replace(BEGIN.format(key) + "\n" + inner + "\n" + END.format(key), BEGIN.format(key))
    return doc


def test_a_run_replaces_its_blocks_and_keeps_every_note_between_them() -> None:
    merged = merge(START, ["\n## One\n\nnew figures of one\n", "## Two\n\nnew figures of two"])
    assert blocks(merged) == [("One", "## One\n\nnew figures of one"), ("Two", "## Two\n\nnew figures of two")]
    assert _outside(merged) == _outside(START)
    assert "old figures" not in merged
    assert (
        NOTES in merged and "### A profile written by hand\n\nits table" in merged and "Intro written by hand" in merged
    )


def test_a_section_the_doc_lacks_is_added_after_the_block_merged_before_it_or_at_the_end() -> None:
    merged = merge(START, ["## One\n\nnew one", "## Three\n\nthree", "## Two\n\nnew two", "## Four\n\nfour"])
    assert [key for key, _ in blocks(merged)] == ["One", "Three", "Two", "Four"]
    assert merged.index(BEGIN.format("Three")) < merged.index(NOTES)  # right after One's block, before the notes
    assert END.format("Two") + "\n\n" + BEGIN.format("Four") in merged  # right after Two's block
    assert merged.endswith("The last note.\n")  # and the note after Two's block stays after both
    assert _outside(merge(START, ["## Five\n\nfive"])).startswith(_outside(START).rstrip("\n"))
    assert merge("", ["# Title\n\nx"]).startswith(BEGIN.format("Title") + "\n# Title")


def test_merging_the_docs_own_blocks_gives_the_doc_back_byte_for_byte() -> None:
    doc = DOC.read_text()
    found = blocks(doc)
    assert len(found) >= 20 and found[0][0] == "Benchmarks"
    assert merge(doc, [inner for _, inner in found]) == doc
    for key, inner in found:
        assert key_of(inner) == key  # each block opens with the heading its renderer writes


def test_a_real_renderer_rewrites_its_block_in_the_doc_and_nothing_else() -> None:
    doc = DOC.read_text()
    section = idle_cpu.render({"SQLite": {"this tree": [9.5, 10.0, 11.0]}}, 1.5)
    merged = merge(doc, [section])
    assert dict(blocks(merged))["An idle service's CPU"] == section.strip("\n")
    assert _outside(merged) == _outside(doc)
    assert "make test`'s tiers, one process and two workers" in merged  # a hand-written section, kept
    assert merged.count("## An idle service's CPU") == doc.count("## An idle service's CPU")


@pytest.mark.parametrize(
    "broken",
    [
        START.replace(END.format("One"), ""),  # an opening mark without its closing one
        START.replace(BEGIN.format("Two"), ""),  # a closing mark without its opening one
        START + BEGIN.format("One") + "\n",  # a key marked twice
        START.replace(BEGIN.format("One"), "§")
        .replace(END.format("One"), BEGIN.format("One"))
        .replace("§", END.format("One")),
        BEGIN.format("One")
        + "\n## One\n\n"
        + BEGIN.format("Two")
        + "\n## Two\n"
        + END.format("Two")
        + "\nhand\n"
        + END.format("One")
        + "\n",  # Two's block inside One's: merging One would delete it and the note
    ],
    ids=["unclosed", "unopened", "twice", "closed before opened", "nested"],
)
def test_a_doc_whose_marks_a_hand_edit_broke_is_refused_and_left_as_it_was(tmp_path: Path, broken: str) -> None:
    path = tmp_path / "benchmarks.md"
    path.write_text(broken)
    with pytest.raises(ValueError, match="docs/benchmarks.md"):
        merge_into(path, ["## One\n\nnew", "## Two\n\nnew"])
    assert path.read_text() == broken
