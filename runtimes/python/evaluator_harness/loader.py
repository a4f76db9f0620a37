"""The evaluator's code: its settings, bound from a ``load`` frame, imported, and its errors.

Every worker starts *unbound* (the pool keeps such spares warm per runtime, on every backend) and
waits for one ``load`` frame carrying the code and the evaluator's config (``entrypoint``,
``interface``, ``policy``, ``output_limit``, ``result_limit``, ``env``); the code is written under
``work_dir`` so line numbers and tracebacks are the user's own. (A ``code_path`` in the start config
binds it at once: the selftest uses that.)

The user's module is imported from ``code_path``. For the ``metric`` interface the entrypoint is a
class, instantiated once here (:mod:`.metric`). With ``policy: "restricted"`` it is compiled and
run under the ``restricted/`` policy package (next to ``harness.py``, loaded by path as one
unit): RestrictedPython with the guard set described there, from ``vendor_dirs``. A failure at
import is the user's: it becomes the ``load_error`` every case is answered with.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

from .cases import Budget, Capture
from .metric import MetricAdapter, offer_builtin

HARNESS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Loader:
    """The evaluator a worker serves: settings, the loaded entry point, or the error loading it."""

    channel: Any  # the harness's Channel (serve.py)

    def __init__(self, config: dict[str, Any]) -> None:
        self.code_path: str = ""
        self.entrypoint = self.interface = ""
        self.output_limit = self.result_limit = 1 << 20
        self.memory_mb = 0  # the evaluator's memory_mb (0: unknown): see .memory
        self.fn: Any = None
        self.params: list[Any] = []  # inspect.Parameter, for the main interface only
        self.load_error: dict[str, Any] | None = None
        self.policy = "standard"
        self.site_dirs: list[str] = []
        self.vendor_dirs: list[str] = []
        self.work_dir = config.get("work_dir") or "/tmp/evaluator"

    def configure(self, config: dict[str, Any]) -> None:
        """Take the evaluator's settings (at start, or from the ``load`` frame)."""
        self.code_path = config.get("code_path", self.code_path)
        self.entrypoint = config.get("entrypoint", self.entrypoint)
        self.interface = config.get("interface", self.interface)
        self.output_limit = int(config.get("output_limit", self.output_limit))
        self.result_limit = int(config.get("result_limit", self.result_limit))
        self.memory_mb = int(config.get("memory_mb", self.memory_mb))
        self.policy = config.get("policy", self.policy)
        self.vendor_dirs = list(config.get("vendor_dirs", self.vendor_dirs))
        if config.get("site_dirs"):
            import site

            for site_dir in config["site_dirs"]:
                site.addsitedir(site_dir)
            self.site_dirs += config["site_dirs"]

    def bind(self) -> bool:
        """Wait for the ``load`` frame of an unbound worker; write the code; False on EOF."""
        try:
            message = self.channel.recv()
        except EOFError:
            return False
        if message.get("op") != "load":
            return False
        if message.get("ack"):  # the host learns the worker is alive before the user's code runs
            self.channel.send({"type": "loading"})
        # the workspace secrets the evaluator lists (and, with egress, the proxy variables): its env
        os.environ.update(message.pop("env", None) or {})
        folder = message.get("work_dir") or self.work_dir
        os.makedirs(folder, mode=0o700, exist_ok=True)
        code_path = os.path.join(folder, message.get("filename") or "evaluator.py")
        with open(code_path, "w", encoding="utf-8") as fh:
            fh.write(message["code"])
        self.configure({**message, "code_path": code_path})
        return True

    def load(self) -> None:
        """Import the user's module and find its entry point; a failure becomes ``load_error``."""
        budget = Budget(self.output_limit)
        out, err = Capture(budget, "<stdout>"), Capture(budget, "<stderr>")
        sys.stdout, sys.stderr = out, err
        try:
            with open(self.code_path, encoding="utf-8") as fh:
                source = fh.read()
            module = types.ModuleType("evaluator")
            module.__file__ = self.code_path
            sys.modules["evaluator"] = module
            if self.interface == "metric":
                offer_builtin()  # the built-in nemo_evaluator_sdk, unless the runtime pins the real one
            if self.policy == "restricted":
                policy = self._restricted()
                code = policy.compile_restricted(source, self.code_path)
                packages = policy.runtime_modules(self.site_dirs)
                if self.interface == "metric":
                    packages.add("nemo_evaluator_sdk")
                module.__dict__.update(policy.make_globals("evaluator", packages))
            else:
                code = compile(source, self.code_path, "exec")
            exec(code, module.__dict__)
            self.fn = getattr(module, self.entrypoint, None)
            if self.interface == "metric":  # the class, instantiated once: called per case like evaluate()
                self.fn = MetricAdapter(self.fn)
            if not callable(self.fn):
                raise TypeError(f"{self.entrypoint} is not callable")
            if self.interface == "main":
                import inspect

                self.params = list(inspect.signature(self.fn).parameters.values())
        except BaseException as exc:  # noqa: BLE001 - any failure at import is the user's
            self.load_error = self.error(exc)
            self.load_error["stdout"] = out.text()
            self.load_error["stderr"] = err.text()

    def _restricted(self) -> Any:
        """The ``restricted/`` policy package (next to ``harness.py``), loaded by path as one unit (its
        modules import each other relatively), with RestrictedPython from ``vendor_dirs``."""
        import importlib.util

        sys.path[:0] = [entry for entry in self.vendor_dirs if entry not in sys.path]
        folder = os.path.join(HARNESS_DIR, "restricted")
        spec = importlib.util.spec_from_file_location(
            "evaluator_host_restricted", os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module

    def error(self, exc: BaseException, to_user_line: bool = False) -> dict[str, Any]:
        """``exc`` as the reply's ``error``: the frames from the user's file on, named ``evaluator.py``;
        with ``to_user_line`` (an interrupt the harness raised: a timeout) or under the restricted
        policy, ending at the user's last line (the harness's or the guards' own frames tell the user
        nothing)."""
        import traceback

        frames = traceback.extract_tb(exc.__traceback__)
        user = [i for i, f in enumerate(frames) if f.filename == self.code_path]
        line = frames[user[-1]].lineno if user else None
        if isinstance(exc, SyntaxError) and exc.filename == self.code_path:
            line = exc.lineno
        kept = frames[user[0] :] if user else []
        if user and (to_user_line or self.policy == "restricted"):
            kept = frames[user[0] : user[-1] + 1]
        text = "Traceback (most recent call last):\n" if kept else ""
        text += "".join(traceback.format_list(kept)).replace(self.code_path, "evaluator.py")
        text += "".join(traceback.format_exception_only(type(exc), exc)).replace(self.code_path, "evaluator.py")
        message = str(exc)
        if isinstance(exc, SystemExit):
            message = f"the evaluator called sys.exit({exc.code!r})"
        return {"type": type(exc).__name__, "message": message, "line": line, "traceback": text}
