# ruff: noqa: E501 - the evaluator sources below read best one statement a line
"""Issue 47, finding 1: every value crossing from code the policy ships (the built-in
``nemo_evaluator_sdk``, the standard modules' views, the C-level callbacks of ``map``/``filter``/
``sorted``/``min``/``max``/``functools.reduce``…) to user code passes the one value guard — containers
included — and the code the policy ships never reads an attribute user code chose.

Host-side, as ``test_restricted_escapes.py``: each row is compiled with the policy's own compiler and
run with its own globals, the built-in SDK importable as the harness makes it for the ``metric``
interface. A row that returns reached the real ``os`` (``getpid``): a hole.
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
PROTOCOLS = str(RUNTIMES_DIR / "python" / "protocols")
REFUSALS = (POLICY.RestrictedError, ImportError, NameError)


@pytest.fixture(autouse=True)
def _process_wide_guards_restored() -> Iterator[None]:
    """The policy guards ``typing``/``dataclasses``/``copy`` process-wide, as in a worker; restored here."""
    with policy_guards.restored():
        sys.path.append(PROTOCOLS)
        yield
        sys.path.remove(PROTOCOLS)
        sys.modules.pop("nemo_evaluator_sdk", None)


def run_restricted(source: str, call: str = "evaluate") -> Any:
    """Compile ``source`` under the policy with the built-in SDK importable; call ``call()``."""
    code = POLICY.compile_restricted(source, "evaluator.py")
    module = types.ModuleType("evaluator")
    previous = sys.modules.get("evaluator")
    sys.modules["evaluator"] = module
    try:
        module.__dict__.update(POLICY.make_globals("evaluator", {"nemo_evaluator_sdk", "leaky"}))
        exec(code, module.__dict__)
        return module.__dict__[call]()
    finally:
        if previous is None:
            sys.modules.pop("evaluator", None)
        else:
            sys.modules["evaluator"] = previous


#: The issue's attack, as filed: update_wrapper copies a type()-made class's __dict__ (``_fields``) onto
#: the SDK's own function; model_dump reads its __globals__; map's callback walks to eval.
ISSUE47_SDK_MODEL_DUMP = """
import functools
from nemo_evaluator_sdk import DatasetRow

def evaluate():
    C = type('C', (), {'_fields': ('__glo' + 'bals__',)})
    functools.update_wrapper(DatasetRow.model_dump, C)
    dumped = DatasetRow.model_dump(DatasetRow.model_dump)
    out = []
    def on_builtin(e, b):
        if getattr(e, '__name__', '') == 'eval':
            out.append(e("__imp" + "ort__('os').getpid()", {'__builtins__': b}))
    def on_global(b):
        if type(b) is dict and 'eval' in b:
            list(map(lambda e: on_builtin(e, b), b.values()))
    list(map(lambda g: list(map(on_global, g.values())), dumped.values()))
    return out[0]
"""

#: The same reach through the SDK's __repr__ (refused at compile time: a dunder; and the SDK refuses a non-model).
SDK_REPR_EQ = """
import functools
from nemo_evaluator_sdk import MetricOutput

def evaluate():
    C = type('C', (), {'_fields': ('__glo' + 'bals__',)})
    functools.update_wrapper(MetricOutput.__repr__, C)
    return MetricOutput.__repr__(MetricOutput.__repr__)
"""

#: A pinned package that leaks (runtime packages run unrestricted): each function hands its caller its own
#: module's namespace — the real ``__builtins__`` inside — by a different path. The policy cannot fix a
#: package; it guards what crosses into user code.
LEAKY_SOURCE = """
import asyncio

def in_a_dict():
    return {'ns': globals()}

def in_a_list():
    return [[1, (2, globals())]]

def one_by_one():
    yield globals()

def builtins_one_by_one():
    yield from globals()['__builtins__'].values()

class Context:
    def __enter__(self):
        return globals()
    def __exit__(self, *exc):
        return False

async def coroutine():
    return globals()

class AsyncItems:
    def __aiter__(self):
        return self
    async def __anext__(self):
        if getattr(self, 'done', False):
            raise StopAsyncIteration
        self.done = True
        return globals()

def decorator(fn):
    return eval

def send_to(generator):
    next(generator)
    return generator.send(globals())

def compare(obj):
    return globals() == obj
"""


@pytest.fixture(autouse=True)
def _leaky_package() -> Iterator[None]:
    module = types.ModuleType("leaky")
    exec(compile(LEAKY_SOURCE, "leaky.py", "exec"), module.__dict__)  # noqa: S102 - the test's own package
    sys.modules["leaky"] = module
    yield
    sys.modules.pop("leaky", None)


#: What C code or a pinned package hands user code, by every path. ``reach(ns)`` walks a namespace to the real
#: eval with map callbacks only (no guarded access) and runs ``os.getpid()``: each row gets a namespace to it.
REACH = """import leaky, functools, itertools
def reach(g):
    out = []
    def on_builtin(e, b):
        if getattr(e, '__name__', '') == 'eval':
            out.append(e("__imp" + "ort__('os').getpid()", {'__builtins__': b}))
    def on_global(b):
        if type(b) is dict and 'eval' in b:
            list(map(lambda e: on_builtin(e, b), b.values()))
    list(map(on_global, g.values()))
    return out[0]
"""
CROSSINGS: dict[str, str] = {
    "a_call_returns_a_dict_holding_a_namespace": "def evaluate():\n    found = leaky.in_a_dict()\n    return list(map(reach, found.values()))\n",
    "a_call_returns_a_nested_list_holding_a_namespace": "def evaluate():\n    return list(map(lambda t: reach(t[1]), map(lambda x: x[0], leaky.in_a_list())))\n",
    "map_hands_its_callback_an_item": "def evaluate():\n    return list(map(reach, leaky.one_by_one()))\n",
    "filter_hands_its_callback_an_item": "def evaluate():\n    out = []\n    list(filter(lambda g: out.append(reach(g)), leaky.one_by_one()))\n    return out\n",
    "sorted_key_gets_an_item": "def evaluate():\n    out = []\n    sorted(leaky.one_by_one(), key=lambda g: out.append(reach(g)) or 0)\n    return out\n",
    "min_and_max_key_get_an_item": "def evaluate():\n    out = []\n    max([1, 2], key=lambda n: 0)\n    min(leaky.one_by_one(), key=lambda g: out.append(reach(g)) or 0, default=None)\n    return out\n",
    "functools_reduce_hands_its_callback_an_item": "def evaluate():\n    return functools.reduce(lambda a, g: reach(g), leaky.one_by_one(), None)\n",
    "itertools_starmap_hands_its_callback_an_item": "def evaluate():\n    return list(itertools.starmap(reach, zip(leaky.one_by_one())))\n",
    "a_builtin_callback_walks_the_builtins": "def evaluate():\n    out = []\n    list(map(lambda e: out.append(e('1', {})) if getattr(e, '__name__', '') == 'eval' else None, leaky.builtins_one_by_one()))\n    return out[0]\n",
    "a_dunder_method_c_code_calls": "class Grab:\n    def __eq__(self, other):\n        self.reached = reach(other)\n        return False\ndef evaluate():\n    g = Grab()\n    leaky.compare(g)\n    return g.reached\n",
    "with_as_gets_what_enter_returns": "def evaluate():\n    with leaky.Context() as g:\n        return reach(g)\n",
    "await_gets_what_a_coroutine_returns": "async def main():\n    return reach(await leaky.coroutine())\ndef evaluate():\n    c = main()\n    try:\n        c.send(None)\n    except StopIteration as done:\n        return done.value\n",
    "async_for_gets_each_item": "async def main():\n    async for g in leaky.AsyncItems():\n        return reach(g)\ndef evaluate():\n    c = main()\n    try:\n        c.send(None)\n    except StopIteration as done:\n        return done.value\n",
    "a_decorator_returns_eval": "@leaky.decorator\ndef e():\n    pass\ndef evaluate():\n    return e('1')\n",
    "yield_gets_what_is_sent_in": "def catch():\n    g = yield 1\n    yield reach(g)\ndef evaluate():\n    return leaky.send_to(catch())\n",
    "an_exception_traceback_leads_to_frames": "def evaluate():\n    try:\n        1 / 0\n    except ZeroDivisionError as e:\n        return getattr(getattr(e, '__trace' + 'back__'), 'tb_frame')\n",
    "next_of_a_packages_iterator": "def evaluate():\n    return reach(next(leaky.one_by_one()))\n",
    "list_of_a_packages_iterator": "def evaluate():\n    return list(map(reach, list(leaky.one_by_one())))\n",
    "sorted_with_a_builtin_key_returns_the_items": "def evaluate():\n    return list(map(reach, sorted(leaky.one_by_one(), key=id)))\n",
    "dict_built_from_a_packages_items": "def evaluate():\n    return list(map(reach, dict(enumerate(leaky.one_by_one())).values()))\n",
    "copy_of_an_object_whose_reduce_returns_a_namespace": "import copy\ndef evaluate():\n    R = type('R', (), {'__reduce__': lambda self: (leaky.in_a_dict, ())})\n    return list(map(reach, copy.copy(R()).values()))\n",
    "vars_is_withheld": "def evaluate():\n    return reach(vars(evaluate))\n",
    "a_format_field_walks_to_globals": "def evaluate():\n    return '{0.__globals__[__builtins__]}'.format(evaluate)\n",
}

#: Rows the SDK itself refuses (a model method called on something that is not a model).
SDK_REFUSALS: dict[str, tuple[type[BaseException], ...]] = {
    "issue47_update_wrapper_then_sdk_model_dump_then_map": (TypeError,),
    "sdk_repr_is_not_reachable_on_another_object": (TypeError,),
}


def _refused(name: str, source: str) -> None:
    try:
        reached = run_restricted(source)
    except ImportError as exc:  # the rows' own imports are allowed: an ImportError is a broken row
        raise AssertionError(f"{name}: {exc}") from exc
    except REFUSALS + SDK_REFUSALS.get(name, ()):
        return
    except POLICY.PolicySyntaxError:
        return
    raise AssertionError(f"{name} escaped: it reached {reached!r}")


ROWS: dict[str, str] = {
    "issue47_update_wrapper_then_sdk_model_dump_then_map": ISSUE47_SDK_MODEL_DUMP,
    "sdk_repr_is_not_reachable_on_another_object": SDK_REPR_EQ,
}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_the_sdk_and_wrappers_never_hand_out_what_user_code_could_not_reach(name: str) -> None:
    _refused(name, ROWS[name])


@pytest.mark.parametrize("name", sorted(CROSSINGS))
def test_every_value_crossing_into_user_code_passes_the_guard(name: str) -> None:
    _refused(name, REACH + CROSSINGS[name])


def test_update_wrapper_copies_only_four_string_attributes_and_never_a_dict() -> None:
    """``functools.update_wrapper``/``wraps`` as shipped: name, qualname, module and doc (strings) and
    ``__wrapped__``; a ``type()``-made class's ``__dict__`` is not merged into the wrapper."""
    source = (
        "import functools\ndef evaluate():\n    C = type('C', (), {'marker': 1, '__doc__': 'd'})\n"
        "    def w():\n        pass\n    functools.update_wrapper(w, C)\n"
        "    @functools.wraps(C)\n    def v():\n        pass\n"
        "    return w.__name__, w.__doc__, hasattr(w, 'marker'), v.__name__, hasattr(v, 'marker')\n"
    )
    assert run_restricted(source) == ("C", "d", False, "C", False)


def test_the_sdk_models_still_work_as_documented() -> None:
    """The rewrite keeps the models' behaviour: keyword construction, equality, repr, model_dump."""
    source = (
        "from nemo_evaluator_sdk import DatasetRow, CandidateOutput, MetricInput, MetricOutput, MetricResult\n"
        "def evaluate():\n    row = DatasetRow(data={'a': 1}, row_index=2)\n"
        "    mi = MetricInput(row=row, candidate=CandidateOutput(output_text='x', metadata={'m': 1}))\n"
        "    r = MetricResult(outputs=[MetricOutput(name='s', value=1.0)])\n"
        "    return (mi.model_dump(), row == DatasetRow(data={'a': 1}, row_index=2), repr(r),\n"
        "            mi.candidate.as_sample(), row == 1)\n"
    )
    dump, equal, text, sample, other = run_restricted(source)
    assert dump == {
        "row": {"row_index": 2, "data": {"a": 1}},
        "candidate": {"output_text": "x", "response": None, "trajectory": None, "metadata": {"m": 1}},
    }
    assert equal is True and other is False
    assert text == "MetricResult(outputs=[MetricOutput(name='s', value=1.0)], diagnostics=[])"
    assert sample == {"m": 1, "output_text": "x"}


def test_ordinary_code_that_the_crossings_touch_runs_as_before() -> None:
    """Calls, callbacks, ``with``, ``await``, ``async for``, decorators, generators' ``send``, ``super()``,
    ``namedtuple``/``Enum``/``TypeVar`` (which name their caller's module from its frame) under the guards."""
    source = (
        "import asyncio, collections, contextlib, enum, functools, itertools, typing\n"
        "P = collections.namedtuple('P', 'a b')\nColor = enum.Enum('Color', 'RED GREEN')\nT = typing.TypeVar('T')\n"
        "class Base:\n    def __init__(self, n):\n        self.n = n\n"
        "class Kid(Base):\n    def __init__(self, *args, **kw):\n        super().__init__(*args, **kw)\n"
        "@contextlib.contextmanager\ndef ctx(v):\n    yield {'v': v}\n"
        "@functools.lru_cache(maxsize=None)\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
        "class Items:\n    def __init__(self):\n        self.left = [1, 2]\n    def __aiter__(self):\n        return self\n"
        "    async def __anext__(self):\n        if not self.left:\n            raise StopAsyncIteration\n        return self.left.pop()\n"
        "async def total():\n    out = 0\n    async for x in Items():\n        out += await same(x)\n    return out\n"
        "async def same(x):\n    return x\n"
        "def drive(c):\n    try:\n        c.send(None)\n    except StopIteration as done:\n        return done.value\n"
        "def echo():\n    got = yield 'ready'\n    yield got * 2\n"
        "class Quiet:\n    def __enter__(self):\n        return self\n    def __exit__(self, kind, exc, tb):\n"
        "        self.caught = kind.__name__\n        return True\n"
        "def evaluate():\n    with ctx(3) as d:\n        v = d['v']\n    with Quiet() as q:\n        1 / 0\n"
        "    assert q.caught == 'ZeroDivisionError'\n    g = echo()\n    next(g)\n"
        "    return (P(1, 2).a, P.__module__, Color.RED.value, Color.__module__, T.__module__, Kid(n=4).n, v,\n"
        "            fib(20), drive(total()), g.send(5), sorted([3, 1, 2], key=lambda x: -x),\n"
        "            list(map(lambda a, b: a + b, [1], [2])), functools.reduce(lambda a, b: a * b, [1, 2, 3]),\n"
        "            list(itertools.starmap(pow, [(2, 3)])), max([[1], [2, 2]], key=len), dict(zip('ab', [1, 2])))\n"
    )
    assert run_restricted(source) == (
        1,
        "evaluator",
        1,
        "evaluator",
        "evaluator",
        4,
        3,
        6765,
        3,
        10,
        [3, 2, 1],
        [3],
        6,
        [8],
        [2, 2],
        {"a": 1, "b": 2},
    )


#: The review's escapes of the redesigned policy: a guard made by subclassing a stdlib class
#: (``string.Formatter``) left the stdlib's ``get_field`` — a ``getattr`` of any name — one ``super(…)``
#: or ``type.mro(…)`` away, and from ``object.__subclasses__()`` any class (``subprocess.Popen``).
BASE_CLASS_ESCAPES = {
    "super_of_the_formatter_to_the_stdlib_get_field": """
import string, asyncio
def evaluate():
    f = string.Formatter()
    sub, _ = super(string.Formatter, f).get_field("0.__class__.__base__.__subclasses__", (1,), {})
    return [c for c in sub() if c.__name__ == 'Popen'][0](['id'], stdout=-1).communicate()[0]
""",
    "type_mro_to_the_stdlib_formatter": """
import string
def evaluate():
    base = getattr(type, 'm' + 'ro')(string.Formatter)[1]
    sub, _ = base().get_field("0.__class__.__base__.__subclasses__", (1,), {})
    return sub()
""",
    "super_of_a_str_subclass_to_an_unguarded_format": """
import json
class S(str): pass
def evaluate():
    return super(S, S("{0.__wrapped__.__globals__[__builtins__][eval]}")).format(json.dumps)
""",
    "super_of_a_str_subclass_type_to_an_unguarded_format": """
import json
class S(str): pass
def evaluate():
    return super(S, S).format("{0.__wrapped__.__globals__[__builtins__][eval]}", json.dumps)
""",
}


@pytest.mark.parametrize("name", sorted(BASE_CLASS_ESCAPES))
def test_a_guard_is_never_undone_through_a_base_class(name: str) -> None:
    with pytest.raises((*REFUSALS, AttributeError, POLICY.PolicySyntaxError)):
        run_restricted(BASE_CLASS_ESCAPES[name])


def test_classes_of_refused_modules_are_refused_as_values_and_in_memory_io_is_not() -> None:
    import io
    import subprocess

    for refused in (subprocess.Popen, io.FileIO):
        with pytest.raises(POLICY.RestrictedError):
            POLICY.guard_value(refused)
    for kept in (io.StringIO, io.BytesIO, int, dict, OSError):
        assert POLICY.guard_value(kept) is kept


def test_the_safe_formatter_keeps_string_formatters_interface() -> None:
    source = """
import string
class Angled(string.Formatter):
    def format_field(self, value, spec):
        return "<" + str(value) + ">"
def evaluate():
    plain = string.Formatter().format("{0} and {x:>5} {0!r}", 1, x="ab")
    return plain, "{a}-{0}".format(2, a=3), Angled().format("{0}{1}", 1, 2), list(Angled().parse("a{0}b"))
"""
    assert run_restricted(source) == (
        "1 and    ab 1",
        "3-2",
        "<1><2>",
        [("a", "0", "", None), ("b", None, None, None)],
    )
