"""Durable storage (SQLAlchemy 2; SQLite in the data dir by default).

At the top, the core: ``db`` the engine and the core tables, ``schema`` the revision, ``evaluators``,
``workspaces``, ``secrets``, ``idempotency``, ``result_cache``, ``rate_buckets`` the shared rate quota,
``bucket`` an S3-compatible bucket's client, ``sqlite_checkpoint`` the WAL's checkpoints beside the span writer.
The table families in rooms, one module per table group (a group changes for one reason and is read as one unit; a
new group is a new module in its family's room): ``online/`` (spans, traces, rules, scores, sessions, backfills,
shadow scores), ``jobs/`` (datasets, jobs, results, generations, leases, a job's deliveries), ``review/`` (queues,
items, verdicts), ``sinks/`` (a score's deliveries). Rooms are peers, not layers: one transaction may span families.

May import: ``errors``, ``storage``, ``settings`` and the pure pieces it stores (``evaluation.outcomes``,
``tenancy.quotas``, ``tenancy.reserved``); never the evaluation path, ``jobs``, ``sandbox``, ``builds`` or above
(``tests/unit/test_layers.py``).
"""

from evaluator_host.store import rate_buckets as _rate_buckets  # noqa: F401  (registers the table)
from evaluator_host.store import result_cache as _result_cache  # noqa: F401  (registers the cache tables)
from evaluator_host.store.evaluators import EvaluatorStore, RevisionRecord
from evaluator_host.store.jobs import generations as _job_generations  # noqa: F401  (registers the table)
from evaluator_host.store.online import case_hashes as _online_case_hashes  # noqa: F401  (registers the table)
from evaluator_host.store.online import rows as _online_rows  # noqa: F401  (registers the online tables)
from evaluator_host.store.review import rows as _review_rows  # noqa: F401  (registers the review tables)

__all__ = ["EvaluatorStore", "RevisionRecord"]
