"""The ``evaluator-host`` command line (``main`` is the console script)."""

from evaluator_host.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
