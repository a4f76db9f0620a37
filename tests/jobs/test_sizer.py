"""Chunk sizes: about ``job_chunk_s`` of work each, reaching full size fast and shrinking smoothly."""

from __future__ import annotations

from evaluator_host.jobs.running.progress import ASYNC_ROUNDS, FIRST_CHUNK, Sizer


def test_a_first_chunk_slowed_by_start_up_does_not_keep_the_next_ones_small() -> None:
    sizer = Sizer(0.25, 4096)
    assert sizer.size() == FIRST_CHUNK
    sizer.observe(FIRST_CHUNK, 0.0128)  # 400 µs a row: the worker was bound and warmed meanwhile
    assert sizer.size() == 625
    sizer.observe(625, 0.0375)  # 60 µs a row, warm: taken at once (averaged, it would have been 1,086)
    assert sizer.size() == 4096  # 0.25 s / 60 µs ≈ 4,166, capped


def test_slower_rows_shrink_chunks_smoothly_and_never_below_one_row() -> None:
    sizer = Sizer(0.25, 4096)
    sizer.observe(1000, 0.1)  # 100 µs a row: 2,500
    assert sizer.size() == 2500
    sizer.observe(1000, 0.3)  # one chunk at 300 µs a row: averaged to 200 µs, not taken at once
    assert sizer.size() == 1250
    for _ in range(30):
        sizer.observe(10, 10.0)  # a second a row
    assert sizer.size() == 1


def test_an_async_evaluators_chunks_keep_its_in_flight_rows_busy() -> None:
    sizer = Sizer(0.25, 4096, min_rows=4 * 64)  # jobs/running/lanes.py: ASYNC_ROUNDS × in_flight
    assert sizer.size() == 256  # not FIRST_CHUNK: 32 rows would leave 32 of its 64 slots idle
    sizer.observe(256, 0.8)  # four rounds of 200 ms judge calls: 3 ms a row
    assert sizer.size() == 256  # 0.25 s / 3 ms = 80 rows: raised to the floor
    assert Sizer(0.25, 100, min_rows=256).size() == 100  # never past job_chunk_rows
    assert Sizer.for_evaluator(0.25, 4096, 64).min_rows == ASYNC_ROUNDS * 64  # the one place of the rule
    assert Sizer.for_evaluator(0.25, 4096, 1).min_rows == 1  # a sync evaluator: as the time per row says
