"""Verdicts become fixtures (``POST /v1/review-queues/{id}/fixtures``).

Contract: each chosen item of the queue — every reviewed one, or the ids given (each must be reviewed: 422
otherwise; an id the queue does not hold: 404) — becomes a fixture of the queue's evaluator named
``review:<item id>``: the case the evaluator judged (``inputs``, ``outputs``, ``trace``; an item whose case
is no longer stored is refused, 422) and the expectation of its current verdict: ``passed``, and ``score``
within ``tolerance`` when the verdict gave one. They are added to the fixtures of the evaluator's latest
revision (a fixture of the same item is replaced: the newer verdict counts) in a NEW revision with the same
code, saved as the latest even when its code fails some of them (``force``: the verdicts are the truth
being recorded, not a change to test) — those are answered as ``disagreeing``. From then on a save that
fails them is stored as a draft and refused with 409 ``FixturesFailed`` unless forced, as for any fixture.
Bounded like a save: at most ``MAX_FIXTURES`` fixtures, and their JSON within ``max_body_bytes`` (422).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import ValidationError

from evaluator_host.errors import DefinitionError, LimitError, NotFoundError, NothingCompared
from evaluator_host.evaluation.models import MAX_FIXTURES, EvaluatorPatch
from evaluator_host.evaluation.usecases import Components
from evaluator_host.review.models import FixturesAdded, FixturesRequest
from evaluator_host.review.queues import Review

__all__ = ["PREFIX", "verdicts_to_fixtures"]

PREFIX = "review:"  # a verdict's fixture is named PREFIX + its item id


async def verdicts_to_fixtures(
    components: Components, review: Review, workspace: str, queue_id: str, body: FixturesRequest
) -> FixturesAdded:
    """Add the chosen items' verdicts to the queue's evaluator as fixtures (see the module docstring)."""
    queue = await asyncio.to_thread(review.queues.get, workspace, queue_id)
    every = await asyncio.to_thread(review.store.items, workspace, queue_id, None)
    if body.items is not None:
        held = {i.id: i for i in every}
        missing = [i for i in body.items if i not in held]
        if missing:
            raise NotFoundError(f"review queue {queue_id!r} has no item {missing[0]!r}")
        chosen = [held[i] for i in dict.fromkeys(body.items)]
        pending = [i.id for i in chosen if i.verdict is None]
        if pending:
            raise DefinitionError(f"item {pending[0]!r} has no verdict yet: only reviewed items become fixtures")
    else:
        chosen = [i for i in every if i.verdict is not None]
        if not chosen:
            raise NothingCompared(f"review queue {queue_id!r} has no reviewed item", field="verdicts", rows=0)
    made: list[dict[str, Any]] = []
    for item in chosen:
        case, problem = await asyncio.to_thread(review.case_of, workspace, item)
        if case is None:
            raise DefinitionError(f"item {item.id!r} cannot become a fixture: {problem}")
        assert item.verdict is not None
        expect: dict[str, Any] = {"passed": item.verdict.passed}
        if item.verdict.score is not None:
            expect |= {"score": item.verdict.score, "tolerance": body.tolerance}
        fixture = {"name": PREFIX + item.id, "inputs": case.inputs, "outputs": case.outputs, "trace": case.trace}
        made.append(fixture | {"expect": expect})
    latest = await asyncio.to_thread(components.evaluators.store.shown, workspace, queue.evaluator_id)
    names = {f["name"] for f in made}
    kept = [f for f in latest.fixtures if f.get("name") not in names]
    fixtures = kept + made
    if len(fixtures) > MAX_FIXTURES:
        raise LimitError(
            f"the evaluator would hold {len(fixtures)} fixtures, more than {MAX_FIXTURES}: add fewer items at once"
        )
    size = len(json.dumps(fixtures, default=str).encode())
    if size > components.settings.max_body_bytes:
        raise LimitError(
            f"these fixtures take {size} bytes, more than max_body_bytes={components.settings.max_body_bytes} "
            "(what one save may send): add fewer items at once"
        )
    try:
        patch = EvaluatorPatch(fixtures=fixtures, force=True)
    except ValidationError as exc:
        raise LimitError(f"the verdicts do not make valid fixtures: {exc.errors()[0]['msg']}") from None
    saved = await components.evaluators.patch(workspace, queue.evaluator_id, patch)
    report = saved.fixture_report
    failing = {o.name for o in report.results if not o.passed} if report else set()
    return FixturesAdded(
        evaluator_id=saved.id,
        revision=saved.revision,
        added=len(made) - (len(latest.fixtures) - len(kept)),
        replaced=len(latest.fixtures) - len(kept),
        fixtures=len(fixtures),
        disagreeing=[f["name"] for f in made if f["name"] in failing],
    )
