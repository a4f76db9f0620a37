"""`images prune --unused-days N` counts a never-used image's age from its creation, like `runtimes prune`."""

from __future__ import annotations

import time

from evaluator_host.cli.operate.images import last_activity
from evaluator_host.sandbox.docker.images import ImageInfo


def _image(created: str, last_used: float | None) -> ImageInfo:
    return ImageInfo("python-1", "sha256:1", "python", {}, [], 1, created, last_used)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


def test_a_never_used_image_built_today_is_not_older_than_30_days() -> None:
    now = time.time()
    horizon = now - 30 * 86400
    assert last_activity(_image(_iso(now - 3600), None)) >= horizon  # was 0: "infinitely old", pruned


def test_a_never_used_image_built_long_ago_is_stale() -> None:
    now = time.time()
    assert last_activity(_image(_iso(now - 40 * 86400), None)) < now - 30 * 86400


def test_the_last_use_counts_when_later_than_the_build_and_an_unreadable_date_keeps_the_image() -> None:
    now = time.time()
    assert last_activity(_image(_iso(now - 40 * 86400), now - 60)) >= now - 120
    assert last_activity(_image("", None)) >= now - 1
