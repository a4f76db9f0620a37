"""docs/benchmarks.md's generated blocks: what ``make bench`` (or one bench run alone) rewrites, and nothing else.

Contract:

* A bench's rendered section is stored in the doc between the lines ``<!-- make bench: KEY -->`` and
  ``<!-- end of make bench: KEY -->``; KEY is the section's first heading's text (``## Online ingestion
  (OTLP/HTTP)`` → ``Online ingestion (OTLP/HTTP)``). The marks are HTML comments: a rendered page does not show them.
* :func:`merge` replaces each given section's block and keeps every other byte of the doc: the dated notes,
  before/after tables and profiles that engineers write between the blocks (a run used to rewrite the file, or a
  section up to the next ``## `` heading, whole, and those went with it).
* A section whose block the doc does not have is added after the block merged just before it (a full run keeps
  its order), or, first of a call, at the doc's end; nothing is removed.
* A doc whose marks for a key are not one opening followed by one closing, with no other mark between them, is
  refused (:class:`ValueError`) before anything is written: a hand edit that broke a block is shown, not guessed
  at. ``bench/run.py`` checks the doc (:func:`blocks`) before its hours of measuring, not only after.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["BEGIN", "END", "block", "blocks", "key_of", "merge", "merge_into"]

BEGIN = "<!-- make bench: {} -->"
END = "<!-- end of make bench: {} -->"
_BEGIN_HEAD, _END_HEAD = BEGIN.split("{}")[0], END.split("{}")[0]


def key_of(section: str) -> str:
    """The block key of a rendered ``section``: its first heading's text."""
    for line in section.splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    raise ValueError(f"a generated section starts with a heading: {section[:80]!r}")


def block(section: str) -> str:
    """``section`` between its marks (no blank line of its own at either end)."""
    key = key_of(section)
    return f"{BEGIN.format(key)}\n{section.strip(chr(10))}\n{END.format(key)}"


def _span(doc: str, key: str) -> tuple[int, int] | None:
    """Where ``key``'s block is in ``doc`` (from its opening mark to the end of its closing one), or None."""
    begin, end = BEGIN.format(key), END.format(key)
    if doc.count(begin) > 1 or doc.count(end) > 1:
        raise ValueError(f"docs/benchmarks.md marks the block {key!r} more than once")
    start, stop = doc.find(begin), doc.find(end)
    if start < 0 and stop < 0:
        return None
    if start < 0 or stop < start:
        raise ValueError(f"docs/benchmarks.md's block {key!r} is not one opening mark followed by its closing one")
    inner = doc[start + len(begin) : stop]
    if any(line.startswith((_BEGIN_HEAD, _END_HEAD)) for line in inner.splitlines()):  # another block's mark:
        raise ValueError(f"docs/benchmarks.md's block {key!r} holds another block's mark")  # merging deletes it
    return start, stop + len(end)


def blocks(doc: str) -> list[tuple[str, str]]:
    """Every block of ``doc`` in order: (key, its content between the marks); checked as :func:`merge` checks."""
    found: list[tuple[str, str]] = []
    for line in doc.splitlines():
        if line.startswith(_BEGIN_HEAD) and line.endswith(" -->"):
            key = line[len(_BEGIN_HEAD) : -len(" -->")]
            span = _span(doc, key)
            assert span is not None
            inner = doc[span[0] + len(BEGIN.format(key)) : span[1] - len(END.format(key))]
            found.append((key, inner.strip("\n")))
        elif line.startswith(_END_HEAD) and line.endswith(" -->"):
            _span(doc, line[len(_END_HEAD) : -len(" -->")])  # a closing mark with no opening one: refused
    return found


def merge(doc: str, sections: Sequence[str]) -> str:
    """``doc`` with each of ``sections`` in its block (the module's contract)."""
    after: int | None = None
    for section in sections:
        new = block(section)
        span = _span(doc, key_of(section))
        if span is not None:
            doc = doc[: span[0]] + new + doc[span[1] :]
            after = span[0] + len(new)
        elif after is not None:
            doc = doc[:after] + "\n\n" + new + doc[after:]
            after += 2 + len(new)
        else:
            head = doc.rstrip("\n")
            doc = (head + "\n\n" if head else "") + new + "\n"
            after = len(doc) - 1
    return doc if doc.endswith("\n") else doc + "\n"


def merge_into(path: Path, sections: Sequence[str]) -> None:
    """:func:`merge` ``sections`` into the file at ``path`` (created when missing)."""
    doc = path.read_text() if path.exists() else ""
    path.write_text(merge(doc, sections))
