"""docs/online.md's mapping examples are true: the example trace gives the inputs/outputs the page says,
and every path of its path table parses (the convention table's rows are test_online_mapping.py's cases)."""

from __future__ import annotations

import json
import re

from evaluator_host.online.reading.mapping import check_path, resolve, trace_inputs_outputs
from tests.support import REPO

DOC = (REPO / "docs" / "online.md").read_text()


def _section(title: str) -> str:
    return DOC.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_example_trace_maps_as_the_page_says() -> None:
    section = _section("The trace evaluators get")
    trace = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    inputs, outputs, span_id = trace_inputs_outputs(trace)
    assert inputs == {
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "prompt": "Weather in Paris?",
        "model": "gpt-4o-mini",
    }
    assert outputs == "Rainy." and span_id == "b7ad6b7169203331"
    assert '`outputs = "Rainy."`' in section
    root = trace["spans"]["00f067aa0ba902b7"]
    view = {"trace": trace, "span": root["children"][span_id], "root": root}
    assert resolve(view, "root.resource.service.version") == "1.4.2"
    assert resolve(view, "span.attributes.gen_ai.input.messages[0].parts[0].content") == "Weather in Paris?"
    assert resolve(view, "span[attributes.gen_ai.operation.name=chat].outputs") == "Rainy."
    assert resolve(view, "root.children[name=tool].events") is None  # no such child: null, not an error


def test_every_documented_path_parses() -> None:
    table = _section("Mapping: `ag.data`, GenAI semantic conventions, OpenInference").split("| path | gives |", 1)[1]
    paths = re.findall(r"^\| `([^`]+)` \|", table, re.M)
    assert len(paths) >= 8
    for path in paths:
        check_path(path)
