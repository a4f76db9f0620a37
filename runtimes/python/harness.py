"""Python evaluator harness (standard library only): ``python -I -S harness.py CONFIG_JSON``.

The protocol it speaks is ``runtimes/PROTOCOL.md`` (frames: ``runtimes/protocol.schema.json``); the
harness itself is the package ``evaluator_harness`` next to this file, one module per concept (its
``__init__`` lists them). It is imported from this folder only: the folder is on ``sys.path`` just
long enough to import it, so the user's code cannot import the harness's modules by a plain name.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv: list[str]) -> None:
    """Entry point: ``harness.py CONFIG_JSON``."""
    sys.path.insert(0, HERE)
    try:
        config = json.loads(argv[1])
        from evaluator_harness.memory import limit_address_space
        from evaluator_harness.serve import Harness

        if config.get("egress"):  # (sockets and a thread: only a worker with egress imports them)
            from evaluator_harness.egress import forward_egress
    finally:
        sys.path.remove(HERE)
    limit_address_space(int(config.get("address_space_mb") or 0))  # before anything user code could map
    if config.get("egress"):
        forward_egress(config["egress"]["socket"], int(config["egress"]["port"]))
    harness = Harness(config)
    if not harness.code_path and not harness.bind():
        os._exit(0)
    harness.load()
    harness.serve()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
