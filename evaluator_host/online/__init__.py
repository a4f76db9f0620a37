"""Online evaluation (docs/online.md): live traces in, scores out.

Rooms, in the order a span travels and from the bottom up (each may import only the rooms before it and the API's
shapes, ``models.py`` and the ``*models.py`` beside it: ``tests/unit/test_rooms.py``):

* ``reading`` — what a span says: its stored body, its ``inputs``/``outputs`` in every convention (pure);
* ``receive`` — the OTLP receivers, bounded decoding, forwarding to the team's own backend;
* ``levels`` — a rule's targets: ready traces (assembly), stored traces and sessions read back, a target's case;
* ``deciding`` — routing, the decision per (rule, target), a rule's budgets and its judges' calls;
* ``candidates`` — a rule tried before it is live: the trial and shadow revisions;
* ``scoring`` — the scorer, a round's cases, scores exported as spans and log records;
* ``backfill`` — history scored on demand.

At the top: ``components`` (``OnlineScoring``, one service's router, scorer and backfiller, started together) and
``models`` (the API's shapes). The parts meet only in the tables of :mod:`evaluator_host.store.online`, so several
services on one database share the work. May import the evaluation path, ``store``, ``sinks`` (a score's
delivery), ``tenancy`` and below; never ``api``, ``cli``, ``services``, ``jobs`` or ``migration``
(``tests/unit/test_layers.py``).
"""
