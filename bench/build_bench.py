"""The new-package-set benchmark (called by bench/run.py, or ``python -m bench.build_bench [backend]``).

Five pin sets a user might write (``SETS``: small, medium, large, npm, and one that differs from the
large one by one package), each **never seen** by the service, timed as a user meets them: one
``POST /v1/evaluate`` whose code imports the packages, from the request to its result (the build, a
worker's start, the call). In the same run, the baseline: the same result by hand, a bare ``uv pip install``
of the same pins into an empty folder (npm: a bare ``npm install``), with the service's interpreter and a
cache of its own, **then the code's first run there** (a fresh interpreter importing the set from that
folder and calling ``evaluate`` once: issue 55 §4; the install alone is kept as a column). Each set's two runs
come one right after the other, by hand first for every other set (:func:`measure`): the downloads they both
make meet the network at the same minute (its speed moved 1.3–8 s for the same ten wheels between minutes).

* **cold**: a fresh data dir (empty package store) against a fresh uv cache; the sets in order, so the
  one-package-different set comes after the large one (its store then holds every other package);
* **warm**: the service restarted on the same data dir with its runtimes removed but the package store
  kept (the sets are new to it, their files are not) against the bare install with the cache it filled;
* **disk**: what each set added under the data dir (runtimes and store, every inode once: ``du``).

Goals: the large set cold ≤ 1.3× the same result by hand (issue 55 §4; issue 33 compared with the install
alone), warm ≤ 1.5 s; the one-package-different set ≤ 0.3× the large one in time and in disk (issue 33).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.common import serving, verdict
from evaluator_host.builds.npm import NPM_INSTALL_FLAGS, npm_command, npm_package_json
from evaluator_host.builds.store import disk_usage
from evaluator_host.builds.uv import uv_binary
from evaluator_host.definitions.languages import node_executable
from evaluator_host.settings import Settings

SETS: list[tuple[str, str, dict[str, str], str]] = [  # (name, language, pins, module the code imports)
    ("small", "python", {"rapidfuzz": "3.9.7"}, "rapidfuzz"),
    ("medium", "python", {"numpy": "2.1.3", "scipy": "1.14.1"}, "scipy"),
    ("large", "python", {"scikit-learn": "1.5.2", "nltk": "3.9.1"}, "sklearn"),
    ("large + 1", "python", {"scikit-learn": "1.5.2", "nltk": "3.9.1", "tabulate": "0.9.0"}, "tabulate"),
    ("npm", "javascript", {"ajv": "8.17.1", "zod": "3.23.8"}, "zod"),
]
PY_CODE = "def evaluate(inputs, outputs, trace):\n    import {module}\n    return 1.0\n"
JS_CODE = "function evaluate(inputs, outputs, trace) {{\n  require('{module}');\n  return 1.0;\n}}\n"
GOAL_COLD_RATIO, GOAL_WARM_S, GOAL_ONE_MORE = 1.3, 1.5, 0.3


@dataclass
class SetFigures:
    name: str
    pins: dict[str, str]
    service_cold_s: float = 0.0
    service_warm_s: float = 0.0
    bare_cold_s: float = 0.0  # by hand: the bare install, then the code's first run there
    bare_warm_s: float = 0.0
    install_cold_s: float = 0.0  # the bare install alone (issue 33's baseline)
    install_warm_s: float = 0.0
    disk_mb: float = 0.0  # what the set added to the data dir (cold run)
    bare_disk_mb: float = 0.0  # the bare install's folder (and the cache it filled)
    note: str = ""  # the first answer's X-Runtime-Build


@dataclass
class BuildFigures:
    backend: str
    sets: list[SetFigures] = field(default_factory=list)


def _first_result(client: httpx.Client, language: str, pins: dict[str, str], module: str) -> tuple[float, str]:
    code = (PY_CODE if language == "python" else JS_CODE).format(module=module)
    started = time.perf_counter()
    answer = client.post("/v1/evaluate", json={"language": language, "code": code, "packages": pins})
    took = time.perf_counter() - started
    answer.raise_for_status()
    assert answer.json()["score"] == 1.0, answer.text
    return took, answer.headers.get("x-runtime-build", "")


def _data_disk(data_dir: Path) -> int:
    found = (data_dir / "runtimes", data_dir / "package-store", data_dir / "images" / "package-store")
    return disk_usage([p for p in found if p.exists()])


def _runtime_images(pins: dict[str, str] | None = None) -> list[Any]:
    """The engine's runtime images (of exactly ``pins``, when given): docker runtimes live in the engine,
    shared by every data dir, so a set is "never seen" only once its image is gone."""
    import docker

    client = docker.from_env(timeout=120)
    try:
        found = client.images.list(filters={"label": "evaluator-host.packages"})
        wanted = None if pins is None else json.dumps(pins, sort_keys=True)
        return [
            i
            for i in found
            if wanted is None or json.dumps(json.loads(i.labels["evaluator-host.packages"]), sort_keys=True) == wanted
        ]
    finally:
        client.close()


def _forget_images(backend: str) -> None:
    """docker: remove the sets' runtime images (the shared uv cache, in the data dir, stays)."""
    if backend != "docker":
        return
    import docker

    client = docker.from_env(timeout=120)
    try:
        for _, _, pins, _ in SETS:
            for image in _runtime_images(pins):
                client.images.remove(image.id, force=True)
    finally:
        client.close()


def _image_mb(pins: dict[str, str]) -> float:
    """docker: what the set's runtime image adds to its base (its own layers), in MB."""
    import docker

    client = docker.from_env(timeout=120)
    try:
        images = _runtime_images(pins)
        if not images:  # (docker_runtime_store: a Python set is a folder of the data dir, counted there)
            return 0.0
        image = images[0]
        base = client.images.get(image.labels["evaluator-host.base-image"])
        return float(image.attrs["Size"] - base.attrs["Size"]) / 1e6
    finally:
        client.close()


FIRST_RUN_PY = "import sys\nsys.path.insert(0, sys.argv[1])\n{code}assert evaluate({{}}, None, None) == 1.0\n"
FIRST_RUN_JS = "{code}if (evaluate({{}}, null, null) !== 1.0) process.exit(1);\n"


def _bare(language: str, pins: dict[str, str], cache: Path, module: str) -> tuple[float, float, int]:
    """The same first result by hand: a bare install of ``pins`` into an empty folder with ``cache``, then the
    code's first run there (a fresh interpreter importing the set from that folder, calling ``evaluate``
    once); (install seconds, install + first run seconds, bytes of folder + cache growth)."""
    before = disk_usage([cache]) if cache.exists() else 0
    with tempfile.TemporaryDirectory(prefix="bare-", dir=cache.parent) as target:
        if language == "python":
            uv = uv_binary()
            assert uv is not None, "uv is missing: make install"
            python = Settings().python_executable
            argv = [uv, "pip", "install", "--quiet", "--python", python, "--target", target]
            argv += ["--cache-dir", str(cache), "--index-strategy", "unsafe-best-match"]
            argv += [f"{name}=={version}" for name, version in pins.items()]
            script = FIRST_RUN_PY.format(code=PY_CODE.format(module=module))
            first = [python, "-I", "-c", script, target]
        else:
            Path(target, "package.json").write_text(json.dumps(npm_package_json(pins)))
            argv = [*npm_command(), "install", *NPM_INSTALL_FLAGS, "--cache", str(cache), "--prefix", target]
            script = FIRST_RUN_JS.format(code=JS_CODE.format(module=module))
            first = [node_executable(), "-e", script]
        started = time.perf_counter()
        subprocess.run(argv, check=True, cwd=target, stdout=subprocess.DEVNULL)
        installed = time.perf_counter() - started
        subprocess.run(first, check=True, cwd=target, stdout=subprocess.DEVNULL)  # (node: require from cwd)
        took = time.perf_counter() - started
        size = disk_usage([Path(target), cache]) - before
    return installed, took, size


def _by_hand_cold(one: SetFigures, language: str, pins: dict[str, str], module: str, scratch: Path) -> None:
    """The set's cold result by hand (its own fresh cache; "large + 1" with the shared cache the large set filled,
    as the service's store holds the rest), then the shared cache filled as the service's store was."""
    cache = scratch / f"{language}-cache"
    if one.name == "large + 1":
        one.install_cold_s, one.bare_cold_s, size = _bare(language, pins, cache, module)
    else:
        fresh = scratch / f"cold-{len(list(scratch.glob('cold-*')))}"
        one.install_cold_s, one.bare_cold_s, size = _bare(language, pins, fresh, module)
        _bare(language, pins, cache, module)
    one.bare_disk_mb = size / 1e6


def measure(backend: str = "process") -> BuildFigures:
    """Each set's first result from the service and by hand, **at the same moment**: the two runs of a set come
    one right after the other (by hand first for every other set, the service first for the rest), so a
    download's speed, which moves by several times from one minute to the next, is the same for both."""
    figures = BuildFigures(backend)
    with tempfile.TemporaryDirectory(prefix="evaluator-host-bench-") as folder:
        scratch = Path(folder)
        data = scratch / "data"
        data.mkdir()
        env = {"EVALUATOR_HOST_BACKEND": backend}
        _forget_images(backend)
        with serving(str(data), env) as (base, _), httpx.Client(base_url=base, timeout=600) as client:
            for position, (name, language, pins, module) in enumerate(SETS):  # cold: an empty store
                one = SetFigures(name, pins)
                if position % 2 == 0:
                    _by_hand_cold(one, language, pins, module, scratch)
                before = _data_disk(data)
                one.service_cold_s, one.note = _first_result(client, language, pins, module)
                one.disk_mb = (_data_disk(data) - before) / 1e6
                if backend == "docker":  # (its image's own layers, and what the shared cache gained)
                    one.disk_mb += _image_mb(pins)
                if position % 2 == 1:
                    _by_hand_cold(one, language, pins, module, scratch)
                figures.sets.append(one)
        for runtime in (data / "runtimes").iterdir() if (data / "runtimes").exists() else []:
            if runtime.is_dir() and not runtime.name.startswith("."):  # warm: the runtimes gone, the store kept
                shutil.rmtree(runtime)
            elif runtime.name.endswith((".build.json", ".used")):
                runtime.unlink()
        _forget_images(backend)
        with serving(str(data), env) as (base, _), httpx.Client(base_url=base, timeout=600) as client:
            for position, (one, (_, language, pins, module)) in enumerate(zip(figures.sets, SETS, strict=True)):
                cache = scratch / f"{language}-cache"  # by hand: the cache the cold runs filled
                if position % 2 == 0:
                    one.install_warm_s, one.bare_warm_s, _ = _bare(language, pins, cache, module)
                one.service_warm_s, _ = _first_result(client, language, pins, module)
                if position % 2 == 1:
                    one.install_warm_s, one.bare_warm_s, _ = _bare(language, pins, cache, module)
    return figures


def render(f: BuildFigures) -> tuple[str, str]:
    """(section, summary line) for docs/benchmarks.md."""
    by = {s.name: s for s in f.sets}
    large, more = by["large"], by["large + 1"]
    cold_ratio = large.service_cold_s / large.bare_cold_s
    ok_cold, ok_warm = cold_ratio <= GOAL_COLD_RATIO, large.service_warm_s <= GOAL_WARM_S
    time_ratio, disk_ratio = more.service_cold_s / large.service_cold_s, more.disk_mb / large.disk_mb
    ok_more = time_ratio <= GOAL_ONE_MORE and disk_ratio <= GOAL_ONE_MORE
    rows = "\n".join(
        f"| {s.name} | `{', '.join(f'{k}=={v}' for k, v in s.pins.items())}` | {s.service_cold_s:.2f} | "
        f"{s.bare_cold_s:.2f} ({s.install_cold_s:.2f}) | **{s.service_cold_s / s.bare_cold_s:.2f}×** | "
        f"{s.service_warm_s:.2f} | {s.bare_warm_s:.2f} ({s.install_warm_s:.2f}) | "
        f"{s.service_warm_s / s.bare_warm_s:.2f}× | {s.disk_mb:.1f} | {s.bare_disk_mb:.1f} |"
        for s in f.sets
    )
    notes = "\n".join(f"- {s.name}: `{s.note}`" for s in f.sets if s.note)
    summary = (
        f"- {f.backend}, a never-seen package set to its first result: large (scikit-learn + nltk) cold "
        f"**{large.service_cold_s:.2f} s** = **{cold_ratio:.2f}×** the same result by hand (a bare `uv pip install`, "
        f"then the code's first run there: {large.bare_cold_s:.2f} s; goal ≤ {GOAL_COLD_RATIO}×: {verdict(ok_cold)}), "
        f"warm **{large.service_warm_s:.2f} s** = {large.service_warm_s / large.bare_warm_s:.2f}× by hand with the "
        f"cache filled ({large.bare_warm_s:.2f} s), warm store **{large.service_warm_s:.2f} s** (goal ≤ "
        f"{GOAL_WARM_S} s: {verdict(ok_warm)}); the large set + one package: {time_ratio:.2f}× its time, "
        f"{disk_ratio:.2f}× its disk (goal ≤ {GOAL_ONE_MORE}×: {verdict(ok_more)})"
    )
    section = f"""
## New package sets ({f.backend} backend)

`bench/build_bench.py`: each set never seen by the service, one `POST /v1/evaluate` importing it, from the
request to its result (build, worker start, call); beside it, in the same run, the same result by hand: a
bare `uv pip install` of the same pins into an empty folder (npm: a bare `npm install`) with the service's
interpreter, then the code's first run there (a fresh `python -I` importing the set from that folder and
calling `evaluate` once; npm: `node -e` requiring it from the folder), timed together, right before or after
the service's run of the same set (in turn), so both download at the same minute; the install alone
is in brackets (issue 33 compared with it; issue 55 §4 with the whole). Cold: an
empty package store / uv cache (the sets in this order, so "large + 1" comes after "large": the store then
holds the rest, as the bare install's cache does); warm: the service restarted with its runtimes removed and
its store kept (docker: the sets' runtime images removed), the bare install with the cache it filled. Disk:
what the set added to the data dir (runtimes + store, every inode once, as `du` counts; docker: its runtime
image's own layers, plus what the shared uv cache gained); bare: its folder and the cache it filled.

{summary}

| set | pins | cold s | by hand s (install) | ratio | warm s | by hand s (install) | ratio | disk MB | bare MB |
|---|---|---|---|---|---|---|---|---|---|
{rows}

The first answers' `X-Runtime-Build`:

{notes}
"""
    return section, summary


if __name__ == "__main__":
    body, head = render(measure(sys.argv[1] if len(sys.argv) > 1 else "process"))
    print(head)
    print(body)
