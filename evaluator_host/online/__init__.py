"""Online evaluation (docs/online.md): live traces in, scores out.

What it owns, in the order a span travels:

* **in** — the OTLP receivers (``otlp``, ``ingest``, ``spans``; gRPC beside HTTP), forwarding to the team's own
  backend (``forwarding``), trace assembly (``assembly``, ``traces``, ``inflate``, ``conventions``, ``mapping``);
* **levels** — a rule's target at span, trace or session level (``sessions``, ``cases``: the evaluator's
  ``inputs``/``outputs``/``trace`` for each target; ``outline``);
* **deciding** — the router turns a ready target into one queued score per matching rule (``router``), and a
  decision per (rule, target) says why it was or was not scored (``decisions``, ``decision_models``, ``explain``);
  budgets and the rule's pace (``budgets``);
* **scoring** — scorers claim and fill queued scores (``scorer``, ``scoring``), export them as spans and log
  records (``export``); history on demand (``backfill``, ``backfill_models``) and a rule tried before it is
  live (``trial``); the API models (``models``).

The parts meet only in the tables of :mod:`evaluator_host.store` (``online_rows`` and its repositories), so
several services on one database share the work. May import the evaluation path, ``store``, ``sinks`` (a
score's delivery), ``tenancy`` and below; never ``api``, ``cli``, ``services``, ``jobs`` or ``migration``
(``tests/unit/test_layers.py``).
"""
