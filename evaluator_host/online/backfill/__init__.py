"""History scored on demand (``POST /v1/online-rules/{id}/backfill``, issue 50).

Owns a backfill's dry run, its plan page by page into the scoring queue (``runs``), the fast path that scores a
page in the planner (``direct``) and the API's shapes of backfills (``models``, re-exported by ``online/models.py``).

The top room of ``online``: may import every other room (it reuses the scorer's cases and stored values)
(``tests/unit/test_rooms.py``).
"""
