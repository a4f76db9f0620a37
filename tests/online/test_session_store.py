"""Session-level rules in the store, on SQLite and PostgreSQL (issue 50): routing groups traces into
sessions by their session id (the default keys on any span or its resource, or a rule's own key); a
session is queued for a rule once quiet, once per (rule, session, generation) — a second pass, a second
service, or a pass after a SIGKILL queues nothing more; a new trace makes a new generation, queued again
once quiet; storing its score supersedes the earlier one (``superseded_by``), and the stats count the
current score only; retention deletes old sessions."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, select

from evaluator_host.online.deciding.router import decide, join_sessions
from evaluator_host.store.db import as_utc, utcnow
from evaluator_host.store.online import sessions as online_sessions
from evaluator_host.store.online.rows import OnlineSessionRow, OnlineSessionRuleRow, OnlineSessionTraceRow
from evaluator_host.store.online.rules import RuleStore
from evaluator_host.store.online.scores import ScoreQueue
from evaluator_host.store.online.views import ScoreView
from tests.support.online import WS, hex_id, put_trace, score_rows, span


def rule(store: RuleStore, **fields: Any) -> str:
    base: dict[str, Any] = {"name": None, "revision": None, "filter": {}, "sampling_rate": 1.0, "mapping": None}
    target = {"level": "session", "quiet_s": 5}
    return store.create(WS, "ev_1", {**base, "enabled": True, "target": target, **fields}).id


def turn(engine: Engine, attributes: dict[str, Any], *, resource: dict[str, Any] | None = None) -> str:
    """One chat turn: a root span and an LLM child carrying ``attributes``; its trace id."""
    trace_id = hex_id(16)
    root = span(trace_id, "turn", resource=resource)
    child = span(trace_id, "llm", parent=root.span_id, attributes=attributes, start_ns=root.start_ns + 1)
    return put_trace(engine, [root, child])


def route(queue: ScoreQueue) -> None:
    while queue.route(100, 10_000, decide, sessions=join_sessions).traces:
        pass


def later(seconds: float) -> Any:
    return utcnow() + timedelta(seconds=seconds)


def sessions(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {r.session_id: r.num_traces for r in conn.execute(select(OnlineSessionRow))}


def test_traces_join_sessions_by_the_default_keys_on_any_span_or_resource(engine: Engine) -> None:
    queue = ScoreQueue(engine)
    a1 = turn(engine, {"session.id": "conv-a"})
    a2 = turn(engine, {"gen_ai.conversation.id": "conv-a"})
    b = turn(engine, {}, resource={"langfuse.session.id": "conv-b"})
    turn(engine, {"session.id": ""})  # empty: no session
    turn(engine, {"session.id": "x" * 129})  # too long: no session
    turn(engine, {"user.id": "u1"})
    route(queue)
    assert sessions(engine) == {"conv-a": 2, "conv-b": 1}
    with engine.connect() as conn:
        members = {(r.session_id, r.trace_id) for r in conn.execute(select(OnlineSessionTraceRow))}
    assert members == {("conv-a", a1), ("conv-a", a2), ("conv-b", b)}
    assert score_rows(engine) == []  # no rule: sessions are listed, nothing is scored


def test_a_session_is_queued_once_quiet_once_per_generation_and_supersedes_on_finish(engine: Engine) -> None:
    rules, queue, views = RuleStore(engine), ScoreQueue(engine), ScoreView(engine)
    rule_id = rule(rules)
    keyed = rule(rules, target={"level": "session", "session_key": "user.id", "quiet_s": 5})
    filtered = rule(rules, filter={"span_name": "no-such-span"})
    first = turn(engine, {"session.id": "s1", "user.id": "u1"})
    route(queue)
    assert online_sessions.queue_ready(engine, utcnow(), 0, 1000) == (0, {})  # not quiet for 5 s yet
    queued, dropped = online_sessions.queue_ready(engine, later(6), 0, 1000)
    assert (queued, dropped) == (2, {})
    assert online_sessions.queue_ready(engine, later(60), 0, 1000) == (0, {})  # once per generation
    rows = {r.rule_id: r for r in score_rows(engine)}
    assert set(rows) == {rule_id, keyed} and filtered not in rows
    assert (rows[rule_id].target_id, rows[rule_id].session_id, rows[rule_id].generation) == ("s1#1", "s1", 1)
    assert rows[rule_id].trace_id == first and rows[rule_id].span_id is None
    assert rows[keyed].target_id == "u1#1"

    claimed = {c.rule_id: c for c in queue.claim("svc", 10, 30)}
    assert claimed[rule_id].session_id == "s1" and claimed[rule_id].generation == 1
    done = [(rule_id, "s1#1", {"status": "ok", "score": 0.0}), (keyed, "u1#1", {"status": "ok", "score": 0.0})]
    assert queue.finish("svc", done) == [True, True]

    second = turn(engine, {"session.id": "s1"})  # the session grows: generation 2 (not u1: no user.id here)
    route(queue)
    assert sessions(engine)["s1"] == 2
    assert online_sessions.queue_ready(engine, later(6), 0, 1000) == (1, {})
    (again,) = queue.claim("svc", 10, 30)
    assert (again.target_id, again.generation, again.trace_id) == ("s1#2", 2, second)
    assert queue.finish("svc", [(rule_id, "s1#2", {"status": "ok", "score": 1.0})]) == [True]
    by_target = {r.target_id: r for r in score_rows(engine) if r.rule_id == rule_id}
    assert by_target["s1#1"].superseded_by == "s1#2" and by_target["s1#2"].superseded_by is None

    page = {s["target_id"]: s for s in views.of_rule(rule_id, since=None, until=None, limit=None, before=None)}
    assert (page["s1#1"]["current"], page["s1#1"]["superseded_by"]) == (False, "s1#2")
    assert page["s1#2"]["current"] is True
    (bucket,) = views.stats(rule_id, utcnow() - timedelta(minutes=5), later(60), 3600)
    assert (bucket.count, bucket.mean_score) == (1, 1.0)  # the current score only
    assert {s["target_id"] for s in views.of_session(WS, "s1")} == {"s1#1", "s1#2"}


def test_an_earlier_generation_stored_after_a_later_one_is_superseded_at_once(engine: Engine) -> None:
    rules, queue = RuleStore(engine), ScoreQueue(engine)
    rule_id = rule(rules)
    turn(engine, {"session.id": "s2"})
    route(queue)
    online_sessions.queue_ready(engine, later(6), 0, 1000)
    (old,) = queue.claim("svc_a", 10, 30)
    turn(engine, {"session.id": "s2"})
    route(queue)
    online_sessions.queue_ready(engine, later(6), 0, 1000)
    (new,) = queue.claim("svc_b", 10, 30)
    assert queue.finish("svc_b", [(rule_id, new.target_id, {"status": "ok"})]) == [True]
    assert queue.finish("svc_a", [(rule_id, old.target_id, {"status": "ok"})]) == [True]
    by_target = {r.target_id: r.superseded_by for r in score_rows(engine)}
    assert by_target == {"s2#1": "s2#2", "s2#2": None}


def test_two_services_queue_each_session_generation_once(engine: Engine) -> None:
    rules = RuleStore(engine)
    rule(rules)
    for i in range(30):
        for _ in range(2):
            turn(engine, {"session.id": f"conv-{i}"})
    queues = [ScoreQueue(engine), ScoreQueue(engine)]
    errors: list[BaseException] = []

    def run(queue: ScoreQueue) -> None:
        try:
            while queue.route(7, 10_000, decide, sessions=join_sessions).traces:
                online_sessions.queue_ready(engine, later(6), 0, 10_000)
            online_sessions.queue_ready(engine, later(6), 0, 10_000)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert sessions(engine) == {f"conv-{i}": 2 for i in range(30)}
    targets = [r.target_id for r in score_rows(engine)]
    assert len(targets) == len(set(targets))  # never twice
    latest: dict[str, int] = {}
    for target in targets:
        sid, generation = target.rsplit("#", 1)
        latest[sid] = max(latest.get(sid, 0), int(generation))
    assert latest == {f"conv-{i}": 2 for i in range(30)}  # every session's last generation queued


def test_the_backlog_bound_drops_a_ready_session_and_retention_deletes_old_sessions(engine: Engine) -> None:
    rules, queue = RuleStore(engine), ScoreQueue(engine)
    rule_id = rule(rules)
    turn(engine, {"session.id": "s3"})
    route(queue)
    assert online_sessions.queue_ready(engine, later(6), 5, 5) == (0, {rule_id: 1})
    (row,) = score_rows(engine)
    assert (row.state, row.target_id) == ("dropped", "s3#1")
    with engine.begin() as conn:
        assert online_sessions.sweep(conn, later(10)) == 1
    assert sessions(engine) == {}


def test_a_paused_or_deleted_rule_is_disarmed_and_a_short_quiet_rule_never_waits_for_a_long_one(
    engine: Engine,
) -> None:
    rules, queue = RuleStore(engine), ScoreQueue(engine)
    slow = rule(rules, target={"level": "session", "quiet_s": 3600})
    paused = rule(rules)
    deleted = rule(rules)
    for i in range(online_sessions.READY_BATCH + 20):  # more sessions waiting for the slow rule than a pass reads
        turn(engine, {"session.id": f"many-{i}"})
    route(queue)
    rules.update(WS, paused, {"enabled": False})
    rules.delete(WS, deleted)
    fast = rule(rules, target={"level": "session", "quiet_s": 1})
    turn(engine, {"session.id": "late"})
    route(queue)
    # fast's only. A pass reads the READY_BATCH oldest ready rows, and the paused and deleted rules' sessions
    # (quiet_s 5) are among them once the test took longer than 3 s to get here: they are disarmed first, a pass's
    # batch at a time, then fast's session is queued — within the passes 2 x 520 rows take, never slow's.
    queued = 0
    for _ in range(-(-2 * (online_sessions.READY_BATCH + 20) // online_sessions.READY_BATCH) + 1):
        passed, dropped = online_sessions.queue_ready(engine, later(2), 0, 10_000)
        assert dropped == {}
        queued += passed
        if queued:
            break
    assert queued == 1
    (row,) = score_rows(engine)
    assert (row.rule_id, row.target_id) == (fast, "late#1")
    for _ in range(3):  # a pass reads READY_BATCH rows: the paused and deleted rules' 2 x 520 are disarmed
        assert online_sessions.queue_ready(engine, later(10), 0, 10_000) == (0, {})
    rules.update(WS, paused, {"enabled": True})
    assert online_sessions.queue_ready(engine, later(10), 0, 10_000) == (0, {})  # quiet while paused: not scored
    queued, _ = online_sessions.queue_ready(engine, later(3601), 0, 10_000)
    assert queued == online_sessions.READY_BATCH  # the slow rule's sessions, a pass's batch at a time
    assert {r.rule_id for r in score_rows(engine)} == {fast, slow}


def test_a_pass_with_no_session_quiet_yet_tells_when_the_first_will_be(engine: Engine) -> None:
    """The router's idle back-off sleeps no later than that (shared/idle.py): a session stays on time."""
    rules, queue = RuleStore(engine), ScoreQueue(engine)
    upcoming: list[Any] = []
    assert online_sessions.queue_ready(engine, utcnow(), 0, 1000, upcoming) == (0, {})
    assert upcoming == []  # no session pending: nothing to wait for
    rule(rules)  # quiet_s 5
    turn(engine, {"session.id": "s-upcoming"})
    route(queue)
    now = utcnow()
    assert online_sessions.queue_ready(engine, now, 0, 1000, upcoming) == (0, {})
    assert len(upcoming) == 1 and now < upcoming[0] <= later(5)
    upcoming.clear()
    assert online_sessions.queue_ready(engine, later(6), 0, 1000, upcoming) == (1, {})
    assert upcoming == []  # one was ready: the pass queued it and looked no further


def test_sessions_members_are_read_many_sessions_a_statement_latest_or_first_in_start_order(engine: Engine) -> None:
    """:func:`members` reads the traces of more sessions than one statement holds: each session's latest (or
    first) ``most`` trace ids in start order (ties: trace id), its count; another workspace's and an unknown
    session's are absent."""
    now = utcnow()
    joined = []
    for i in range(online_sessions._MEMBERS_SESSIONS + 5):
        for k in range(i % 4 + 1):  # 1 to 4 traces
            start = 1_000 * k if k != 3 else 1_000 * 2  # the fourth starts with the third: ordered by trace id
            joined.append(online_sessions.Joined(WS, f"s{i}", f"t{i}-{k}", start, now, ()))
    joined.append(online_sessions.Joined("ws_other", "s0", "other-0", 0, now, ()))
    with engine.begin() as conn:
        online_sessions.record(conn, joined, now)
    wanted = [f"s{i}" for i in range(online_sessions._MEMBERS_SESSIONS + 5)] + ["unknown"]
    with engine.connect() as conn:
        latest = {sid: v for (_, sid), v in online_sessions.members(conn, [(WS, w) for w in wanted], 2).items()}
        first = online_sessions.members(conn, [(WS, w) for w in wanted], 3, latest=False)
        first = {sid: v for (_, sid), v in first.items()}
    assert "unknown" not in latest and len(latest) == online_sessions._MEMBERS_SESSIONS + 5
    for i in range(online_sessions._MEMBERS_SESSIONS + 5):
        ids = [f"t{i}-{k}" for k in range(i % 4 + 1)]  # start order: t-2 and t-3 tie, t-2 < t-3
        assert latest[f"s{i}"] == (ids[-2:], len(ids))
        assert first[f"s{i}"] == (ids[:3], len(ids))


def test_every_rule_of_more_sessions_than_a_statement_holds_is_rearmed_by_its_own_quiet(engine: Engine) -> None:
    """A routing pass that grows many sessions re-arms each (rule, session) at the session's last span + the
    rule's ``quiet_s``, a few hundred sessions a statement; another workspace's session of the same id is its own."""
    now = utcnow()
    n = online_sessions._MEMBERS_SESSIONS + 7
    rules = (("rule_a", 5), ("rule_b", 60))
    joined = [online_sessions.Joined(WS, f"s{i}", f"t{i}", i, now + timedelta(seconds=i), rules) for i in range(n)]
    joined.append(online_sessions.Joined("ws_other", "s0", "other", 0, now + timedelta(hours=1), (("rule_c", 1),)))
    with engine.begin() as conn:
        online_sessions.record(conn, joined, now)
        later = [
            online_sessions.Joined(WS, f"s{i}", f"u{i}", i, now + timedelta(seconds=2 * i), rules) for i in range(n)
        ]
        online_sessions.record(conn, later, now)  # every session grows again: re-armed from its new last span
    with engine.connect() as conn:
        armed = {(r.rule_id, r.session_id): r.ready_at for r in conn.execute(select(OnlineSessionRuleRow))}
    assert len(armed) == 2 * n + 1
    for i in range(n):
        for rule_id, quiet in rules:
            assert as_utc(armed[(rule_id, f"s{i}")]) == now + timedelta(seconds=2 * i + quiet)
    assert as_utc(armed[("rule_c", "s0")]) == now + timedelta(hours=1, seconds=1)
