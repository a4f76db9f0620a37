"""``POST /v1/online-rules/{id}/sinks/redeliver`` and ``POST /v1/jobs/{id}/sinks/redeliver`` (issue 52): a
rule's (a job's) failed deliveries sent again, once the operator fixed what made them fail (the workspace's
``network_allow``, a secret, the sink's URL).

Contract: the rule (job) must be the caller's workspace's (404 otherwise, the same as an unknown one); the
deliveries in ``states`` (default ``failed``) go back to ``pending`` with ``attempts`` 0 and their last error
kept until the next attempt (``store/sinks/requeue.py``), and the delivery loop is woken. Answer
``{"requeued": n}``; nothing requeued is a 200 with a ``message`` saying so (not an error). The same
idempotency key is sent again: a tool that already got a score records it once.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from evaluator_host.api.deps import ServicesDep, WorkspaceDep
from evaluator_host.services import Services
from evaluator_host.sinks.models import Redeliver, Redelivered
from evaluator_host.store.db import utcnow
from evaluator_host.store.sinks.requeue import requeue

router = APIRouter(tags=["online"])


async def _requeue(services: Services, source: str, owner_id: str, body: Redeliver | None) -> Redelivered:
    states = (body or Redeliver()).states
    engine = services.store.engine
    n = await asyncio.to_thread(requeue, engine, source, owner_id, states, utcnow())
    if n:
        services.sink_delivery.wake()
        return Redelivered(requeued=n)
    said = f"nothing to send again: no delivery of this {source} is {' or '.join(states)}"
    return Redelivered(requeued=0, message=said)


@router.post("/online-rules/{rule_id}/sinks/redeliver", response_model=Redelivered, response_model_exclude_none=True)
async def redeliver_rule(
    rule_id: str, services: ServicesDep, workspace: WorkspaceDep, body: Redeliver | None = None
) -> Redelivered:
    """Send the rule's failed deliveries again (``states`` to choose; see docs/online.md, *When deliveries
    failed*)."""
    await asyncio.to_thread(services.online.rules.get, workspace, rule_id)  # 404: not the workspace's
    return await _requeue(services, "rule", rule_id, body)


@router.post("/jobs/{job_id}/sinks/redeliver", response_model=Redelivered, response_model_exclude_none=True)
async def redeliver_job(
    job_id: str, services: ServicesDep, workspace: WorkspaceDep, body: Redeliver | None = None
) -> Redelivered:
    """Send the job's failed deliveries of its results again (as for a rule)."""
    await services.runner.get(workspace, job_id)  # 404: not the workspace's
    return await _requeue(services, "job", job_id, body)
