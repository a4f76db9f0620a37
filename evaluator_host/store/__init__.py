"""Durable storage (SQLAlchemy 2; SQLite in the data dir by default)."""

from evaluator_host.store import job_generations as _job_generations  # noqa: F401  (registers the table)
from evaluator_host.store import online_rows as _online_rows  # noqa: F401  (registers the online tables)
from evaluator_host.store import result_cache as _result_cache  # noqa: F401  (registers the cache tables)
from evaluator_host.store.evaluators import EvaluatorStore, RevisionRecord

__all__ = ["EvaluatorStore", "RevisionRecord"]
