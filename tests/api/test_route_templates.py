"""The access log's and the metrics' route labels are the OpenAPI document's paths, read from the routes
(``api/middleware/observe.py``) so that a start-up need not build the document."""

from __future__ import annotations

from pathlib import Path

from evaluator_host.api import create_app
from evaluator_host.api.middleware.observe import _templates
from evaluator_host.settings import Settings


def test_the_route_templates_are_the_openapi_paths_in_order(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path / "data"))
    assert app.openapi_schema is None  # nothing built it yet
    templates = [template for _pattern, template in _templates(app)]
    assert templates == list(app.openapi()["paths"])
    assert "/v1/evaluators/{evaluator_id}/evaluate" in templates and "/docs" not in templates
