"""The online tables and their repositories (migration ``0006`` and later): spans, traces, rules, scores.

``rows`` declares the tables (the contract between online evaluation's parts, docs/online.md); each other module is
one repository over a part of them: ``spans`` (the receive side, with ``span_inserts``), ``readiness``, ``routing``,
``refs``, ``scores`` (the durable queue), ``sessions``, ``rules``, ``decisions``, ``budgets``, ``calls``, ``usage``,
``views`` (the API's reads), ``backfills`` with ``backfill_pages``, ``backfill_sessions``, ``backfill_failures`` and
``case_hashes``, ``shadow``.

Store rooms are table families, not layers: a transaction may span families (storing a score fills review queues,
``review.fill``; usage counts jobs' bytes, ``jobs.results``), so rooms of ``store`` may import each other. What none
may import is above ``store`` (``tests/unit/test_layers.py``).
"""
