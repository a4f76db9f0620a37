"""The shared rate buckets (``store/rate_buckets.py``) on PostgreSQL: charges from two engines (two services)
at once take turns on the workspace's row — of 40 concurrent one-token charges on a bucket of one token, exactly
one is granted (a lost update would grant several); a refused charge writes nothing; a changed rate starts a
full bucket."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from evaluator_host.errors import QuotaExceeded
from evaluator_host.store.db import make_engine
from evaluator_host.store.rate_buckets import BucketState, RateBuckets
from tests.support.backends import postgres_only
from tests.support.pg import Cluster

RATE = 0.001  # a bucket of 1 token (at least one), refilled at one per 1000 s: no refill during the test


def _one(bucket: BucketState, now: float) -> float:
    """One token, as QuotaGuard charges it (refill to now, then take or refuse)."""
    bucket.tokens = min(max(bucket.rate, 1.0), bucket.tokens + max(0.0, now - bucket.at) * bucket.rate)
    bucket.at = max(bucket.at, now)
    time.sleep(0.01)  # work inside the charge: the window in which an unlocked read would be stale
    if bucket.tokens < 1:
        raise QuotaExceeded("used up", quota="max_evaluations_per_s")
    bucket.tokens -= 1
    return bucket.tokens


@postgres_only
def test_concurrent_charges_from_two_services_never_grant_more_than_the_bucket_holds(postgres: Cluster) -> None:
    url = postgres.database()
    engines = [make_engine(url), make_engine(url)]
    try:
        stores = [RateBuckets(e) for e in engines]
        stores[0].update("ws_a", RATE, lambda bucket, now: None)  # the row exists, full: the charges race on it

        def charge(i: int) -> bool:
            try:
                stores[i % 2].update("ws_a", RATE, _one)
                return True
            except QuotaExceeded:
                return False

        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(charge, range(40)))
        assert sum(outcomes) == 1, outcomes
        tokens = stores[1].update("ws_a", RATE, lambda bucket, now: bucket.tokens)
        assert tokens < 0.1  # the refused charges wrote nothing back (no token made up)
        # a PATCHed rate starts a full bucket at the new rate, on every service
        assert stores[0].update("ws_a", 5.0, lambda bucket, now: bucket.tokens) == 5.0
    finally:
        for engine in engines:
            engine.dispose()
