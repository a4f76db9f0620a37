"""Durable storage (SQLAlchemy 2; SQLite in the data dir by default).

One room on purpose: one module per table group (``db`` the engine and the core tables, ``schema`` the
revision, ``evaluators``, ``jobs`` with ``job_results``, ``job_records`` and ``job_generations``, ``workspaces``,
``secrets``, ``idempotency``, ``result_cache``, ``online_rows`` the online tables with ``online_spans``,
``online_rules``, ``online_scores``, ``online_sessions``, ``online_routing``, ``online_readiness``,
``online_decisions``, ``online_budgets``, ``online_usage``, ``online_backfills`` (with ``online_case_hashes``),
``online_refs`` and
``online_views`` their repositories, ``sink_deliveries`` a score's deliveries with ``sink_records``,
``job_sink_deliveries`` a job's, ``job_leases`` who holds a job, ``rate_buckets`` the shared rate quota;
``review_rows`` the review tables with
``review_queues``, ``review_fill`` and ``review_items``): a table group changes for one reason, each module
is read as one unit, and a new group is a new module beside them.

May import: ``errors``, ``storage``, ``settings`` and the pure pieces it stores (``evaluation.aggregate``,
``tenancy.quotas``); never the evaluation path, ``jobs``, ``sandbox``, ``builds`` or above
(``tests/unit/test_layers.py``).
"""

from evaluator_host.store import job_generations as _job_generations  # noqa: F401  (registers the table)
from evaluator_host.store import online_case_hashes as _online_case_hashes  # noqa: F401  (registers the table)
from evaluator_host.store import online_rows as _online_rows  # noqa: F401  (registers the online tables)
from evaluator_host.store import rate_buckets as _rate_buckets  # noqa: F401  (registers the table)
from evaluator_host.store import result_cache as _result_cache  # noqa: F401  (registers the cache tables)
from evaluator_host.store import review_rows as _review_rows  # noqa: F401  (registers the review tables)
from evaluator_host.store.evaluators import EvaluatorStore, RevisionRecord

__all__ = ["EvaluatorStore", "RevisionRecord"]
