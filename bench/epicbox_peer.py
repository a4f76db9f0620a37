"""A real peer: epicbox (a container per evaluation), in a venv of its own, on the same base image.

epicbox 1.1 needs ``urllib3<2`` and ``requests<2.32``, which the project's own environment does
not have, so it gets its own venv (made once under ``.bench-venvs/epicbox``, from PyPI). It runs
the same comparison as the service's evaluator: a Python program reading the case from a file
and printing the verdict, with a 5 s CPU and 128 MB limit, as epicbox's docs show.

``measure(n)`` gives the wall milliseconds of ``n`` ``epicbox.run`` calls, or None with the
reason when the venv cannot be made (no network to PyPI).
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv

from bench.common import REPO

VENV = REPO / ".bench-venvs" / "epicbox"
PINS = ["epicbox==1.1.0", "urllib3<2", "requests<2.32"]
SCRIPT = r"""
import json, sys, time
import epicbox
image, n = sys.argv[1], int(sys.argv[2])
epicbox.configure(profiles=[epicbox.Profile("python", image, user="65534")])
code = b"import json\nd = json.load(open('case.json'))\n"
code += b"print(json.dumps(d['outputs'] == d['inputs']['correct_answer']))\n"
case = json.dumps({"inputs": {"correct_answer": "4"}, "outputs": "4"}).encode()
files = [{"name": "main.py", "content": code}, {"name": "case.json", "content": case}]
times = []
for _ in range(n):
    start = time.perf_counter()
    result = epicbox.run("python", "python3 main.py", files=files, limits={"cputime": 5, "memory": 128})
    times.append((time.perf_counter() - start) * 1000)
    assert result["exit_code"] == 0 and result["stdout"].strip() == b"true", result
print(json.dumps({"version": epicbox.__version__ if hasattr(epicbox, "__version__") else "1.1.0", "ms": times}))
"""


def _python() -> str:
    python = VENV / "bin" / "python"
    if not python.exists():
        venv.create(VENV, with_pip=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PINS], check=True, timeout=600)
    return str(python)


def measure(image: str, n: int) -> tuple[list[float] | None, str]:
    """Wall ms of ``n`` epicbox runs on ``image``; (None, why) when epicbox can't be installed or run."""
    try:
        python = _python()
        out = subprocess.run(
            [python, "-c", SCRIPT, image, str(n)], capture_output=True, text=True, timeout=600, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    found = json.loads(out.strip().splitlines()[-1])
    return [float(x) for x in found["ms"]], "epicbox 1.1.0"


if __name__ == "__main__":
    times, what = measure(sys.argv[1] if len(sys.argv) > 1 else "evaluator-host/base-python:latest", 5)
    print(what, times)
