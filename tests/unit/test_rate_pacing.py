"""``QuotaGuard``'s receipts and the pacing of online rules (issue 47.6): what a receipt covers, and how the
rows over the rate are put off — a bucketful at a time, each batch after the ones put off before it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from evaluator_host.errors import EvaluatorHostError, QuotaExceeded
from evaluator_host.tenancy.quotas import Charged, QuotaGuard, job_chunks


@dataclass
class _Record:
    quotas: dict[str, Any] = field(default_factory=dict)


class _Workspaces:
    """The one read ``QuotaGuard`` makes of the workspaces (``get(id).quotas``)."""

    def __init__(self, **quotas: dict[str, Any]) -> None:
        self.records = {ws: _Record(q) for ws, q in quotas.items()}

    def get(self, workspace_id: str) -> _Record:
        return self.records.get(workspace_id, _Record())


def guard(rate: float | None) -> QuotaGuard:
    quotas = {} if rate is None else {"max_evaluations_per_s": rate}
    return QuotaGuard(_Workspaces(ws_a=quotas))  # type: ignore[arg-type]


def test_a_receipt_covers_its_cases_once_in_its_own_workspace() -> None:
    charged = guard(None).take_evaluations("ws_a", 3)
    charged.spend("ws_a", 2)
    with pytest.raises(EvaluatorHostError, match="uncharged code never runs"):
        charged.spend("ws_a", 2)
    with pytest.raises(EvaluatorHostError, match="receipt of ws_a"):
        guard(None).take_evaluations("ws_a", 1).spend("ws_b", 1)
    with pytest.raises(TypeError):
        Charged("ws_a", 1)  # only the guard makes receipts
    job = job_chunks("ws_a")
    job.spend("ws_a", 10_000)  # a job's chunks: unmetered
    assert job.cases is None


def test_a_call_over_the_rate_is_refused_and_one_larger_than_the_bucket_never_fits() -> None:
    g = guard(5)
    assert g.take_evaluations("ws_a", 5).cases == 5
    with pytest.raises(QuotaExceeded) as over:
        g.take_evaluations("ws_a", 1)
    assert over.value.retry_after_s == 1
    with pytest.raises(QuotaExceeded) as never:
        g.take_evaluations("ws_a", 6)
    assert never.value.retry_after_s is None


def test_paced_rows_run_as_the_bucket_holds_and_the_rest_is_put_off_a_bucketful_at_a_time() -> None:
    g = guard(5)
    charged, due = g.pace_evaluations("ws_a", 12)
    assert charged.cases == 5 and len(due) == 7
    # the bucket is empty: five more fit after 1 s, the last two after 2 s
    assert due == pytest.approx([1.0] * 5 + [2.0] * 2, abs=0.05)
    # rows paced next queue behind those: their batch is due when the refill has room after them
    charged, due = g.pace_evaluations("ws_a", 3)
    assert charged.cases == 0 and due == pytest.approx([3.0] * 3, abs=0.05)
    assert guard(None).pace_evaluations("ws_a", 1000)[0].cases == 1000  # no quota: all now
