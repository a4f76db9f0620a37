"""evaluator-host: sandboxed, polyglot code execution for LLM evaluators.

The package's folders are its domains (docs/architecture.md draws the tree and its import rules);
the top level keeps only what every domain shares: :mod:`~evaluator_host.errors`,
:mod:`~evaluator_host.settings`, :mod:`~evaluator_host.storage` (a full disk, wherever it shows)
and :mod:`~evaluator_host.services` (the assembly of one service process).
"""

__version__ = "0.1.0"
