"""A rule's budgets (issue 51): which of its claimed rows run now, and when the others resume.

Contract (docs/online.md, "Budgets"): ``limits.scores_per_minute`` — at most that many of the rule's
scores stored in any 60 s (its rows running anywhere count as stored): the rows past it go back to the
queue, the *j*-th resuming when the *j*-th oldest score of the last minute is a minute old (so the pace
holds at the budget, spread, not in bursts); ``limits.sandbox_seconds_per_hour`` — once the evaluator
time of the rule's scores stored in the last hour reaches it, every row of the rule waits until enough
of that hour's time is older than an hour (a batch already running may pass it by its own time).
``model_calls_per_minute`` — the rule's calls to its judges in any 60 s, as the egress proxy counted
them (``online/deciding/model_calls.py``): the rows expected to fit (at the calls a row of the rule made lately)
run, the others resume as the minute's calls age out (a batch already running may pass it by its own
calls). Delayed, never dropped, never an attempt counted. The "minute" of both per-minute budgets is
``minute`` (the ``online_budget_minute_s`` setting: 60 s unless an operator shortens it). Pure: no I/O (the
use is read by :func:`~evaluator_host.store.online.budgets.usage`, over the same minute).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from evaluator_host.store.online.budgets import HOUR, MINUTE, Use

__all__ = ["Windows", "plan"]


def plan(
    limits: dict[str, object], n: int, use: Use, now: datetime, minute: timedelta = MINUTE
) -> tuple[int, list[tuple[str, float]]]:
    """For ``n`` claimed rows of one rule (already counted in ``use.running``, read over the same
    ``minute``): how many run now, and for each of the others (in order) the budget that holds it back and
    the seconds until it resumes (where two budgets hold a row, the later)."""
    ssh = limits.get("sandbox_seconds_per_hour")
    if isinstance(ssh, int | float) and use.sandbox_seconds_last_hour >= ssh:
        over = use.sandbox_seconds_last_hour - float(ssh)
        until = now + MINUTE
        for at, seconds in use.hour:  # oldest first: when enough of the hour has aged out
            over -= seconds
            until = at + HOUR
            if over < 0:
                break
        after = max((until - now).total_seconds(), 1.0)
        return 0, [("sandbox_seconds_per_hour", after)] * n
    waits: list[tuple[str, float]] = [("", 0.0)] * n
    spm = limits.get("scores_per_minute")
    if isinstance(spm, int):
        _hold(waits, "scores_per_minute", _by_scores(spm, n, use, now, minute))
    mcpm = limits.get("model_calls_per_minute")
    if isinstance(mcpm, int):
        _hold(waits, "model_calls_per_minute", _by_calls(mcpm, n, use, now, minute))
    run = next((i for i, (_, after) in enumerate(waits) if after > 0), n)
    return run, [(by or "scores_per_minute", after) for by, after in waits[run:]]


def _hold(waits: list[tuple[str, float]], by: str, afters: list[float]) -> None:
    """Hold the last ``len(afters)`` rows of ``waits`` for ``by`` where it holds them longer."""
    first = len(waits) - len(afters)
    for i, after in enumerate(afters):
        if after > waits[first + i][1]:
            waits[first + i] = (by, after)


def _by_scores(spm: int, n: int, use: Use, now: datetime, minute: timedelta) -> list[float]:
    """``scores_per_minute``: the seconds until each row past the room resumes — the *j*-th when the *j*-th
    oldest score of the minute is a minute old."""
    others = max(use.running - n, 0)
    room = max(spm - use.scores_last_minute - others, 0)
    times = use.scored_times
    held: list[float] = []
    for k in range(max(n - room, 0)):  # the k-th slot to free: the k-th oldest score of the minute
        if k < len(times):
            after = (times[k] + minute - now).total_seconds()
        else:  # held by rows still running: free a minute after they are stored, at the earliest
            m = minute.total_seconds()
            after = m + m / spm * (k - len(times))
        held.append(max(after, 0.05))
    return held


def _by_calls(budget: int, n: int, use: Use, now: datetime, minute: timedelta) -> list[float]:
    """``model_calls_per_minute``: a row is expected to make as many calls as the rule's rows of the last
    minute made on average (1 without any: a rule with this budget calls a judge); the rows whose calls
    fit in what is left of the minute's budget (rows running elsewhere counted at that rate) run, and the
    *j*-th of the others resumes when enough of the minute's calls are a minute old to make room for it."""
    rows = sum(r for _, r, _ in use.calls)
    per_row = max(1.0, use.model_calls_last_minute / rows) if rows else 1.0
    others = max(use.running - n, 0)
    room = budget - use.model_calls_last_minute - others * per_row
    run = min(n, max(0, int(room // per_row)))
    held: list[float] = []
    for j in range(n - run):
        deficit = (run + j + 1) * per_row - room  # calls that must age out before this row fits
        after = None
        for at, _, calls in use.calls:  # oldest first
            deficit -= calls
            if deficit <= 0:
                after = (at + minute - now).total_seconds()
                break
        if after is None:  # held by calls of rows still running: at the budget's pace past the minute
            m = minute.total_seconds()
            after = m + m * max(deficit - 1.0, 0.0) / budget
        held.append(max(after, 0.05))
    return held


UNBOUNDED = 1 << 30  # a window's room while its rule was never slowed down


class Windows:
    """Each rule's concurrency window in this service, additive increase / multiplicative decrease. A rule
    starts unbounded (its calls and the scoring slots bound it: :mod:`~evaluator_host.online.scoring.sizing`); a
    round with a judge's 429 (``RateLimited``, or one the egress proxy saw) halves its window, the first time
    from ``ceiling`` (every slot full of ``online_scoring_batch``-row calls), not below 1 — once per window: a
    round that started before the last halving was already counted in it, its 429s change nothing more — and
    each row scored without one adds ``1/window`` (one row more per window of rows, as TCP's congestion
    avoidance), up to the ceiling, where it is unbounded again. The rows past a rule's window go back to the
    queue for a moment (``concurrency``); rate-limited rows go back for a second (``rate_limited``): both
    delayed, neither an attempt nor a stored result."""

    def __init__(self, ceiling: int) -> None:
        self.ceiling = max(1, ceiling)
        self._size: dict[str, float] = {}
        self._inflight: dict[str, int] = {}
        self._cut: dict[str, float] = {}  # when each rule's window was last halved (time.monotonic)

    def size(self, rule_id: str) -> int:
        """The rule's window now."""
        return max(1, int(self._size.get(rule_id, self.ceiling)))

    def room(self, rule_id: str) -> int:
        """How many more of the rule's rows may start now: no bound while it was never slowed down, or has
        widened back to the ceiling (its calls and the scoring slots bound it), else its window less its rows in
        flight."""
        if rule_id not in self._size:
            return UNBOUNDED
        return max(0, self.size(rule_id) - self._inflight.get(rule_id, 0))

    def started(self, rule_id: str, n: int) -> None:
        self._inflight[rule_id] = self._inflight.get(rule_id, 0) + n

    def ended(self, rule_id: str, n: int) -> None:
        left = self._inflight.get(rule_id, 0) - n
        if left > 0:
            self._inflight[rule_id] = left
        else:
            self._inflight.pop(rule_id, None)

    def limited(self, rule_id: str, since: float | None = None) -> None:
        """A judge refused a row of the rule (429) in a round started at ``since`` (time.monotonic; None:
        now): halve its window, unless it was halved after that round started."""
        now = time.monotonic()
        if since is not None and since < self._cut.get(rule_id, float("-inf")):
            return
        self._cut[rule_id] = now
        self._size[rule_id] = max(1.0, self._size.get(rule_id, float(self.ceiling)) / 2)

    def succeeded(self, rule_id: str, n: int = 1) -> None:
        """``n`` rows of the rule scored in a round without a refusal: ``n/window`` rows more at once, up to
        the ceiling."""
        size = self._size.get(rule_id)
        if size is not None:
            size += n / size
            if size >= self.ceiling:
                del self._size[rule_id]
            else:
                self._size[rule_id] = size
