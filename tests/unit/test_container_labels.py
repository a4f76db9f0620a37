"""The operator's ``container_labels``: added to every container, never replacing the service's own."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from evaluator_host.sandbox.docker.engine import MANAGED, OWNER, Engine
from evaluator_host.settings import Settings


def test_operator_labels_are_added_and_the_services_own_win(tmp_path: Path) -> None:
    engine = Engine(Settings(data_dir=tmp_path, container_labels={"team": "eval", "cost-centre": "42"}))
    labels = engine.labels(**{"evaluator-host.build": "1"})
    assert labels["team"] == "eval" and labels["cost-centre"] == "42"
    assert labels[MANAGED] == "1" and labels[OWNER] == engine.owner and labels["evaluator-host.build"] == "1"


@pytest.mark.parametrize("name", ["evaluator-host.managed", "evaluator-host.owner", "evaluator-host.anything"])
def test_a_label_in_the_services_own_namespace_is_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="evaluator-host"):
        Settings(container_labels={name: "x"})


def test_labels_are_read_as_json_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALUATOR_HOST_CONTAINER_LABELS", '{"team": "eval"}')
    assert Settings().container_labels == {"team": "eval"}
