"""What both clients share: where the service is, the key, and every call of the API as a method.

Contract: :func:`endpoint` resolves the base URL (the argument, else ``EVALUATOR_HOST_URL``, else
``http://127.0.0.1:8000``) and the key (the argument, else ``EVALUATOR_HOST_API_KEY``, else none: an
open service). :class:`Operations` holds one method a route (``op`` of the builders in
``resources.py``, ``datasets.py``, ``workspace.py`` and ``review.py``); a client class adds ``_send`` and the steps
that take several calls. :func:`progressed` is the rule of ``wait_job``'s callback: called when the
status or the counts changed since the last call (and so once at least).
"""

from __future__ import annotations

import os

from evaluator_host.client import datasets, resources, review, workspace
from evaluator_host.client.calls import op
from evaluator_host.jobs.models import Job

__all__ = ["API_KEY_ENV", "DEFAULT_URL", "FINISHED", "URL_ENV", "Operations", "endpoint", "progressed"]

URL_ENV = "EVALUATOR_HOST_URL"
API_KEY_ENV = "EVALUATOR_HOST_API_KEY"
DEFAULT_URL = "http://127.0.0.1:8000"
FINISHED = frozenset({"succeeded", "failed", "cancelled", "stopped"})
MAX_POLL_S = 60.0  # the service's longest wait_s
POLL_S = 2.0  # one long poll of GET /v1/jobs/{id}?wait_s= : answered at the job's end or after this long


def endpoint(base_url: str | None, api_key: str | None) -> tuple[str, dict[str, str]]:
    """The base URL (no trailing slash) and the headers every request carries."""
    url = (base_url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
    headers = {"accept": "application/json", "user-agent": "evaluator-host-client"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    return url, headers


def progressed(job: Job, last: Job | None) -> bool:
    """Whether ``wait_job`` calls its callback with ``job`` (``last``: the job it was last called with)."""
    return last is None or (job.status, job.progress) != (last.status, last.progress)


class Operations:
    """One method a route of the API (each documented by its builder)."""

    # resources.py
    request = op(resources.request)
    health = op(resources.health)
    evaluate = op(resources.evaluate)
    evaluate_cases = op(resources.evaluate_cases)
    evaluate_by_id = op(resources.evaluate_by_id)
    evaluate_cases_by_id = op(resources.evaluate_cases_by_id)
    create_evaluator = op(resources.create_evaluator)
    replace_evaluator = op(resources.replace_evaluator)
    update_evaluator = op(resources.update_evaluator)
    get_evaluator = op(resources.get_evaluator)
    list_evaluators = op(resources.list_evaluators)
    list_revisions = op(resources.list_revisions)
    delete_evaluator = op(resources.delete_evaluator)
    test_evaluator = op(resources.test_evaluator)
    compare_revisions = op(resources.compare_revisions)
    migrate = op(resources.migrate)
    migrate_evaluator = op(resources.migrate_evaluator)
    build_runtime = op(resources.build_runtime)
    get_runtime = op(resources.get_runtime)
    list_runtimes = op(resources.list_runtimes)
    runtime_lock = op(resources.runtime_lock)
    runtime_lock_file = op(resources.runtime_lock_file)
    replay_result = op(resources.replay_result)
    # datasets.py
    upload_dataset = op(datasets.upload_dataset)
    get_dataset = op(datasets.get_dataset)
    list_datasets = op(datasets.list_datasets)
    dataset_rows = op(datasets.dataset_rows)
    delete_dataset = op(datasets.delete_dataset)
    start_job = op(datasets.start_job)
    get_job = op(datasets.get_job)
    list_jobs = op(datasets.list_jobs)
    cancel_job = op(datasets.cancel_job)
    delete_job = op(datasets.delete_job)
    job_results = op(datasets.job_results)
    # workspace.py
    create_rule = op(workspace.create_rule)
    get_rule = op(workspace.get_rule)
    list_rules = op(workspace.list_rules)
    update_rule = op(workspace.update_rule)
    delete_rule = op(workspace.delete_rule)
    rule_scores = op(workspace.rule_scores)
    rule_stats = op(workspace.rule_stats)
    test_online_rule = op(workspace.test_online_rule)
    rule_shadow = op(workspace.rule_shadow)
    promote_rule = op(workspace.promote_rule)
    redeliver_rule_sinks = op(workspace.redeliver_rule_sinks)
    redeliver_job_sinks = op(workspace.redeliver_job_sinks)
    set_candidate_revision = op(workspace.set_candidate_revision)
    list_traces = op(workspace.list_traces)
    get_trace = op(workspace.get_trace)
    list_sessions = op(workspace.list_sessions)
    backfill_rule = op(workspace.backfill_rule)
    get_backfill = op(workspace.get_backfill)
    cancel_backfill = op(workspace.cancel_backfill)
    get_session = op(workspace.get_session)
    put_secret = op(workspace.put_secret)
    list_secrets = op(workspace.list_secrets)
    delete_secret = op(workspace.delete_secret)
    create_workspace = op(workspace.create_workspace)
    list_workspaces = op(workspace.list_workspaces)
    get_workspace = op(workspace.get_workspace)
    update_workspace = op(workspace.update_workspace)
    create_key = op(workspace.create_key)
    list_keys = op(workspace.list_keys)
    revoke_key = op(workspace.revoke_key)
    # review.py (issue 53)
    create_review_queue = op(review.create_review_queue)
    list_review_queues = op(review.list_review_queues)
    get_review_queue = op(review.get_review_queue)
    refill_review_queue = op(review.refill_review_queue)
    delete_review_queue = op(review.delete_review_queue)
    review_items = op(review.review_items)
    give_verdict = op(review.give_verdict)
    verdict_history = op(review.verdict_history)
    export_review = op(review.export_review)
    verdicts_to_fixtures = op(review.verdicts_to_fixtures)
    agreement = op(review.agreement)
