"""What a dead service's janitor takes of its data dir's containers (``sandbox/docker/janitor.py``, ``_theirs``):
the dead instance's whenever created; another instance's only at the first look, and only when created in a whole
second before the death's — one of the death's own second may be the next service's (a next service started at
once lost its first build box to a janitor that took "created up to a second after the death")."""

from __future__ import annotations

from typing import Any

from evaluator_host.sandbox.docker.janitor import _theirs
from evaluator_host.sandbox.docker.labels import INSTANCE

DIED = 1_000_000.7  # the janitor's clock when it read the end: the death's second is 1,000,000


def _listed(name: str, created: int, instance: str) -> dict[str, Any]:
    return {"Id": name, "Created": created, "Labels": {INSTANCE: instance}}


LISTED = [
    _listed("earlier-leftover", 999_999, "earlier"),
    _listed("next-service-same-second", 1_000_000, "next"),
    _listed("next-service-later", 1_000_003, "next"),
    _listed("dead-late-create", 1_000_004, "dead"),
    _listed("dead-old", 999_990, "dead"),
]


def test_the_first_look_takes_the_dead_instances_and_older_leftovers_only() -> None:
    assert _theirs(LISTED, DIED, "dead") == ["earlier-leftover", "dead-late-create", "dead-old"]


def test_the_later_looks_take_the_dead_instances_only_whatever_the_times() -> None:
    assert _theirs(LISTED, None, "dead") == ["dead-late-create", "dead-old"]


def test_without_an_instance_only_older_leftovers_go() -> None:
    assert _theirs(LISTED, DIED, None) == ["earlier-leftover", "dead-old"]
    assert _theirs(LISTED, None, None) == []
