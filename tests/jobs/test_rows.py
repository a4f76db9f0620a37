"""A job row's lean stored form is the model's stored form: same keys, same order, same values."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from evaluator_host.evaluation.models import EvaluatorSettings
from evaluator_host.evaluation.outcomes.aggregate import Accumulator
from evaluator_host.evaluation.path import Prepared, to_result
from evaluator_host.jobs.running.rows import StoredRow, stored_chunk, stored_row, stored_rows
from evaluator_host.jobs.stored_form import SHARED_FIELDS, full_form, stored_form
from evaluator_host.sandbox import fastjson
from evaluator_host.sandbox.base import PlainOutcome, RawOutcome, plain_outcomes
from evaluator_host.sandbox.pool.replies import Foreign, bulk_outcomes

RUNTIME = {"id": "python-abc", "language": "python", "policy": "standard"}


def _prepared(interface: str, threshold: float | None = 0.5) -> Prepared:
    return Prepared(
        language="python",
        code="def evaluate(inputs, outputs, trace):\n    return 1\n",
        interface=interface,
        entrypoint="evaluate",
        pins={},
        settings=EvaluatorSettings(threshold=threshold),
        runtime_id="python-abc",
    )


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return rng.choice([True, False, None])
    if kind == 1:
        return rng.choice([0, 1, -1, 2**63, 2**70, 10**30, 7])
    if kind == 2:
        return rng.choice([0.0, 0.5, 1.0, -0.0, 1e-7, 1e16, 0.1 + 0.2, 123.456, 5e-324, 1.7976931348623157e308])
    if kind == 3:
        return rng.choice(["", "ok", "é", "\u2028", "line\nbreak", '"quoted"', "\\", "\x00", "🙂", "0.5", "x" * 300])
    if kind == 4:
        return rng.choice(["good", "bad", "reason text"])
    if kind == 5:
        return {"$nonfinite": "NaN"} if rng.random() < 0.5 else {"$undefined": True}
    if kind == 6:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["score", "reason", "label", "pass", "passed", "explanation", "a", "b", "accuracy", "é"]
    return {rng.choice(keys): _value(rng, depth + 1) for _ in range(rng.randrange(5))}


def _cases(n: int) -> list[tuple[RawOutcome, str]]:
    rng = random.Random(20261122)
    out: list[tuple[RawOutcome, str]] = []
    for i in range(n):
        interface = ("evaluate", "legacy", "main")[i % 3]
        status = "ok" if i % 7 else rng.choice(["error", "timeout", "memory_limit", "output_limit"])
        error = None if status == "ok" else {"type": "ValueError", "message": "bad", "line": 3, "traceback": "tb"}
        raw = RawOutcome(
            status=status,
            value=_value(rng),
            error=error,
            stdout=rng.choice(["", "printed\n", "é" * 50]),
            stderr=rng.choice(["", "warn\n"]),
            truncated=rng.random() < 0.1,
            duration_ms=rng.choice([0.0, 0.0123, 12.5, 3]),
        )
        out.append((raw, interface))
    return out


def _model(raw: RawOutcome, interface: str, cap: int | None) -> tuple[Any, str]:
    result = to_result(raw, _prepared(interface), RUNTIME)
    return result, stored_form(result, cap)


@pytest.mark.parametrize("cap", [None, 2 * 1024 * 1024, 400])
def test_lean_stored_rows_decode_to_the_model_stored_form_with_the_same_key_order(cap: int | None) -> None:
    lean_paths = 0
    for raw, interface in _cases(3000):
        result, expected = _model(raw, interface, cap)
        row = stored_row(raw, _prepared(interface), RUNTIME, cap)
        assert row.status == result.status
        assert json.loads(row.text) == json.loads(expected), (raw, interface)
        assert list(json.loads(row.text)) == list(json.loads(expected))
        assert (row.score, row.passed, row.label) == (result.score, result.passed, result.label)
        assert (row.outputs or {}) == result.outputs
        lean_paths += row.status == "ok"
    assert lean_paths > 500  # the sample exercises the lean path, not only the model fallback


@pytest.mark.parametrize("cap", [None, 400])
def test_the_full_form_of_a_stored_row_is_the_whole_result_in_the_models_order(cap: int | None) -> None:
    """Bare rows are stored short; ``full_form`` puts their default fields back where the model has them,
    and leaves every other row (and rows stored whole before short ones existed) as it is."""
    short = 0
    for raw, interface in _cases(3000):
        result = to_result(raw, _prepared(interface), RUNTIME)
        stored = stored_row(raw, _prepared(interface), RUNTIME, cap).text
        whole = full_form(stored)
        if cap is None:  # nothing cut: the whole model, in its order
            expected = result.model_dump_json(exclude=set(SHARED_FIELDS))
            assert list(json.loads(whole).items()) == list(json.loads(expected).items()), (raw, interface)
        short += whole != stored
        assert full_form(whole) == whole
    assert short > 50  # the sample stores rows short (97 of 3,000 with this seed)


def test_a_lean_row_too_large_for_the_cap_is_cut_exactly_like_the_model_path() -> None:
    raw = RawOutcome(status="ok", value=True, stdout="x" * 5000, stderr="y" * 5000)
    row = stored_row(raw, _prepared("evaluate"), RUNTIME, 1024)
    assert row.text == _model(raw, "evaluate", 1024)[1]
    assert json.loads(row.text)["truncated"] is True
    assert len(row.text.encode()) <= 1024


def test_a_value_msgspec_cannot_encode_takes_the_model_path_and_says_what_it_says() -> None:
    raw = RawOutcome(status="ok", value={"score": 1, "note": "\ud800"})  # a lone surrogate (from a fallback decode)
    try:
        expected: str | None = _model(raw, "evaluate", None)[1]
    except Exception as exc:  # noqa: BLE001 - the model path's own answer, whatever it is
        with pytest.raises(type(exc)):
            stored_row(raw, _prepared("evaluate"), RUNTIME, None)
        return
    assert stored_row(raw, _prepared("evaluate"), RUNTIME, None).text == expected


def test_the_aggregate_of_stored_rows_is_the_aggregate_of_the_results() -> None:
    by_rows, by_results = Accumulator(), Accumulator()
    for raw, interface in _cases(2000):
        row: StoredRow = stored_row(raw, _prepared(interface), RUNTIME, None)
        by_rows.add(row)
        by_results.add(to_result(raw, _prepared(interface), RUNTIME))
    assert by_rows.result() == by_results.result()
    assert by_rows.state() == by_results.state()


def _bool_heavy(n: int) -> list[tuple[RawOutcome, str]]:
    """Most rows a bool in a plain ok outcome (the bulk of a job), the rest anything ``_cases`` makes."""
    rng, mixed = random.Random(7), _cases(n)
    out: list[tuple[RawOutcome, str]] = []
    for i, (raw, interface) in enumerate(mixed):
        if i % 4:
            raw = RawOutcome(status="ok", value=rng.random() < 0.5, duration_ms=rng.choice([0.0012, 3.0, 1e-9, 250.5]))
        out.append((raw, interface))
    out.append((RawOutcome(status="ok", value=True, egress=[{"host": "x"}]), "evaluate"))  # egress: model path
    out.append((RawOutcome(status="ok", value=False, duration_ms=float("inf")), "evaluate"))
    return out


@pytest.mark.parametrize("cap", [None, 2 * 1024 * 1024, 200])
def test_stored_rows_are_stored_row_of_each_outcome(cap: int | None) -> None:
    for interface in ("evaluate", "legacy", "main"):
        raws = [raw for raw, _ in _bool_heavy(1200)]
        rows = stored_rows(raws, _prepared(interface), RUNTIME, cap)
        assert rows == [stored_row(raw, _prepared(interface), RUNTIME, cap) for raw in raws]


def _as_frames(cases: list[tuple[RawOutcome, str]]) -> list[RawOutcome]:
    """The outcomes as the pool makes them of a job's replies: each plain ok bool or number (nothing
    printed, no egress, a finite duration) from a ``results`` frame, with output beside one of them."""
    raws: list[RawOutcome] = []
    for i, (raw, _) in enumerate(cases):
        plain = raw.status == "ok" and not (raw.stdout or raw.stderr or raw.truncated or raw.egress)
        if plain and type(raw.value) in (bool, int, float) and raw.duration_ms < float("inf"):
            made = plain_outcomes([raw.value], [float(raw.duration_ms)])[0]
            if i % 97 == 0:
                made.stderr = "printed beside the frame\n"  # what the pool puts on a frame's first row
            raw = made
        raws.append(raw)
    return raws


@pytest.mark.parametrize("cap", [None, 2 * 1024 * 1024, 200])
def test_a_stored_chunk_holds_what_stored_rows_writes_and_counts_the_same(cap: int | None) -> None:
    for interface in ("evaluate", "legacy", "main"):
        raws = _as_frames(_bool_heavy(1200))
        assert sum(type(raw) is PlainOutcome for raw in raws) > 600  # the fast path is exercised
        rows = stored_rows(raws, _prepared(interface), RUNTIME, cap)
        chunk = stored_chunk(raws, _prepared(interface), RUNTIME, cap)
        assert chunk.statuses == [row.status for row in rows]
        assert chunk.texts == [row.text for row in rows]
        assert chunk.failed() == sum(row.status != "ok" for row in rows)
        by_rows, by_chunk = Accumulator(), Accumulator()
        by_rows.add_all(rows)
        by_chunk.add_all(chunk.scored)
        by_chunk.add_bools(chunk.trues, chunk.falses)
        _close(by_chunk.state(), by_rows.state())
        _close(by_chunk.result().model_dump(), by_rows.result().model_dump())


@pytest.mark.parametrize(("trues", "falses"), [(0, 0), (5, 0), (0, 3), (700, 300), (1, 1)])
def test_adding_bools_by_count_is_adding_each_result(trues: int, falses: int) -> None:
    one, counted = Accumulator(), Accumulator()
    earlier = [StoredRow("ok", "{}", 0.25, False), StoredRow("ok", "{}", None, None, {"f1": 0.5}, "label")]
    for acc in (one, counted):
        acc.add_all(earlier)  # onto what earlier rows left, outputs and a label included
    for flag in [True] * trues + [False] * falses:
        one.add(StoredRow("ok", "{}", 1.0 if flag else 0.0, flag))
    counted.add_bools(trues, falses)
    _close(counted.state(), one.state())
    _close(counted.result().model_dump(), one.result().model_dump())


def test_a_results_frame_becomes_plain_outcomes_read_like_any_outcome() -> None:
    results: list[RawOutcome | None] = [None] * 5
    done = bulk_outcomes({"values": [True, 0.5, {"a": 1}], "durations": [0.001, 2, 3.25]}, [0, 1, 2, 3, 4], 1, results)
    assert done == 4 and results[0] is None and results[4] is None
    made = results[1:4]
    assert [type(raw) for raw in made] == [PlainOutcome] * 3
    fields = [(r.status, r.value, r.error, r.stdout, r.stderr, r.truncated, r.duration_ms, r.egress) for r in made if r]
    assert fields == [
        ("ok", True, None, "", "", False, 0.001, ()),
        ("ok", 0.5, None, "", "", False, 2.0, ()),
        ("ok", {"a": 1}, None, "", "", False, 3.25, ()),
    ]
    scattered: list[RawOutcome | None] = [None] * 4
    assert bulk_outcomes({"values": [1, 0], "durations": [1.0, 1.0]}, [3, 1], 0, scattered) == 2  # cases run again
    assert [r.value if r else None for r in scattered] == [None, 0, None, 1]
    for durations in ([1e400, 1.0], [float("nan"), 1.0], ["1", 1.0]):
        with pytest.raises(Foreign):
            bulk_outcomes({"values": [1, 0], "durations": durations}, [0, 1], 0, [None, None])


def test_adding_all_rows_at_once_is_adding_them_one_at_a_time() -> None:
    prepared = {interface: _prepared(interface) for interface in ("evaluate", "legacy", "main")}
    rows = [stored_row(raw, prepared[interface], RUNTIME, None) for raw, interface in _bool_heavy(3000)]
    rows += [StoredRow("ok", "{}", 2.5e300), StoredRow("ok", "{}", -2.5e300), StoredRow("ok", "{}", -0.5, True)]
    one, together = Accumulator(), Accumulator()
    for row in rows:
        one.add(row)
    for start in range(0, len(rows), 700):  # in chunks, as commits do, onto what earlier chunks left
        together.add_all(rows[start : start + 700])
    _close(together.state(), one.state())  # counts, labels, histogram exactly; moments to rounding
    _close(together.result().model_dump(), one.result().model_dump())


def _close(got: Any, want: Any) -> None:
    """Equal, floats to within float rounding of sums taken in another order."""
    if isinstance(want, float) and isinstance(got, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12) or got == want, (got, want)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), (got, want)
        for key in want:
            _close(got[key], want[key])
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (got, want)
        for g, w in zip(got, want, strict=True):
            _close(g, w)
    else:
        assert got == want and type(got) is type(want), (got, want)


@pytest.mark.parametrize(
    "text",
    [
        b'{"a": 1, "b": [1.5, "x", null, true]}',
        b"NaN",
        b'{"x": Infinity}',
        b'"\\ud800"',
        b"123456789012345678901234567890",
        b"1e400",
        b'{"a": 1, "a": 2}',
        '{"é": "\u2028"}'.encode(),
    ],
)
def test_fastjson_loads_answers_what_json_loads_answers(text: bytes) -> None:
    expected = json.loads(text)
    got = fastjson.loads(bytearray(text))
    if isinstance(expected, float) and expected != expected:
        assert got != got
    else:
        assert got == expected


def test_fastjson_loads_raises_where_json_loads_raises() -> None:
    with pytest.raises(json.JSONDecodeError):
        fastjson.loads(b'{"a": ')
