"""evaluator-host: sandboxed, polyglot code execution for LLM evaluators.

The package's folders are its domains (docs/architecture.md draws the tree and its import rules);
the top level keeps only what every domain shares: :mod:`~evaluator_host.errors`,
:mod:`~evaluator_host.settings`, :mod:`~evaluator_host.storage` (a full disk, wherever it shows)
and :mod:`~evaluator_host.services` (the assembly of one service process).

``__version__`` is the distribution's semantic version (MAJOR.MINOR.PATCH; a MAJOR bump is a breaking
change to the HTTP API, the CLI or the evaluator interfaces); ``API_VERSION`` the HTTP API's version, the
``/vN`` of its paths. Both appear in ``/healthz`` and the OpenAPI document; ``evaluator-host --version``
prints them.
"""

__version__ = "0.2.0"  # the one place the version lives (pyproject.toml reads it); CHANGELOG.md says what changed
API_VERSION = "1"  # the HTTP API's major version: the ``/v1`` prefix; bumped only by a breaking change to it
