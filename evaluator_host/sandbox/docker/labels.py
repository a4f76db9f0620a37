"""The labels on every container and runtime image the docker backend creates (what sweeps select by).

A module of its own, importing nothing: the janitor (:mod:`.janitor`) reads them in a process that has not
loaded the docker SDK (nor needs to, when its service left nothing behind)."""

from __future__ import annotations

__all__ = ["INSTANCE", "MANAGED", "OWNER"]

MANAGED = "evaluator-host.managed"  # on every container and runtime image we create
OWNER = "evaluator-host.owner"  # the data dir that owns a container (sweeps stay per service)
INSTANCE = "evaluator-host.instance"  # the service process that created it (its janitor's to remove)
