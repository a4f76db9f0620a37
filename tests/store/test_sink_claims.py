"""``SinkDeliveryStore.release_own`` (store/sinks/deliveries.py) on SQLite and PostgreSQL: at start-up a service
makes the claims its previous process (the same service id) left ``sending`` end ``in_flight_s`` from then at the
latest, and touches nothing else — another service's claim, its own rows in any other state, a claim that ends
sooner."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import insert, select

from evaluator_host.store.db import make_engine
from evaluator_host.store.online.rows import SinkDeliveryRow
from evaluator_host.store.sinks.deliveries import SinkDeliveryStore
from tests.support.migrated import MigratedDatabase, module_fixtures

migrated, _ = module_fixtures()  # one migrated database per backend (``migrated.fresh()`` for each test)

LEASE_S, IN_FLIGHT_S = 60.0, 20.0


@pytest.fixture
def store(migrated: MigratedDatabase) -> Iterator[SinkDeliveryStore]:
    store = SinkDeliveryStore(make_engine(migrated.fresh()))
    yield store
    store.engine.dispose()


def _row(target: str, state: str, owner: str | None, until: datetime | None, now: datetime) -> dict[str, object]:
    return {
        "source": "rule", "rule_id": "rule_1", "target_id": target, "sink": 0, "workspace_id": "ws", "type": "langfuse",
        "key": f"evh-{target}", "state": state, "attempts": 1, "due_at": now, "claimed_by": owner,
        "claimed_until": until, "created_at": now,
    }  # fmt: skip


def test_a_restarted_service_shortens_only_its_own_sending_claims(store: SinkDeliveryStore) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    until = now + timedelta(seconds=LEASE_S)  # claimed just now, for the whole lease
    soon = now + timedelta(seconds=5)
    rows = [
        _row("mine", "sending", "service-a", until, now),
        _row("mine-ending-soon", "sending", "service-a", soon, now),  # already ends sooner: left
        _row("theirs", "sending", "service-b", until, now),  # another live service's: left to expire
        _row("mine-pending", "pending", None, None, now),
        _row("mine-delivered", "delivered", None, None, now),
    ]
    with store.engine.begin() as conn:
        conn.execute(insert(SinkDeliveryRow), rows)
    cap = now + timedelta(seconds=IN_FLIGHT_S)
    assert store.release_own("service-a", now, IN_FLIGHT_S) == 1
    assert store.release_own("service-a", now + timedelta(seconds=1), IN_FLIGHT_S) == 0  # again: nothing moves back
    d = SinkDeliveryRow
    with store.engine.connect() as conn:
        found = {
            r.target_id: r
            for r in conn.execute(select(d.target_id, d.state, d.claimed_by, d.claimed_until, d.attempts))
        }

    def ends(target: str) -> datetime:
        value = found[target].claimed_until
        assert value is not None
        return value.replace(tzinfo=UTC)

    assert (found["mine"].state, found["mine"].claimed_by, found["mine"].attempts) == ("sending", "service-a", 1)
    assert ends("mine") == cap
    assert ends("mine-ending-soon") == soon
    assert ends("theirs") == until and found["theirs"].claimed_by == "service-b"
    assert (found["mine-pending"].state, found["mine-delivered"].state) == ("pending", "delivered")
