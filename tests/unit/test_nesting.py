"""The depth-bounded parse of Python definitions (issue 28.8): never a crash, whatever the thread's stack."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.support import REPO

SHAPES = {  # built in the child (its command line cannot hold them)
    "chain": '"x = " + "a+" * 60_000 + "a\\n"',
    "unary": '"x = " + "-" * 60_000 + "1\\n"',
    "lambdas": '"f = " + "lambda: " * 20_000 + "1\\n"',
    "attributes": '"x = a" + ".b" * 60_000 + "\\n"',
    "calls": '"x = f" + "()" * 60_000 + "\\n"',
}


def test_a_small_thread_stack_cannot_crash_the_process_on_deeply_nested_code() -> None:
    """On a 256 KiB thread stack (musl's default is 128 KiB) ``ast.parse`` of a 120 kB ``a+a+…`` kills the
    process (SIGSEGV); the definitions' parse runs such code on a thread with a stack of its own."""
    script = textwrap.dedent(
        f"""
        import threading
        from evaluator_host.definitions.interfaces import detect_python
        from evaluator_host.errors import CodeSyntaxError
        SHAPES = {{{", ".join(f"{name!r}: {expr}" for name, expr in SHAPES.items())}}}
        def run():
            for name, code in SHAPES.items():
                try:
                    detect_python("python", "def evaluate(inputs, outputs, trace):\\n    return 1\\n" + code)
                except CodeSyntaxError as exc:
                    print(name, exc.message[:29], flush=True)
                except BaseException as exc:  # what a route would answer 500 for
                    print(name, type(exc).__name__, flush=True)
        threading.stack_size(256 * 1024)
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.splitlines() == [f"{name} the code is nested too deeply" for name in SHAPES], done.stdout
