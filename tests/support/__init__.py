"""What the tests share, as plain importable modules: no fixtures, no tests.

Test modules import their helpers from here and nowhere else in ``tests/``: never from a
``conftest.py`` (pytest loads those itself; they hold only fixtures and hooks, built on these
helpers) and never from another test module (``tests/unit/test_test_layout.py`` proves both).

- ``service``: settings, a started service's calls (``evaluate``, ``assert_healthy``), the real
  ``serve`` process (``serving``), a free loopback port;
- ``zygote``: ``python -m evaluator_host.cli`` commands (``serve`` and the CLI's) forked from a process that
  imported the package once, as ``subprocess.run``/``Popen`` would start them (``zygote.run``, ``zygote.popen``);
- ``backends``: the backend and database parametrizations and their skip marks, the managed containers;
- ``client``: the client tests' service (keys on, a workspace and its key: ``live_service``);
- ``wait``: ``wait_until``, the one polling helper; ``aio``: the one way to run an async test;
- servers on loopback: ``pg`` (PostgreSQL), ``redis_server``, ``otlp`` (a trace receiver),
  ``package_index`` (a PyPI simple index), ``npm_registry``, ``tls`` (a throwaway certificate);
- per area: ``pool`` (the warm pool on the fake backend), ``runner`` (the job runner's wiring on the
  fake backend), ``store`` (job store records), ``queue`` (a grid of service, broker and worker hosts),
  ``faults`` (a small disk, a tiny wheel, a service's workers), ``hostile`` (the hostile table),
  ``rlimits`` (the rlimits-only mode's settings), ``migrate_fixtures``, ``web`` (the playground's editors),
  ``installed`` (the built wheel in a fresh venv outside the checkout, its own ``serve``, plain HTTP calls),
  ``source`` (the package's modules parsed once for the architecture tests);
- the runner's own: ``precompile`` (the bytecode ``make test`` writes first), ``cpu``, ``schedule``, ``timings``.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
