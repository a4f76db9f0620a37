"""Tables and engine set-up."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Integer, String, Text, create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = ["Base", "EvaluatorRow", "RevisionRow", "make_engine", "utcnow"]


def utcnow() -> datetime:
    """Timezone-aware now."""
    return datetime.now(UTC)


class Base(DeclarativeBase):
    """Declarative base."""


class EvaluatorRow(Base):
    """An evaluator: its identity and latest revision number; soft-deleted."""

    __tablename__ = "evaluators"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    latest_revision: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class RevisionRow(Base):
    """One immutable revision of an evaluator."""

    __tablename__ = "evaluator_revisions"

    evaluator_id: Mapped[str] = mapped_column(ForeignKey("evaluators.id"), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text)
    language: Mapped[str] = mapped_column(String(20))
    interface: Mapped[str] = mapped_column(String(20))
    code: Mapped[str] = mapped_column(Text)
    packages: Mapped[dict[str, Any]] = mapped_column(JSON)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    runtime_id: Mapped[str] = mapped_column(String(80))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


def make_engine(url: str) -> Engine:
    """Create the engine and the tables; SQLite gets WAL and a busy timeout."""
    connect_args: dict[str, Any] = {}
    if url.startswith("sqlite"):
        connect_args = {"check_same_thread": False, "timeout": 30}
    engine = create_engine(url, connect_args=connect_args)
    if url.startswith("sqlite"):

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

    Base.metadata.create_all(engine)
    return engine
