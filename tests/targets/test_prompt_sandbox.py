"""The prompt sandbox's bounds hold on every path (issue 47.2): loops over strings a template made, values
a template would make past a bound (refused before they are made: the process's peak memory does not
grow), a render's time, renders off the event loop, and the checks ``POST /v1/jobs`` makes once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evaluator_host.errors import FieldMappingError, TargetError
from evaluator_host.targets.prompts import PromptTemplate, RenderError, SandboxRefusal, render_messages

ROW = {"question": "y" * 20_000, "long": "x" * 30_000, "tabs": "\t" * 1000, "xs": [1, 2, 3]}
_DOUBLED = "{% set a = question OP question %}{% set b = a OP a %}{% set c = b OP b %}{% set d = c OP c %}" + (
    "{% set e = d OP d %}{% set f = e OP e %}{% set g = f OP f %}{% set h = g OP g %}{% set i = h OP h %}"
    "{% set j = i OP i %}{% set k = j OP j %}{{ k|length }}"
)

HOSTILE = [
    # loops over strings the template made (today's hole: only the row's own values were counted)
    ("{% for a in long ~ '' %}{% for b in long ~ '' %}{% for c in long ~ '' %}{% endfor %}{% endfor %}{% endfor %}",
     "iterates"),
    ("{% for a in long * 2 %}{% for b in long * 2 %}{% endfor %}{% endfor %}", "iterates"),
    ("{% for a in long|replace('x', 'xx') %}{% for b in long|replace('x', 'xx') %}{% endfor %}{% endfor %}",
     "iterates"),
    ("{% for a in long.split('q') %}{% for b in long|list %}{% for c in long %}{% endfor %}{% endfor %}{% endfor %}",
     "iterates"),
    # values past a bound: refused before they are made
    ("{{ question|replace('', question)|length }}", "characters"),
    ("{{ question.replace('', question)|length }}", "characters"),
    (_DOUBLED.replace("OP", "+"), "characters"),
    (_DOUBLED.replace("OP", "~"), "characters"),
    ("{{ ([question] * 50000)|join|length }}", "characters"),
    ("{{ ''.join([question] * 50000)|length }}", "characters"),
    ("{{ '{:>999999999}'.format(1)|length }}", "characters"),
    ("{{ '{:.999999999f}'.format(1.5)|length }}", "characters"),
    ("{{ ('{0}' * 50000).format(question)|length }}", "characters"),
    ("{{ question.center(999999999)|length }}", "characters"),
    ("{{ question.ljust(500000000)|length }}", "characters"),
    ("{{ tabs.expandtabs(1000000)|length }}", "characters"),
    ("{% set xs = [question] * 50000 %}{{ xs }}", "characters"),
    ("{{ ([question] * 50000)|tojson|length }}", "characters"),
    ("{{ ([question] * 50000)|string|length }}", "characters"),
    ("{{ ([1] * 1000)|tojson(indent=100000)|length }}", "characters"),
    ("{{ ([[[[[question[:3]] * 40] * 40] * 40] * 3])|pprint|length }}", "characters"),
    ("{{ [1]|batch(1000000000, 'x')|length }}", "groups"),
    ("{{ [1]|slice(100000000)|length }}", "groups"),
    ("{% set x %}{% for i in range(50000) %}{{ question }}{% endfor %}{% endset %}{{ x|length }}", "characters"),
    ("{% macro m() %}{% for i in range(50000) %}{{ question }}{% endfor %}{% endmacro %}{{ m()|length }}",
     "characters"),
    ("{% filter upper %}{% for i in range(50000) %}{{ question }}{% endfor %}{% endfilter %}", "characters"),
    ("{{ ((10 ** 1000) ** 1000)|string|length }}", "bits"),
    ("{% set n = 10 ** 10000 %}{{ (n * n * n * n * n * n * n * n)|string|length }}", "bits"),
    ("{{ dict.fromkeys(range(1000000))|length }}", "items"),
    ("{{ range(1000000)|list|length }}", "items"),
    ("{{ ([[question] * 1000] * 1000)|sum(start=[])|length }}", "numbers only"),
    # time: each step is allowed, their sum is not
    ("{% for i in range(1000000) %}{% set n = (question * 20)|length %}{% endfor %}", "takes more than"),
    ("{% for x in xs recursive %}{{ loop(xs) }}{% endfor %}", "Recursion"),
]  # fmt: skip


def _peak_kib() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


@pytest.mark.parametrize(("template", "why"), HOSTILE)
def test_a_hostile_template_is_refused_before_it_holds_the_process(template: str, why: str) -> None:
    """Each is refused with a sandbox refusal (the template's own doing), and the process's peak memory does
    not grow by what the value would have taken (reset with /proc/self/clear_refs before the render)."""
    Path("/proc/self/clear_refs").write_text("5")
    before = _peak_kib()
    with pytest.raises(SandboxRefusal, match=why):
        PromptTemplate(template).render(ROW)
    assert _peak_kib() - before < 32 * 1024, "the refused value was made before it was refused"


def test_legitimate_templates_still_render() -> None:
    row = {"question": "why?", "items": [{"k": "a", "v": 1}, {"k": "b", "v": 2}], "n": 3, "tags": ["x", "y"]}
    template = PromptTemplate(
        "{{ question|upper }} {% for it in items %}{{ it.k }}={{ it.v }};{% endfor %} {{ tags|join(', ') }} "
        "{{ '{}-{:>4}'.format(n, 'r') }} {{ question ~ '!' }} {{ 'ab' * 2 }} {{ question.replace('?', '.') }} "
        "{{ items|map(attribute='v')|sum }} {% for i in range(n) %}{{ loop.index }}{% endfor %} {{ 2 ** 10 }}"
    )
    assert template.render(row) == "WHY? a=1;b=2; x, y 3-   r why?! abab why. 3 123 1024"
    assert PromptTemplate("{{ tags|tojson }} {{ tags|tojson(indent=1) }}").render(row) == '["x", "y"] [\n "x",\n "y"\n]'
    with pytest.raises(TargetError, match="No filter named 'urlize'"):  # links in a prompt: not worth its bounds
        PromptTemplate("{{ question|urlize(rel=question) }}")


def test_a_render_never_holds_the_event_loop() -> None:
    """The loop keeps running (a ticker task ticks) while a template renders until its time bound."""

    async def run() -> int:
        ticks = 0
        slow = PromptTemplate("{% for i in range(1000000) %}{% set n = (question * 20)|length %}{% endfor %}")
        render = asyncio.ensure_future(render_messages(ROW, slow, None, None))
        while not render.done():
            ticks += 1
            await asyncio.sleep(0.01)
        with pytest.raises(SandboxRefusal, match="takes more than"):
            render.result()
        return ticks

    assert asyncio.run(run()) > 1  # a render on the loop would have finished before the first tick ended


def test_a_template_is_checked_against_the_datasets_columns_and_its_first_row() -> None:
    template = PromptTemplate("Q: {{ questoin }} {% for c in context %}{{ c }}{% endfor %}{% set x = 1 %}{{ x }}")
    assert template.names == {"questoin", "context"}  # what it sets and the sandbox's globals are not columns
    with pytest.raises(FieldMappingError, match=r"\{\{ questoin \}\}.*did you mean `question`\?"):
        template.check_columns(["question", "context"])
    PromptTemplate("{{ question }}{{ range(2)|list }}").check_columns(["question"])
    hostile = PromptTemplate("{% for a in question ~ '' %}{% for b in question ~ '' %}{% endfor %}{% endfor %}")
    with pytest.raises(TargetError, match="first row: the template iterates more than"):
        asyncio.run(hostile.check_row({"question": "q" * 2000}))
    asyncio.run(hostile.check_row({"question": "short"}))  # within bounds: fine
    asyncio.run(PromptTemplate("{{ missing }}").check_row({"question": "q"}))  # a row error, not the template's
    with pytest.raises(RenderError, match="undefined"):
        PromptTemplate("{{ missing }}").render({"question": "q"})
