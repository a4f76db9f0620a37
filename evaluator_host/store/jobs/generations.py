"""A model-target job's generations (migration ``0007``): one row per (job, row index), stored before
the row is scored.

The resume invariant of model-target jobs lives here: a generation is committed before its row is
scored, and ``(job_id, idx)`` is the primary key, so a job resumed after a crash finds every row that
has a generation and scores it without calling the model again. ``messages`` is the JSON of what was
sent; ``text`` None with ``error`` set is a row whose call failed (its result is an error). No column
ever holds the target's key (its secret's name only, in the job's ``target``). Every statement is
portable SQL (SQLite and PostgreSQL); call from a thread: they block.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import BigInteger, Float, ForeignKey, Integer, String, Table, Text, delete, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, mapped_column

from evaluator_host.store.db import Base, JobResultRow

__all__ = ["GENERATIONS", "GenerationRecord", "GenerationStore", "JobGenerationRow", "UsageTotals"]


class JobGenerationRow(Base):
    """One row's model call (see the module docstring)."""

    __tablename__ = "job_generations"
    __table_args__ = {"sqlite_with_rowid": False}

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    idx: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    messages: Mapped[str] = mapped_column(Text)  # JSON: the messages sent
    text: Mapped[str | None] = mapped_column(Text, nullable=True)
    finish_reason: Mapped[str | None] = mapped_column(String(40), nullable=True)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    completion_tokens: Mapped[int] = mapped_column(BigInteger)
    total_tokens: Mapped[int] = mapped_column(BigInteger)
    latency_ms: Mapped[float] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    start_ns: Mapped[int] = mapped_column(BigInteger)  # the call that answered (Unix ns): the trace's span
    end_ns: Mapped[int] = mapped_column(BigInteger)


GENERATIONS: Table = JobGenerationRow.__table__  # type: ignore[assignment]
RESULTS: Table = JobResultRow.__table__  # type: ignore[assignment]
_COLUMNS = [c.name for c in GENERATIONS.columns]


@dataclass(frozen=True, slots=True)
class GenerationRecord:
    """A stored generation (``messages`` as JSON text)."""

    job_id: str
    idx: int
    messages: str
    text: str | None
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    latency_ms: float
    attempts: int
    error: str | None
    start_ns: int
    end_ns: int


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """What a job's stored generations add up to."""

    rows: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class GenerationStore:
    """Short transactions over ``job_generations``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add(self, records: Sequence[GenerationRecord]) -> None:
        """Store generations, in one transaction (a row never has two: the primary key)."""
        if not records:
            return
        with self.engine.begin() as conn:
            conn.execute(GENERATIONS.insert(), [{name: getattr(r, name) for name in _COLUMNS} for r in records])

    def unscored(self, job_id: str) -> set[int]:
        """The rows of ``job_id`` that have a generation and no result yet (what a resumed job scores
        without a call; the scored ones it skips anyway): at most the rows in flight when it stopped."""
        g, r = GENERATIONS.c, RESULTS.c
        scored = select(r.idx).where(r.job_id == g.job_id, r.idx == g.idx).exists()
        with self.engine.connect() as conn:
            return set(conn.scalars(select(g.idx).where(g.job_id == job_id, ~scored)))

    def of(self, job_id: str, indices: Iterable[int]) -> dict[int, GenerationRecord]:
        """The generations of ``indices`` (those that have one)."""
        wanted = sorted(set(indices))
        found: dict[int, GenerationRecord] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(wanted), 500):
                part = wanted[start : start + 500]
                query = select(GENERATIONS).where(GENERATIONS.c.job_id == job_id, GENERATIONS.c.idx.in_(part))
                for row in conn.execute(query):
                    found[row.idx] = GenerationRecord(**{name: getattr(row, name) for name in _COLUMNS})
        return found

    def usage(self, job_id: str) -> UsageTotals:
        """The job's generations summed."""
        c = GENERATIONS.c
        query = select(
            func.count(),
            func.sum(c.attempts),
            func.sum(c.prompt_tokens),
            func.sum(c.completion_tokens),
            func.sum(c.total_tokens),
        ).where(c.job_id == job_id)
        with self.engine.connect() as conn:
            row = conn.execute(query).one()
        return UsageTotals(*(int(v or 0) for v in row))

    def delete(self, job_id: str) -> None:
        """Remove the job's generations."""
        with self.engine.begin() as conn:
            conn.execute(delete(GENERATIONS).where(GENERATIONS.c.job_id == job_id))
