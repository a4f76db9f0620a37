"""Idempotency keys' claims are leases (``store/idempotency.py``, issue 54): a claim its request stopped renewing
for ``claim_s`` is taken over by a retry (one of two racing retries wins), while a renewed one keeps answering
409; the fence: a request whose claim was taken over renews, stores and releases nothing, so the retry's answer is
the key's. On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest

from evaluator_host.store.db import make_engine
from evaluator_host.store.idempotency import IdempotencyStore
from tests.support.migrated import MigratedDatabase, module_fixtures
from tests.support.wait import wait_until

CLAIM_S = 0.2  # short: a stale claim within a fraction of a second (waited on as a condition)


migrated, _ = module_fixtures()  # one migrated database per backend (``migrated.fresh()`` for each test)


@pytest.fixture
def store(migrated: MigratedDatabase) -> Iterator[IdempotencyStore]:
    store = IdempotencyStore(make_engine(migrated.fresh()), CLAIM_S)
    yield store
    store.engine.dispose()


def test_a_claim_not_renewed_for_claim_s_is_taken_over_and_the_first_requests_answer_is_not_kept(
    store: IdempotencyStore,
) -> None:
    first = store.claim("POST /v1/jobs", "k1", "digest")
    assert first.fresh and first.token is not None and not first.taken_over
    retry = wait_until(
        lambda: (c := store.claim("POST /v1/jobs", "k1", "digest")).fresh and c,
        30,
        0.02,
        what="the unrenewed claim to go stale",
    )
    assert retry.taken_over and retry.token is not None and retry.token != first.token
    # the first request (alive after all, or its service back) is fenced off: nothing it does lands
    assert store.renew("POST /v1/jobs", "k1", first.token) is None
    assert store.store("POST /v1/jobs", "k1", 202, '{"id": "first"}', first.token) is False
    store.release("POST /v1/jobs", "k1", first.token)
    assert store.store("POST /v1/jobs", "k1", 202, '{"id": "retry"}', retry.token) is True
    replay = store.claim("POST /v1/jobs", "k1", "digest")
    assert not replay.fresh and replay.status == 202 and replay.answer == '{"id": "retry"}'


class _Paused(Exception):
    """A retry came more than ``claim_s`` after the renewal before it (the machine paused this process that long):
    its takeover was the rule's, and the round proves nothing about a claim renewed in time."""


def _renewed_past_three_claims(live: IdempotencyStore, key: str) -> datetime:
    """Claim ``key``, then renew it every 0.1 s, a retry claiming after each renewal, until the request outlived
    ``claim_s`` three times; its last token. :class:`_Paused` when a retry came too late to test anything."""
    first = live.claim("POST /v1/evaluators", key, "digest")
    assert first.token is not None
    held = [first.token]

    def renewed() -> bool:  # the request's renewer, run here
        token = live.renew("POST /v1/evaluators", key, held[-1])
        assert token is not None, "a live request lost its claim"
        held.append(token)
        retry = live.claim("POST /v1/evaluators", key, "digest")
        if retry.fresh and retry.token is not None and (retry.token - token).total_seconds() > live.claim_s:
            raise _Paused(f"{(retry.token - token).total_seconds():.2f} s from a renewal to its retry")
        assert not retry.fresh and retry.running, "a retry took a claim its request renewed within claim_s"
        return (token - held[0]).total_seconds() > 3 * live.claim_s

    wait_until(renewed, 60, 0.1, what="the request to outlive its claim_s three times")
    return held[-1]


def test_a_claim_renewed_in_time_stays_its_requests_and_a_retry_is_told_it_still_runs(
    store: IdempotencyStore,
) -> None:
    """A retry never takes over a claim its request renewed less than ``claim_s`` before (the takeover's rule is
    measured on the tokens: a round in which this loaded machine paused the test longer than ``claim_s`` between
    a renewal and its retry proves nothing and is run again with a new key, five rounds at most)."""
    live = IdempotencyStore(store.engine, 1.0)
    pauses: list[str] = []
    for attempt in range(5):
        key = f"k2-{attempt}"
        try:
            last = _renewed_past_three_claims(live, key)
        except _Paused as paused:
            pauses.append(str(paused))
            continue
        break
    else:
        pytest.fail(f"every round met a pause longer than claim_s between a renewal and its retry: {pauses}")
    assert live.store("POST /v1/evaluators", key, 201, '{"id": "ev"}', last) is True
    assert live.claim("POST /v1/evaluators", key, "digest").answer == '{"id": "ev"}'


def test_of_two_retries_racing_for_a_stale_claim_exactly_one_takes_it_over(store: IdempotencyStore) -> None:
    racing = IdempotencyStore(store.engine, 1.0)  # the winner's new claim must not go stale during the race
    racing.claim("POST /v1/jobs", "k3", "digest")
    _backdate(racing, "k3", 2 * racing.claim_s)  # its request stopped renewing it that long ago (no wait)
    wait_until(lambda: _stale(racing), 30, 0.02, what="the claim to go stale")
    with ThreadPoolExecutor(8) as pool:
        claims = list(pool.map(lambda _: racing.claim("POST /v1/jobs", "k3", "digest"), range(16)))
    assert sum(c.fresh for c in claims) == 1, [(c.fresh, c.running) for c in claims]
    assert all(c.running for c in claims if not c.fresh)


def test_a_retry_with_another_body_never_takes_over_a_stale_claim(store: IdempotencyStore) -> None:
    store.claim("POST /v1/jobs", "k4", "digest")
    wait_until(lambda: _stale(store, "k4"), 30, 0.02, what="the claim to go stale")
    other = store.claim("POST /v1/jobs", "k4", "another digest")
    assert not other.fresh and other.other_body


def _backdate(store: IdempotencyStore, key: str, seconds: float) -> None:
    """``key``'s claim made ``seconds`` earlier than it was: as if its request had stopped renewing it then (the
    first test waits a claim's staleness out on the clock)."""
    from datetime import timedelta

    from sqlalchemy import select, update
    from sqlalchemy.orm import Session

    from evaluator_host.store.db import IdempotencyRow

    with Session(store.engine) as session, session.begin():
        made = session.scalars(select(IdempotencyRow.created_at).where(IdempotencyRow.key == key)).one()
        earlier = made - timedelta(seconds=seconds)
        session.execute(update(IdempotencyRow).where(IdempotencyRow.key == key).values(created_at=earlier))


def _stale(store: IdempotencyStore, key: str = "k3") -> bool:
    """Whether ``key``'s claim is older than ``claim_s`` now (read without taking it over)."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from evaluator_host.store.db import IdempotencyRow

    with Session(store.engine) as session:
        made = session.scalars(select(IdempotencyRow.created_at).where(IdempotencyRow.key == key)).one()
    made = made if made.tzinfo else made.replace(tzinfo=UTC)
    return made < datetime.now(UTC) - timedelta(seconds=store.claim_s)
