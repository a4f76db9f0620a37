# ruff: noqa: E501 - the evaluator sources below read best one statement a line
"""The hostile restricted table: every published RestrictedPython escape we know of, issue 28's
``get_type_hints`` escape and the escapes found while closing it, each refused by the policy.

Fast and host-side: each row is compiled with the policy's own compiler and run with its own
globals (the same ``restricted.py`` the harness loads in the sandbox), in a module registered as
``evaluator`` like the harness does. A row *escapes* when ``evaluate`` returns; it is *refused* when
compiling raises ``PolicySyntaxError`` or the run raises one of the policy's refusals. Every payload
reaches the real ``os`` (``getpid``) or ``open`` when it works, so a row that returns is a hole.
The end-to-end rows on both backends are in ``tests/compliance/test_restricted.py`` (REFUSED).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from evaluator_host.definitions.languages import RUNTIMES_DIR
from evaluator_host.definitions.restricted import policy_module
from tests.support import policy_guards

POLICY = policy_module(RUNTIMES_DIR / "python")


@pytest.fixture(autouse=True)
def _process_wide_guards_restored() -> Iterator[None]:
    """The policy guards ``typing``, ``dataclasses`` and ``copy`` process-wide, as it does in a sandboxed
    worker; in this shared test process they are taken off again after each row (:mod:`tests.support.policy_guards`)."""
    with policy_guards.restored():
        yield


#: name -> (origin, source). ``evaluate()`` returns what it reached when the escape works.
ESCAPES: dict[str, tuple[str, str]] = {
    # -- issue 28, finding 2, and its variants --------------------------------------------------
    "issue28_get_type_hints_injects_the_real_builtins": (
        "issue 28: eval in typing's frame adds the real __builtins__ to a caller's dict; iteration hands it out",
        "import typing\nclass C:\n    x: 'eval'\n\ndef evaluate(i, o, t):\n    g = {}\n    typing.get_type_hints(C, globalns=g)\n"
        "    b = g.get('__builtins__')\n    for k, v in b.items():\n        if k == 'eval':\n"
        '            return v("__imp" + "ort__(\'os\').getpid()", g)\n',
    ),
    "issue28_hint_values_resolve_to_the_real_open": (
        "issue 28: a type-shaped hint ('open') resolves to the real builtin; the hints dict's iteration is unguarded",
        "import typing\ndef f(x: 'open'):\n    pass\n\ndef evaluate(i, o, t):\n"
        "    for v in typing.get_type_hints(f, globalns={}).values():\n        return v('/etc/hostname').read()\n",
    ),
    "issue28_reduce_over_the_injected_builtins": (
        "issue 28 + RestrictedPython #335: C-level iteration (functools.reduce) and a callback bypass _getiter_",
        "import typing, functools\nclass C:\n    x: 'eval'\n\ndef evaluate(i, o, t):\n    g = {}\n"
        "    typing.get_type_hints(C, globalns=g)\n"
        "    b = functools.reduce(lambda a, v: v if isinstance(v, dict) else a, g.values(), None)\n"
        "    ev = functools.reduce(lambda a, v: v if callable(v) and v.__name__ == 'eval' else a, b.values(), None)\n"
        '    return ev("__imp" + "ort__(\'os\').getpid()", {})\n',
    ),
    "get_type_hints_in_a_forged_module_namespace": (
        "found here: type()'s namespace sets __module__ = 'os'; get_type_hints resolves the hint in os's globals",
        "import typing\ndef evaluate(i, o, t):\n"
        "    C = type('C', (), {'__module__': 'os', '__annotations__': {'x': 'getpid'}})\n"
        "    for v in typing.get_type_hints(C).values():\n        return v()\n",
    ),
    "forward_ref_with_a_module_argument": (
        "found here: ForwardRef(…, module='os') resolves in os's globals",
        "import typing\ndef evaluate(i, o, t):\n"
        "    C = type('C', (), {'__annotations__': {'x': typing.ForwardRef('getpid', module='os')}})\n"
        "    for v in typing.get_type_hints(C).values():\n        return v()\n",
    ),
    "update_wrapper_copies_a_modules_real_globals": (
        "found here: functools.update_wrapper(updated=('__globals__',)) puts json's real __builtins__ into the evaluator's",
        "import functools, json\ndef evaluate(i, o, t):\n"
        "    functools.update_wrapper(evaluate, json.dumps, assigned=(), updated=('__globals__',))\n"
        "    def later():\n        return open('/etc/hostname').read()\n    return later()\n",
    ),
    "wraps_copies_a_modules_real_globals": (
        "found here: functools.wraps(updated=('__globals__',)), the decorator form of the same",
        "import functools, json\ndef evaluate(i, o, t):\n"
        "    functools.wraps(json.dumps, assigned=(), updated=('__globals__',))(evaluate)\n"
        "    def later():\n        return open('/etc/hostname').read()\n    return later()\n",
    ),
    "dataclass_field_name_injection": (
        "found here: a type()-made class's annotation key 'x,<expr>' becomes source text dataclasses exec()s unrestricted",
        "import dataclasses\nL = []\ndef evaluate(i, o, t):\n"
        "    name = \"x,L.append([c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0].__init__.__globals__['getpid']())\"\n"
        "    C = type('C', (), {'__annotations__': {name: int}, 'x': 1})\n"
        "    D = dataclasses.dataclass(init=False, repr=False)(C)\n    D() == D()\n    return L[0]\n",
    ),
    "namedtuple_field_name_injection": (
        "checked: collections.namedtuple builds __new__ with eval from the field names (it validates them)",
        "import collections\ndef evaluate(i, o, t):\n"
        "    P = collections.namedtuple('P', ['a', \"b=__imp\" + \"ort__('os').getpid()\"])\n    return P(1)\n",
    ),
    "type_hint_through_a_frame_attribute": (
        "found here: a type-shaped hint may name gi_frame (only '_' names were refused)",
        "import typing\ndef gen():\n    yield 1\nG = gen()\ndef f(x: 'G.gi_frame'):\n    pass\n\ndef evaluate(i, o, t):\n"
        "    for v in typing.get_type_hints(f).values():\n        return v.f_back\n",
    ),
    "copy_reduce_replaces_a_typing_method": (
        "found here: copy's __reduce__ state is a setattr of any name; ForwardRef._evaluate becomes a restricted "
        "function typing hands os's namespace (forged __module__), C-level iteration reaches getpid",
        "import copy, typing, functools\ndef evaluate(i, o, t):\n    target = typing.ForwardRef\n"
        "    def hook(self, globalns, localns, *rest, **kw):\n"
        "        return functools.reduce(lambda a, v: v() if callable(v) and getattr(v, '__name__', '') == 'getpid' else a, localns.values(), None)\n"
        "    R = type('R', (), {'__reduce__': lambda self: ((lambda: target), (), (None, {'_eva' + 'luate': hook}))})\n"
        "    copy.copy(R())\n    C = type('C', (), {'__module__': 'os', '__annotations__': {'x': 'int'}})\n"
        "    return typing.get_type_hints(C)\n",
    ),
    "enum_global_enum_replaces_a_typing_function": (
        "found here: enum.global_enum writes members into sys.modules[cls.__module__]; typing._eval_type becomes a "
        "restricted callable handed os's namespace",
        "import enum, typing, functools\nclass Hook(enum.Enum):\n    def __call__(self, t, globalns, localns, *rest, **kw):\n"
        "        return functools.reduce(lambda a, v: v() if callable(v) and getattr(v, '__name__', '') == 'getpid' else a, localns.values(), None)\n"
        "def evaluate(i, o, t):\n    E = Hook('E', {'_eval' + '_type': 1}, module='typing')\n    enum.global_enum(E)\n"
        "    C = type('C', (), {'__module__': 'os', '__annotations__': {'x': int}})\n    return typing.get_type_hints(C)\n",
    ),
    # -- published RestrictedPython advisories ----------------------------------------------------
    "CVE-2023-37271_generator_gi_frame": (
        "CVE-2023-37271: a generator's gi_frame leads to f_back.f_globals",
        "def evaluate(i, o, t):\n    q = (q.gi_frame.f_back.f_back.f_globals for _ in [1])\n    return list(q)\n",
    ),
    "CVE-2023-37271_gi_frame_by_getattr": (
        "CVE-2023-37271, with the attribute name built at run time",
        "def evaluate(i, o, t):\n    g = (x for x in [1])\n    return getattr(getattr(g, 'gi_' + 'frame'), 'f_' + 'globals')\n",
    ),
    "CVE-2023-37271_coroutine_cr_frame": (
        "CVE-2023-37271: a coroutine's cr_frame",
        "async def c():\n    pass\n\ndef evaluate(i, o, t):\n    co = c()\n    try:\n        return getattr(co, 'cr_' + 'frame')\n"
        "    finally:\n        co.close()\n",
    ),
    "CVE-2023-41039_str_format_attribute_walk": (
        "CVE-2023-41039: str.format's {0.attr} fields walk attributes unguarded",
        "def evaluate(i, o, t):\n    return '{0.__globals__[__builtins__]}'.format(evaluate)\n",
    ),
    "CVE-2023-41039_format_map": (
        "CVE-2023-41039: str.format_map",
        "def evaluate(i, o, t):\n    return '{x.__globals__}'.format_map({'x': evaluate})\n",
    ),
    "CVE-2023-41039_string_formatter_get_field": (
        "CVE-2023-41039: string.Formatter().get_field",
        "import string\ndef evaluate(i, o, t):\n    return string.Formatter().get_field('0.__globals__', [evaluate], {})[0]\n",
    ),
    "CVE-2024-47532_attribute_error_obj": (
        "CVE-2024-47532: AttributeError.obj hands out the object a failed lookup ran on",
        "import string\ndef evaluate(i, o, t):\n    try:\n        string.Formatter().format('{0.no_such}', evaluate)\n"
        "    except AttributeError as e:\n        return getattr(e.obj, '__glo' + 'bals__')\n",
    ),
    "CVE-2025-22153_except_star": (
        "CVE-2025-22153: try/except* type confusion",
        "def evaluate(i, o, t):\n    try:\n        raise ExceptionGroup('g', [ValueError(1)])\n"
        "    except* ValueError as e:\n        return e\n",
    ),
    "GHSA-ffg3-p8fm-mjx2_positional_only_shadows_a_guard": (
        "CVE-2026-55830 / GHSA-ffg3-p8fm-mjx2: a positional-only parameter shadows _getattr_",
        "def f(_getattr_, /):\n    return evaluate.__globals__\n\ndef evaluate(i, o, t):\n    return f(getattr)\n",
    ),
    "CVE-2026-76825_string_formatter_traversal": (
        "CVE-2026-76825: string.Formatter's traversal methods (get_value / vformat)",
        "import string\ndef evaluate(i, o, t):\n    return string.Formatter().vformat('{0.__class__.__base__}', [1], {})\n",
    ),
    "attrgetter_walk": (
        "classic: operator.attrgetter walks attributes unguarded",
        "from operator import attrgetter\ndef evaluate(i, o, t):\n    return attrgetter('__glo' + 'bals__')(evaluate)\n",
    ),
    "subclasses_walk": (
        "classic: ().__class__.__base__.__subclasses__()",
        "def evaluate(i, o, t):\n    return getattr(getattr(().__class__, '__ba' + 'se__'), '__subcl' + 'asses__')()\n",
    ),
    "module_walk_to_sys": (
        "issue 20: json.codecs.sys.modules['os']",
        "import json\ndef evaluate(i, o, t):\n    return json.codecs.sys.modules['os'].getpid()\n",
    ),
}

#: Rows a correct run may refuse with the standard library's own error (the library validates).
OWN_ERRORS: dict[str, tuple[type[BaseException], ...]] = {"namedtuple_field_name_injection": (ValueError,)}

REFUSALS = (POLICY.RestrictedError, ImportError, NameError)


def run_restricted(source: str, restricted: bool = True) -> Any:
    """Compile ``source`` under the policy and call its ``evaluate`` as the harness does."""
    code = POLICY.compile_restricted(source, "evaluator.py") if restricted else compile(source, "evaluator.py", "exec")
    module = types.ModuleType("evaluator")
    previous = sys.modules.get("evaluator")
    sys.modules["evaluator"] = module
    try:
        if restricted:
            module.__dict__.update(POLICY.make_globals("evaluator"))
        exec(code, module.__dict__)
        return module.__dict__["evaluate"](None, None, None)
    finally:
        if previous is None:
            sys.modules.pop("evaluator", None)
        else:
            sys.modules["evaluator"] = previous


def run_standard(source: str) -> Any:
    """The same, compiled and run as the standard policy does (the differential's reference)."""
    return run_restricted(source, restricted=False)


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_every_known_escape_is_refused_by_the_restricted_policy(name: str) -> None:
    origin, source = ESCAPES[name]
    refused = REFUSALS + OWN_ERRORS.get(name, ())
    try:
        reached = run_restricted(source)
    except POLICY.PolicySyntaxError:
        return  # refused when compiled: a 422 PolicyError on the API
    except refused:
        return
    raise AssertionError(f"{name} ({origin}) escaped: it reached {reached!r}")


def test_type_hints_still_resolve_for_ordinary_code() -> None:
    """The resolver that replaces ``eval`` in ``typing`` answers what ``typing`` answers for ordinary
    hints: names, dotted names, subscripts, nested strings, ``|``, ``Literal``, ``Optional``."""
    source = (
        "from __future__ import annotations\nimport typing, datetime, collections\n"
        "from typing import Optional, Literal, Any\nfrom dataclasses import dataclass, fields, KW_ONLY\n\n"
        "@dataclass\nclass Row:\n    a: int\n    b: Optional[str] = None\n    kw: KW_ONLY\n"
        "    c: list['Row'] | None = None\n    d: Literal['x', 'y'] = 'x'\n    e: datetime.date | None = None\n"
        "    f: collections.OrderedDict[str, typing.Any] | None = None\n\n"
        "def evaluate(i, o, t):\n    hints = typing.get_type_hints(Row)\n"
        "    kw = [f.name for f in fields(Row) if f.kw_only]\n"
        "    return {k: repr(v) for k, v in hints.items()}, kw, Row(1, c=[Row(2)]).c[0].a\n"
    )
    answer = run_restricted(source)
    assert answer == run_standard(source)
    hints, kw_only, nested = answer
    assert hints["b"] == "typing.Optional[str]" and hints["d"] == "typing.Literal['x', 'y']"
    assert kw_only == ["c", "d", "e", "f"] and nested == 2


def test_the_namespace_given_to_get_type_hints_is_left_untouched() -> None:
    """``typing`` no longer ``eval``s: the caller's dict gains no ``__builtins__``."""
    source = (
        "import typing\nclass C:\n    x: 'int'\n    y: 'typing.List[int]'\n\n"
        "def evaluate(i, o, t):\n    g = {'typing': typing}\n    hints = typing.get_type_hints(C, globalns=g)\n"
        "    return sorted(g), repr(hints['y'])\n"
    )
    assert run_restricted(source) == (["typing"], "typing.List[int]")


def test_iteration_item_and_method_results_pass_the_value_guard() -> None:
    """Every value-yielding path refuses a forbidden value, not only attribute and item access:
    iteration (``for``, unpacking, ``iter``/``next``), ``dict.get``/``pop``/``setdefault``/``values``…"""
    g = POLICY.make_globals("evaluator")
    getiter, getattr_ = g["_getiter_"], g["_getattr_"]
    import builtins
    import os

    for bad in (os, builtins.eval, os.getpid, vars(builtins), vars(os), {"__builtins__": vars(builtins)}):
        holder = {"k": bad}
        with pytest.raises(POLICY.RestrictedError):
            list(getiter(holder.values()))
        with pytest.raises(POLICY.RestrictedError):
            list(getiter(holder.items()))
        with pytest.raises(POLICY.RestrictedError):
            getattr_(holder, "get")("k")
        with pytest.raises(POLICY.RestrictedError):
            getattr_(dict, "get")(holder, "k")
        with pytest.raises(POLICY.RestrictedError):
            getattr_(dict(holder), "pop")("k")
        with pytest.raises(POLICY.RestrictedError):
            getattr_([bad], "pop")()
        with pytest.raises(POLICY.RestrictedError):
            g["__builtins__"]["next"](iter([bad]))
    assert list(getiter({"a": 1}.items())) == [("a", 1)]
    assert getattr_({"a": 1}, "get")("a") == 1


def test_the_standard_modules_functions_results_pass_the_value_guard() -> None:
    """A call is one more way to a value: what a standard module's function (a Python function, a
    builtin, a bound method like ``random.choice``) returns passes the same guard."""
    import builtins
    import os

    g = POLICY.make_globals("evaluator")
    imp = g["__builtins__"]["__import__"]
    for module, name in (("functools", "reduce"), ("operator", "getitem"), ("random", "choice")):
        fn = g["_getattr_"](imp(module), name)
        args: tuple[Any, ...] = {
            "reduce": (lambda a, b: b, [1, os.getpid]),
            "getitem": ({"k": builtins.eval}, "k"),
            "choice": ([vars(os)],),
        }[name]
        with pytest.raises(POLICY.RestrictedError):
            fn(*args)
    assert g["_getattr_"](imp("functools"), "reduce")(lambda a, b: a + b, [1, 2, 3]) == 6
