"""Durable storage (SQLAlchemy 2; SQLite in the data dir by default)."""

from evaluator_host.store.evaluators import EvaluatorStore, RevisionRecord

__all__ = ["EvaluatorStore", "RevisionRecord"]
