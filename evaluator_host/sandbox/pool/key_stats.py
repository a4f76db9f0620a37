"""What the pool has learned of each key, for :mod:`evaluator_host.sandbox.pool.leasing`'s choices.

Running means (each new figure weighs 0.2) of a lease's duration and of one row's share of it per key, and
of starting and binding a worker; and per key the rate (0.3 per discarded worker, decaying by 0.7 per
clean batch) at which its leases end with the worker discarded — a timeout, a crash, a memory kill, a
flood. A key past :data:`FAILING_RATE` is *failing*: leasing holds it to fewer workers and starts.
Nothing here decides anything; it is only measured.
"""

from __future__ import annotations

__all__ = ["FAILING_RATE", "KeyStats"]

FAILING_RATE = 0.5


def _mean(previous: float | None, value: float) -> float:
    return value if previous is None else 0.8 * previous + 0.2 * value


class KeyStats:
    """Timings and failure rates per key (and the start time of any worker)."""

    def __init__(self) -> None:
        self.lease_s: dict[str, float] = {}  # key -> running mean of a lease's duration
        self.row_s: dict[str, float] = {}  # key -> running mean of one row's share of a lease
        self.start_s: float | None = None  # running mean of starting and binding a worker
        self.fail_rate: dict[str, float] = {}  # key -> running mean of "the lease discarded its worker"
        self.failed_at: dict[str, float] = {}  # key -> when a lease of it last discarded its worker

    def failing(self, key: str) -> bool:
        """Whether most of ``key``'s recent leases ended with its worker discarded."""
        return self.fail_rate.get(key, 0.0) > FAILING_RATE

    def started(self, took: float) -> None:
        """A worker was started and bound (its evaluator loaded) in ``took`` seconds."""
        self.start_s = _mean(self.start_s, took)

    def leased(self, key: str, took: float, rows: int) -> None:
        """A lease of ``key`` that ran ``rows`` rows (more than none) ended after ``took`` seconds."""
        self.lease_s[key] = _mean(self.lease_s.get(key), took)
        self.row_s[key] = _mean(self.row_s.get(key), took / rows)

    def ended(self, key: str, *, healthy: bool, ran: bool, now: float) -> None:
        """A lease of ``key`` ended: its worker discarded (not ``healthy``), or a clean batch (``ran``)."""
        if not healthy:
            self.fail_rate[key] = 0.7 * self.fail_rate.get(key, 0.0) + 0.3
            self.failed_at[key] = now
        elif key in self.fail_rate and ran:  # a clean batch: the rate decays
            self.fail_rate[key] *= 0.7

    def cheaper_to_wait(self, key: str, leased: int, waiting: int) -> bool:
        """Whether one of ``key``'s ``leased`` busy workers is likely free sooner than a new one would start
        (with ``waiting`` callers ahead)."""
        lease_s = self.lease_s.get(key)
        if not leased or lease_s is None or self.start_s is None:
            return False
        return lease_s * (waiting + 1) / leased < self.start_s

    def coalesce_limit(self, key: str, batch_size: int) -> int:
        """How many single-case calls of ``key`` may share one batch: as many rows as run in the time a
        worker takes to start (queueing behind them costs less than the start that would otherwise be
        worth it), at most ``batch_size``; 1 (no sharing) until both times are known."""
        row_s = self.row_s.get(key)
        if row_s is None or self.start_s is None:
            return 1
        return max(1, min(batch_size, int(self.start_s / max(row_s, 1e-6))))

    def forget(self, key: str) -> None:
        """``key`` has no worker and no waiter left: its timings go (its failure rate expires on its own)."""
        self.lease_s.pop(key, None)
        self.row_s.pop(key, None)

    def expire(self, now: float, ttl_s: float) -> None:
        """A key that failed more than ``ttl_s`` ago and was not used since starts afresh."""
        for key in [k for k, t in self.failed_at.items() if now - t > ttl_s]:
            self.failed_at.pop(key)
            self.fail_rate.pop(key, None)
