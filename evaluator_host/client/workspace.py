"""The builders of the calls of a workspace's online rules and traces, its secrets, and the
operator's workspaces and keys (``calls.py`` states the contract).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from evaluator_host.client.calls import Call, body_of, model, nothing
from evaluator_host.evaluation.models import (
    Case,
    EvaluatorSettings,
)
from evaluator_host.online.candidates.shadow_models import Promotion, ShadowComparison
from evaluator_host.online.models import (
    Backfill,
    BackfillDryRun,
    Rule,
    RuleFilter,
    RuleList,
    RuleMapping,
    RuleStats,
    RuleTarget,
    RuleTestAnswer,
    ScoreList,
    SessionDetail,
    SessionList,
    TraceDetail,
    TraceList,
)
from evaluator_host.sinks.models import Redelivered
from evaluator_host.tenancy.models import ApiKeyCreated, ApiKeyList, Quotas, SecretList, Workspace, WorkspaceList

Json = Any
Settings = EvaluatorSettings | Mapping[str, Any] | None
Cases = Sequence[Case | Mapping[str, Any]]

# --- online rules and traces --------------------------------------------------------------------


def create_rule(
    evaluator_id: str,
    *,
    name: str | None = None,
    revision: int | None = None,
    sampling_rate: float | None = None,
    filter: RuleFilter | Mapping[str, Any] | None = None,
    mapping: RuleMapping | Mapping[str, Any] | None = None,
    enabled: bool | None = None,
    target: RuleTarget | Mapping[str, Any] | None = None,
    candidate_revision: int | None = None,
) -> Call[Rule]:
    """``POST /v1/online-rules``: score the workspace's traces that match ``filter`` with the evaluator
    (``target``: ``{"level": "span"}`` scores each matching span, ``{"level": "session", "session_key"?,
    "quiet_s"?}`` each quiet session; default: each trace; ``candidate_revision``: a revision scored beside
    the live one, stored apart — :func:`rule_shadow`, :func:`promote_rule`)."""
    body = body_of(
        evaluator_id=evaluator_id, name=name, revision=revision, sampling_rate=sampling_rate, filter=filter,
        mapping=mapping, enabled=enabled, target=target, candidate_revision=candidate_revision,
    )  # fmt: skip
    return Call("POST", "/v1/online-rules", model(Rule), body)


def test_online_rule(
    evaluator_id: str,
    *,
    revision: int | None = None,
    filter: RuleFilter | Mapping[str, Any] | None = None,
    mapping: RuleMapping | Mapping[str, Any] | None = None,
    target: RuleTarget | Mapping[str, Any] | None = None,
    limit: int | None = None,
) -> Call[RuleTestAnswer]:
    """``POST /v1/online-rules/test``: score a rule body now on the latest matching stored targets (at most
    ``limit``, default 20), storing nothing; ``matched`` 0 (with ``message``) when nothing matched."""
    body = body_of(
        evaluator_id=evaluator_id, revision=revision, filter=filter, mapping=mapping, target=target, limit=limit
    )
    return Call("POST", "/v1/online-rules/test", model(RuleTestAnswer), body)


def get_rule(rule_id: str) -> Call[Rule]:
    """``GET /v1/online-rules/{id}``."""
    return Call("GET", f"/v1/online-rules/{rule_id}", model(Rule))


def list_rules(*, limit: int | None = None, cursor: str | None = None) -> Call[RuleList]:
    """``GET /v1/online-rules``."""
    return Call("GET", "/v1/online-rules", model(RuleList), params={"limit": limit, "cursor": cursor})


def update_rule(rule_id: str, **fields: Any) -> Call[Rule]:
    """``PATCH /v1/online-rules/{id}`` (``enabled=False`` pauses it)."""
    return Call("PATCH", f"/v1/online-rules/{rule_id}", model(Rule), body_of(**fields))


def delete_rule(rule_id: str) -> Call[None]:
    """``DELETE /v1/online-rules/{id}``."""
    return Call("DELETE", f"/v1/online-rules/{rule_id}", nothing)


def rule_scores(
    rule_id: str,
    *,
    limit: int | None = None,
    cursor: str | None = None,
    since: datetime | str | None = None,
    until: datetime | str | None = None,
) -> Call[ScoreList]:
    """``GET /v1/online-rules/{id}/scores``, newest first."""
    params = {"limit": limit, "cursor": cursor, "since": since, "until": until}
    return Call("GET", f"/v1/online-rules/{rule_id}/scores", model(ScoreList), params=params)


def rule_stats(
    rule_id: str, *, bucket: int | None = None, since: datetime | str | None = None, until: datetime | str | None = None
) -> Call[RuleStats]:
    """``GET /v1/online-rules/{id}/stats``: counts, mean score and pass rate per ``bucket`` seconds."""
    params = {"bucket": bucket, "since": since, "until": until}
    return Call("GET", f"/v1/online-rules/{rule_id}/stats", model(RuleStats), params=params)


def rule_shadow(rule_id: str, *, revision: int | None = None, examples: int | None = None) -> Call[ShadowComparison]:
    """``GET /v1/online-rules/{id}/shadow``: the candidate revision against the live one over every target both
    scored (flips, mean delta, ``examples`` of them, agreement with the rule's review verdicts); ``revision``:
    another candidate revision the rule had (default: its candidate, else the last one)."""
    params = {"revision": revision, "examples": examples}
    return Call("GET", f"/v1/online-rules/{rule_id}/shadow", model(ShadowComparison), params=params)


def set_candidate_revision(rule_id: str, revision: int | None) -> Call[Rule]:
    """``PATCH /v1/online-rules/{id}`` with ``candidate_revision``: a revision of the rule's evaluator scored beside
    the live one on every target from now on, stored apart (422 when it does not exist); None clears it."""
    return Call("PATCH", f"/v1/online-rules/{rule_id}", model(Rule), {"candidate_revision": revision})


def promote_rule(rule_id: str) -> Call[Promotion]:
    """``POST /v1/online-rules/{id}/promote``: the candidate becomes the live revision (from the next target
    claimed on) and the rule has no candidate; 409 (``ConflictError``) when it has none (set one with
    :func:`set_candidate_revision`)."""
    return Call("POST", f"/v1/online-rules/{rule_id}/promote", model(Promotion))


def list_traces(*, limit: int | None = None, cursor: str | None = None) -> Call[TraceList]:
    """``GET /v1/traces``: the latest traces with their scores."""
    return Call("GET", "/v1/traces", model(TraceList), params={"limit": limit, "cursor": cursor})


def get_trace(trace_id: str) -> Call[TraceDetail]:
    """``GET /v1/traces/{id}``: the trace evaluators get, and every rule's score of it."""
    return Call("GET", f"/v1/traces/{trace_id}", model(TraceDetail))


def backfill_rule(
    rule_id: str,
    *,
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    limit: int | None = None,
    dry_run: bool | None = None,
) -> Call[Backfill | BackfillDryRun]:
    """``POST /v1/online-rules/{id}/backfill``: score the rule's stored traces first seen in ``[since, until)``
    (what it missed; everything again with a new revision). ``dry_run``: a :class:`BackfillDryRun` at once,
    nothing stored; otherwise the :class:`Backfill` started (202)."""
    body = body_of(since=_iso(since), until=_iso(until), limit=limit, dry_run=dry_run)
    return Call("POST", f"/v1/online-rules/{rule_id}/backfill", _backfill_or_dry_run, body)


def _iso(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def _backfill_or_dry_run(response: httpx.Response) -> Backfill | BackfillDryRun:
    data = response.json()
    return BackfillDryRun.model_validate(data) if "estimate_s" in data else Backfill.model_validate(data)


def get_backfill(rule_id: str, backfill_id: str) -> Call[Backfill]:
    """``GET /v1/online-rules/{id}/backfills/{backfill_id}``: its progress (``running``, ``done``, ``failed``:
    every target it scored failed, ``cancelled``)."""
    return Call("GET", f"/v1/online-rules/{rule_id}/backfills/{backfill_id}", model(Backfill))


def cancel_backfill(rule_id: str, backfill_id: str) -> Call[Backfill]:
    """``DELETE /v1/online-rules/{id}/backfills/{backfill_id}``: its targets still queued are dropped."""
    return Call("DELETE", f"/v1/online-rules/{rule_id}/backfills/{backfill_id}", model(Backfill))


def list_sessions(*, limit: int | None = None, cursor: str | None = None) -> Call[SessionList]:
    """``GET /v1/sessions``: the workspace's sessions (traces grouped by a session id), first seen newest first."""
    return Call("GET", "/v1/sessions", model(SessionList), params={"limit": limit, "cursor": cursor})


def get_session(session_id: str) -> Call[SessionDetail]:
    """``GET /v1/sessions/{id}``: the session dict a session-level rule's evaluator gets, and its scores."""
    return Call("GET", f"/v1/sessions/{quote(session_id, safe='')}", model(SessionDetail))


# --- secrets ------------------------------------------------------------------------------------


def put_secret(name: str, value: str) -> Call[None]:
    """``PUT /v1/secrets/{name}`` (the value is never shown again)."""
    return Call("PUT", f"/v1/secrets/{name}", nothing, {"value": value})


def list_secrets() -> Call[SecretList]:
    """``GET /v1/secrets``: names only."""
    return Call("GET", "/v1/secrets", model(SecretList))


def delete_secret(name: str) -> Call[None]:
    """``DELETE /v1/secrets/{name}``."""
    return Call("DELETE", f"/v1/secrets/{name}", nothing)


# --- workspaces and keys (the operator key) -----------------------------------------------------


def create_workspace(name: str) -> Call[Workspace]:
    """``POST /v1/workspaces``."""
    return Call("POST", "/v1/workspaces", model(Workspace), {"name": name})


def list_workspaces() -> Call[WorkspaceList]:
    """``GET /v1/workspaces``."""
    return Call("GET", "/v1/workspaces", model(WorkspaceList))


def get_workspace(workspace_id: str) -> Call[Workspace]:
    """``GET /v1/workspaces/{id}``."""
    return Call("GET", f"/v1/workspaces/{workspace_id}", model(Workspace))


def update_workspace(
    workspace_id: str,
    *,
    name: str | None = None,
    quotas: Quotas | Mapping[str, Any] | None = None,
    network_allow: Sequence[str] | None = None,
) -> Call[Workspace]:
    """``PATCH /v1/workspaces/{id}`` (quotas key by key; a quota set to None in a dict is unlimited)."""
    body = body_of(name=name, network_allow=network_allow)
    if quotas is not None:  # None inside quotas means "unlimited": kept
        body["quotas"] = quotas.model_dump(mode="json", exclude_unset=True) if isinstance(quotas, Quotas) else quotas
    return Call("PATCH", f"/v1/workspaces/{workspace_id}", model(Workspace), body)


def create_key(workspace_id: str, name: str = "key") -> Call[ApiKeyCreated]:
    """``POST /v1/workspaces/{id}/keys``: the key itself is in the answer this once."""
    return Call("POST", f"/v1/workspaces/{workspace_id}/keys", model(ApiKeyCreated), {"name": name})


def list_keys(workspace_id: str | None = None) -> Call[ApiKeyList]:
    """``GET /v1/keys`` (of one workspace when given)."""
    return Call("GET", "/v1/keys", model(ApiKeyList), params={"workspace_id": workspace_id})


def revoke_key(key_id: str) -> Call[None]:
    """``DELETE /v1/keys/{id}``."""
    return Call("DELETE", f"/v1/keys/{key_id}", nothing)


def redeliver_rule_sinks(rule_id: str, states: Sequence[str] | None = None) -> Call[Redelivered]:
    """``POST /v1/online-rules/{id}/sinks/redeliver``: the rule's failed deliveries (or those in ``states``)
    sent again; ``requeued`` 0 with a ``message`` when none was."""
    body = body_of(states=list(states) if states is not None else None)
    return Call("POST", f"/v1/online-rules/{rule_id}/sinks/redeliver", model(Redelivered), body)


def redeliver_job_sinks(job_id: str, states: Sequence[str] | None = None) -> Call[Redelivered]:
    """``POST /v1/jobs/{id}/sinks/redeliver``: as :func:`redeliver_rule_sinks`, for a job's results."""
    body = body_of(states=list(states) if states is not None else None)
    return Call("POST", f"/v1/jobs/{job_id}/sinks/redeliver", model(Redelivered), body)
