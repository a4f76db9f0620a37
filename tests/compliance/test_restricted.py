# ruff: noqa: E501 - the evaluator sources below read best one statement a line
"""The restricted policy in the sandbox, on every backend: ordinary code runs with the same scores,
hostile walks are refused, the hostile table is refused or still contained, the conformance
vectors score the same, and the policy in force is reported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support import REPO
from tests.support.backends import BACKENDS
from tests.support.hostile import HOSTILE, ISSUE47_METRIC
from tests.support.rlimits import rlimits_overrides
from tests.support.service import assert_healthy, evaluate, make_settings

#: Ordinary evaluator code that must run restricted exactly as it runs standard.
ORDINARY = {
    "augmented_assignment": "def evaluate(i, o, t):\n    n = 0\n    n += 2\n    d = {'a': 1}\n    d['a'] += 1\n"
    "    xs = [1]\n    xs[0] *= 3\n    return (n + d['a'] + xs[0]) / 7\n",
    "classes": "class Base:\n    def __init__(self, n):\n        self.n = n\n\nclass Counter(Base):\n"
    "    def __init__(self):\n        super().__init__(0)\n        self.hits = 0\n\n    def hit(self):\n"
    "        self.hits += 1\n        return self\n\n    def __repr__(self):\n        return f'Counter({self.hits})'\n\n"
    "def evaluate(i, o, t):\n    c = Counter().hit().hit()\n    return {'score': c.hits / 2, 'name': type(c).__name__, 'r': repr(c)}\n",
    "annotations": "from typing import Any, Optional\n\nlimit: int = 3\n\n"
    "def evaluate(inputs: dict[str, Any], outputs: Optional[str], trace: Any) -> float:\n"
    "    size: int = len(outputs or '')\n    return 1.0 if size <= limit else 0.0\n",
    "format_strings": "def evaluate(i, o, t):\n    a = f\"{o!r:>8}|{len(o):03d}\"\n    b = '{}-{name}'.format(1, name=o)\n"
    "    c = '%s/%d' % (o, 2)\n    return {'score': 1.0, 'a': a, 'b': b, 'c': c}\n",
    "comprehensions_unpacking_lambdas": "def evaluate(i, o, t):\n    words = o.split()\n"
    "    first, *rest = words\n    (a, b), c = (1, 2), 3\n    lengths = {w: len(w) for w in words}\n"
    "    evens = [n for n in range(10) if n % 2 == 0]\n    uniq = {w.lower() for w in words}\n"
    "    key = lambda w, k=1: -len(w) * k\n    total = sum(x * y for x, y in zip(evens, evens))\n"
    "    for idx, (w, n) in enumerate(sorted(lengths.items(), key=lambda kv: key(kv[0]))):\n        pass\n"
    "    return {'score': float(a + b + c == 6), 'first': first, 'rest': len(rest), 'uniq': len(uniq), 'total': total}\n",
    "async_def": "import asyncio\n\nasync def twice(x):\n    await asyncio.sleep(0)\n    return x * 2\n\n"
    "async def evaluate(inputs, outputs, trace):\n    values = await asyncio.gather(twice(1), twice(2))\n"
    "    return sum(values) / 6\n",
    "dataclasses_and_typing": "from __future__ import annotations\nfrom dataclasses import dataclass, field\n"
    "from typing import NamedTuple\nfrom enum import Enum\n\nclass Grade(Enum):\n    PASS = 1\n    FAIL = 0\n\n"
    "class Pair(NamedTuple):\n    a: int\n    b: int\n\n@dataclass\nclass Verdict:\n    score: float = 0.0\n"
    "    notes: list[str] = field(default_factory=list)\n\n    def __post_init__(self):\n        self.notes.append('ok')\n\n"
    "def evaluate(i, o, t):\n    v = Verdict(Pair(1, 1).a * 1.0)\n    return {'score': v.score, 'notes': len(v.notes), 'g': Grade.PASS.value}\n",
    "stdlib": "import json, re, math, statistics, collections, itertools, functools, hashlib, ast\n\n"
    "def evaluate(i, o, t):\n    data = json.loads(o)\n    nums = [int(x) for x in re.findall(r'\\d+', data['text'])]\n"
    "    c = collections.Counter(nums)\n    h = hashlib.sha256(o.encode()).hexdigest()[:4]\n"
    "    lit = ast.literal_eval('[1, 2]')\n    prod = functools.reduce(lambda a, b: a * b, nums, 1)\n"
    "    pairs = list(itertools.combinations(nums, 2))\n"
    "    return {'score': math.isclose(statistics.mean(nums), 2.0), 'most': c.most_common(1)[0][0], 'h': h,\n"
    "            'lit': sum(lit), 'prod': prod, 'pairs': len(pairs)}\n",
    "closures_and_print": "def evaluate(i, o, t):\n    total = 0\n    def add(n):\n        nonlocal total\n"
    "        total += n\n    for n in range(4):\n        add(n)\n    print('total', total)\n    return total / 6\n",
    "main_interface": "def main(completion, target):\n    return {'score': float(completion.strip() == target)}\n",
}
ORDINARY_INPUTS = {"target": "x", "correct_answer": "x"}
ORDINARY_OUTPUTS = '{"text": "1 2 3"}'

#: Walks and calls the policy refuses in the sandbox (the answer's error type, or a 422 PolicyError).
REFUSED = {
    "json_codecs_sys_modules_os": "import json\ndef evaluate(i, o, t):\n    return json.codecs.sys.modules['os'] is None\n",
    "re_enum_sys": "import re\ndef evaluate(i, o, t):\n    return re.enum.sys is None\n",
    "from_import_of_a_module_attribute": "from typing import sys\ndef evaluate(i, o, t):\n    return 1\n",
    "import_os": "import os\ndef evaluate(i, o, t):\n    return 1\n",
    "generator_frame": "def evaluate(i, o, t):\n    g = (x for x in [1])\n    return getattr(g, 'gi_' + 'frame') is None\n",
    "subclasses_by_getattr": "def evaluate(i, o, t):\n    return len(getattr(object, '__subcl' + 'asses__')())\n",
    "format_field_walk": "import json\ndef evaluate(i, o, t):\n    return '{0.codecs.sys}'.format(json) == ''\n",
    "attrgetter": "from operator import attrgetter\ndef evaluate(i, o, t):\n"
    "    return attrgetter('__glo' + 'bals__')(evaluate) is None\n",
    "forward_ref_code": "import typing\ndef evaluate(i, o, t):\n"
    "    return typing.List['().__class__.__base__.__subclasses__()'] is None\n",
    "open": "def evaluate(i, o, t):\n    return open('/etc/hostname').read() == ''\n",
    "exec": "def evaluate(i, o, t):\n    exec('x = 1')\n    return 1\n",
    "dunder_globals": "def evaluate(i, o, t):\n    return evaluate.__globals__ is None\n",
    "io_fileio": "import io\ndef evaluate(i, o, t):\n    return io.FileIO('/etc/hostname').read() == b''\n",
    "event_loop": "import asyncio\nasync def evaluate(i, o, t):\n    return asyncio.get_running_loop() is None\n",
    # issue 28 finding 2, and the escapes found closing it (the full table: tests/unit/test_restricted_escapes.py)
    "issue28_get_type_hints_injects_the_real_builtins": "import typing\nclass C:\n    x: 'eval'\n\n"
    "def evaluate(i, o, t):\n    g = {}\n    typing.get_type_hints(C, globalns=g)\n    b = g.get('__builtins__')\n"
    "    for k, v in b.items():\n        if k == 'eval':\n            return v(\"__imp\" + \"ort__('os').getpid()\", g)\n",
    "update_wrapper_copies_a_modules_real_globals": "import functools, json\ndef evaluate(i, o, t):\n"
    "    functools.update_wrapper(evaluate, json.dumps, assigned=(), updated=('__globals__',))\n"
    "    def later():\n        return open('/etc/hostname').read()\n    return later()\n",
    "dataclass_field_name_injection": "import dataclasses\nL = []\ndef evaluate(i, o, t):\n"
    "    name = \"x,L.append([c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0].__init__.__globals__['getpid']())\"\n"
    "    C = type('C', (), {'__annotations__': {name: int}, 'x': 1})\n"
    "    D = dataclasses.dataclass(init=False, repr=False)(C)\n    D() == D()\n    return L[0]\n",
}


def _post(client: TestClient, code: str, policy: str, **body: Any) -> tuple[int, dict[str, Any]]:
    payload = {"language": "python", "code": code, "settings": {**body.pop("settings", {}), "policy": policy}, **body}
    response = client.post("/v1/evaluate", json=payload)
    return response.status_code, response.json()


def _comparable(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: answer.get(k) for k in ("status", "score", "passed", "outputs", "details", "stdout")}


@pytest.mark.parametrize("client", BACKENDS, indirect=True)
@pytest.mark.parametrize("name", sorted(ORDINARY))
def test_ordinary_code_runs_restricted_with_the_same_answer_as_standard(client: TestClient, name: str) -> None:
    body = {"inputs": ORDINARY_INPUTS, "outputs": ORDINARY_OUTPUTS}
    code = ORDINARY[name]
    status, standard = _post(client, code, "standard", **body)
    assert status == 200 and standard["status"] == "ok", standard
    status, restricted = _post(client, code, "restricted", **body)
    assert status == 200, restricted
    assert restricted["runtime"]["policy"] == "restricted" and standard["runtime"]["policy"] == "standard"
    assert _comparable(restricted) == _comparable(standard)


@pytest.mark.parametrize("client", BACKENDS, indirect=True)
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_walks_out_of_the_allowlist_are_refused_in_the_sandbox(client: TestClient, name: str) -> None:
    status, answer = _post(client, REFUSED[name], "restricted")
    if status == 422:
        assert answer["error"]["type"] == "PolicyError" and answer["error"]["line"], answer
    else:
        assert answer["status"] == "error", answer
        assert answer["error"]["type"] in ("RestrictedError", "ImportError", "NameError"), answer
        assert answer["error"]["line"], answer
    assert_healthy(client)


def test_definition_time_refusals_answer_422_with_line_and_column(client: TestClient) -> None:
    status, answer = _post(client, "import json\n\ndef evaluate(i, o, t):\n    return  o.__dict__\n", "restricted")
    assert status == 422
    assert answer["error"]["type"] == "PolicyError"
    assert (answer["error"]["line"], answer["error"]["column"]) == (4, 13)
    assert "__dict__" in answer["error"]["message"]


def test_the_policy_is_python_only_and_named_in_healthz(client: TestClient) -> None:
    js = {"language": "javascript", "code": "function evaluate(i, o, t) { return 1 }"}
    response = client.post("/v1/evaluate", json={**js, "settings": {"policy": "restricted"}})
    assert response.status_code == 422 and response.json()["error"]["type"] == "PolicyError"
    health = client.get("/healthz").json()
    assert health["policy"]["applies_to"] == ["python"]
    assert health["policy"]["default"] in ("standard", "restricted")


@pytest.mark.parametrize("client", BACKENDS, indirect=True)
@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in HOSTILE if "python" in c.code])
def test_the_python_hostile_table_under_the_restricted_policy(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, case: Any
) -> None:
    """Every Python hostile row, restricted: refused by the policy (422, or an error naming the refusal),
    or — when it needs nothing the policy refuses — still ending in its row's status; the service stays fine."""
    if case.needs_own_pid_namespace and client.get("/healthz").json()["isolation_details"].get("mode") == "rlimits":
        pytest.skip("no pid namespace of its own")
    for name, value in (case.host_env or {}).items():
        monkeypatch.setenv(name, value)
    code = case.code["python"]
    body = code.body()
    status, answer = _post(client, code.source, "restricted", **body)
    refused = status == 422 or (
        answer.get("status") == "error"
        and (answer.get("error") or {}).get("type") in ("RestrictedError", "ImportError", "NameError", "PolicyError")
    )
    if not refused and case.status is not None and not body.get("cases"):
        assert answer["status"] == case.status, answer
    assert_healthy(client)


def _vectors() -> list[Any]:
    folder = REPO.parent / "shared" / "conformance"
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        for case in json.loads(path.read_text()):
            if case["language"] == "python" and case["expect"].get("http", 200) == 200:
                out.append(pytest.param(case, id=f"{path.stem}:{case['name']}"))
    return out


@pytest.mark.parametrize("client", BACKENDS, indirect=True)
@pytest.mark.parametrize("case", _vectors())
def test_conformance_vectors_score_the_same_restricted(client: TestClient, case: dict[str, Any]) -> None:
    """Differential: each Python vector's answer under the restricted policy equals its standard answer,
    unless the vector needs what the policy refuses (then the refusal is explicit)."""
    body = {k: case[k] for k in ("packages", "settings") if k in case} | case["case"]
    status, standard = _post(client, case["code"], "standard", **json.loads(json.dumps(body)))
    status_r, restricted = _post(client, case["code"], "restricted", **json.loads(json.dumps(body)))
    assert status == 200
    if status_r == 422:
        assert restricted["error"]["type"] == "PolicyError", restricted
        pytest.skip(f"needs what the restricted policy refuses: {restricted['error']['message']}")
    if restricted["status"] == "error" and standard["status"] != "error":
        assert restricted["error"]["type"] in ("RestrictedError", "ImportError", "NameError"), restricted
        pytest.skip(f"needs what the restricted policy refuses: {restricted['error']['message']}")
    keys = ("status", "score", "passed", "outputs", "details")
    assert {k: restricted.get(k) for k in keys} == {k: standard.get(k) for k in keys}
    if standard["status"] == "error":
        assert restricted["error"]["type"] == standard["error"]["type"]


def test_python_runs_restricted_by_default_when_the_process_backend_has_only_rlimits(tmp_path: Path) -> None:
    """No namespaces: restricted unless the operator opts out (EVALUATOR_HOST_DEFAULT_POLICY=standard)."""
    weak = rlimits_overrides()  # the rlimits-only mode (as root: a sandbox uid that reaches what it needs)
    code = "import json\ndef evaluate(i, o, t):\n    return 1.0\n"
    walk = "import json\ndef evaluate(i, o, t):\n    return json.codecs is None\n"
    with TestClient(create_app(make_settings(tmp_path / "weak", backend="process", **weak))) as client:
        health = client.get("/healthz").json()
        assert health["isolation_details"]["mode"] == "rlimits"
        assert health["policy"]["default"] == "restricted"
        answer = evaluate(client, code)
        assert answer["status"] == "ok" and answer["runtime"]["policy"] == "restricted"
        assert evaluate(client, walk)["error"]["type"] == "RestrictedError"
        js = evaluate(client, "function evaluate(i, o, t) { return 1 }", "javascript")
        assert js["status"] == "ok" and js["runtime"]["policy"] == "standard"
    settings = make_settings(tmp_path / "optout", backend="process", default_policy="standard", **weak)
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").json()["policy"]["default"] == "standard"
        answer = evaluate(client, walk)
        assert answer["status"] == "ok" and answer["runtime"]["policy"] == "standard"


#: Issue 47, finding 1, as filed: a NeMo metric class (no pins: the built-in nemo_evaluator_sdk) whose
#: ``functools.update_wrapper`` copies a type()-made class's ``_fields`` onto the SDK's ``model_dump``, which
#: then read that function's ``__globals__``; ``map`` callbacks walked to ``eval`` and ran ``id``.


@pytest.mark.parametrize("client", BACKENDS, indirect=True)
def test_issue47_the_sdk_model_dump_escape_is_refused_in_the_sandbox(client: TestClient) -> None:
    """The metric interface, restricted, no pins: the SDK refuses a model method on a function, and the
    policy's update_wrapper copies no ``__dict__`` — no ``id`` output, the service healthy."""
    status, answer = _post(client, ISSUE47_METRIC, "restricted", inputs={"x": 1}, outputs="y")
    assert status == 200, answer
    assert "uid=" not in json.dumps(answer), answer
    assert answer["status"] == "error", answer
    assert answer["error"]["type"] in ("RestrictedError", "TypeError"), answer
    assert_healthy(client)
