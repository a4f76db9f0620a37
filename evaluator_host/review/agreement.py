"""Agreement per revision (``GET /v1/evaluators/{id}/agreement``): a revision's answers against people's.

Contract: over every reviewed item of the evaluator in the workspace's live queues — one per source (a
rule's target, a job's row; reviewed in two queues, the newer verdict counts) — the revision asked
(default: the evaluator's latest) is compared with the current verdicts (:mod:`evaluator_host.review.metrics`).
Where the item's stored answer is that revision's, it is used as stored; the other items (scored by another
revision) are run on the revision now through the evaluation use case (:func:`run_stored`), answered from the
result cache where it can be, charged to the workspace's evaluation rate (``QuotaExceeded``, 429) like a call.
An item whose case is gone (its trace past retention and never reviewed with it kept) cannot run and is
``skipped``. No verdict at all — or none left to compare — is 422 ``NothingCompared``, never a row of zeros.
"""

from __future__ import annotations

import asyncio
from typing import Any

from evaluator_host.errors import NothingCompared
from evaluator_host.evaluation.models import Case
from evaluator_host.evaluation.usecases import Components, run_stored
from evaluator_host.review.metrics import Figures, Pair, agreement
from evaluator_host.review.models import Agreement, Confusion, LabelAgreement
from evaluator_host.review.queues import Review
from evaluator_host.store.review.items import ItemRecord

__all__ = ["agreement_of", "figure_fields", "reviewed_once"]


def reviewed_once(items: list[ItemRecord]) -> list[ItemRecord]:
    """One item per source (its newest verdict), in the order given."""
    newest: dict[tuple[str | None, str | None, str], ItemRecord] = {}
    for item in items:
        key = (item.rule_id, item.job_id, item.source_key)
        known = newest.get(key)
        if known is None or (item.verdict and known.verdict and item.verdict.created_at > known.verdict.created_at):
            newest[key] = item
    return list(newest.values())


def _pair(answer_passed: bool | None, score: float | None, label: str | None, item: ItemRecord) -> Pair:
    assert item.verdict is not None
    v = item.verdict
    return Pair(answer_passed, score, label, v.passed, v.score, v.label)


async def agreement_of(
    components: Components,
    review: Review,
    workspace: str,
    evaluator_id: str,
    revision: int | None,
) -> Agreement:
    """The agreement of ``revision`` (None: the latest) of ``evaluator_id`` (see the module docstring)."""
    record = await asyncio.to_thread(components.evaluators.store.get, workspace, evaluator_id, revision)  # 404s
    items = reviewed_once(await asyncio.to_thread(review.store.reviewed_of, workspace, evaluator_id))
    if not items:
        raise NothingCompared(
            f"evaluator {evaluator_id!r} has no reviewed items: give verdicts in a review queue first "
            "(POST /v1/review-queues/{id}/items/{item_id}/verdict)",
            field="verdicts",
            rows=0,
        )
    pairs = [_pair(i.passed, i.score, i.label, i) for i in items if i.revision == record.revision]
    others = [i for i in items if i.revision != record.revision]
    runnable: list[tuple[ItemRecord, Case]] = []
    cached = 0
    for item in others:
        case, _ = await asyncio.to_thread(review.case_of, workspace, item)
        if case is not None:
            runnable.append((item, case))
    if runnable:
        cases = [c for _, c in runnable]
        charged = components.quotas.take_evaluations(workspace, len(cases))  # a call's charge: 429 over the rate
        ran = await run_stored(components, workspace, evaluator_id, record.revision, cases, charged, review.cache)
        pairs += [_pair(r.passed, r.score, r.label, i) for (i, _), r in zip(runnable, ran.results, strict=True)]
        cached = sum(1 for r in ran.results if r.cached)
    if not pairs:
        raise NothingCompared(
            f"none of the {len(items)} reviewed items of evaluator {evaluator_id!r} can be compared with revision "
            f"{record.revision}: their cases are no longer stored",
            field="cases",
            rows=0,
        )
    return Agreement(
        evaluator_id=evaluator_id,
        revision=record.revision,
        ran=len(runnable),
        cached=cached,
        skipped=len(others) - len(runnable),
        **figure_fields(agreement(pairs)),
    )


def figure_fields(f: Figures) -> dict[str, Any]:
    """The agreement answer's figures (``Agreement``'s and a shadow side's common fields) from ``f``."""
    return {
        "reviewed": f.reviewed,
        "accuracy": f.accuracy,
        "cohen_kappa": f.kappa,
        "cohen_kappa_reason": f.kappa_reason,
        "confusion": Confusion(tp=f.tp, fp=f.fp, fn=f.fn, tn=f.tn),
        "evaluator_unanswered": f.unanswered,
        "score_mae": f.score_mae,
        "scored": f.scored,
        "spearman": f.spearman,
        "spearman_reason": f.spearman_reason,
        "by_label": {
            label: LabelAgreement(reviewed=n, accuracy=acc, label_agreement=same)
            for label, (n, acc, same) in f.by_label.items()
        },
    }
