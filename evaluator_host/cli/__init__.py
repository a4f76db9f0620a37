"""The ``evaluator-host`` command line (``main`` is the console script).

One room on purpose: one module per command group (``run``, ``batch``, ``judge``, ``migrate``, ``rules``,
``runtimes``, ``images``, ``targets``, ``admin``, ``db``, ``serve``, ``worker``, ``demo``, ``fixtures`` with
``fixture_runs``) and the few pieces they share (``inputs`` reads files, ``output`` prints, ``remote`` and
``results`` speak to a running service, ``lazy`` keeps start-up fast by importing a group only when it runs).
A command group is read as one unit and changes for one reason; a new one is a new module beside them.

A surface: may import anything below it, and nothing imports it (``tests/unit/test_layers.py``).
"""

from evaluator_host.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
