"""The ``evaluator-host`` command line (``main`` is the console script).

At the top, the entry and the pieces every command shares: ``main`` (the parser and dispatch), ``lazy`` (a
group's handler imported only when it runs: start-up stays fast), ``inputs`` (files and options checked up front),
``output`` (what evaluations print), ``remote`` (the way to a running service). The command groups, one module
each, in three rooms by where they act (``tests/unit/test_rooms.py``: a room imports the shared pieces, never
another room): ``evaluate/`` (here, or one evaluation handed to a service: ``run``, ``batch``, ``test``,
``migrate``, ``demo-traffic``), ``service/`` (a running service's API with a key: ``workspaces``, ``keys``,
``rules``, ``jobs``, ``review``, ``results``), ``operate/`` (this host: ``serve``, ``worker``, ``db``, ``images``,
``runtimes``).

A surface: may import anything below it, and nothing imports it (``tests/unit/test_layers.py``).
"""

from evaluator_host.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
