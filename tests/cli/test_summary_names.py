"""The job summary table's row names (issue 48): long metric names are shortened to stay distinct, never cut
to the same prefix."""

from __future__ import annotations

from rich.console import Console

from evaluator_host.cli.evaluate.batch import _summary, row_names

NEMO = ["outputs.arithmetic-expression.valid_expression", "outputs.arithmetic-expression.correct_value"]


def test_long_names_keep_their_distinct_tails() -> None:
    shown = row_names(["score", *NEMO])
    assert shown["score"] == "score"
    assert len(set(shown.values())) == 3
    assert shown[NEMO[0]].endswith("valid_expression") and shown[NEMO[1]].endswith("correct_value")
    assert all(label.startswith("outputs.…") and len(label) <= 32 for label in (shown[n] for n in NEMO))


def test_names_a_shortening_would_make_alike_are_shown_whole() -> None:
    names = ["outputs." + "a" * 40 + ".x" * 20, "outputs." + "b" * 40 + ".x" * 20]
    assert row_names(names) == {name: name for name in names}


def test_the_printed_summary_tells_nemos_two_metrics_apart_on_a_narrow_terminal() -> None:
    stats = {"mean": 1.0, "std": 0.0, "min": 1.0, "max": 1.0, "count": 3, "nan_count": 0}
    job = {
        "id": "job_x",
        "status": "succeeded",
        "aggregate": {"score": stats, "outputs": {n.removeprefix("outputs."): stats for n in NEMO}, "errors": 0},
        "progress": {"done": 3, "total": 3, "failed": 0},
    }
    console = Console(width=80, record=True)
    _summary(job, console)
    text = console.export_text()
    assert "valid_expression" in text and "correct_value" in text
