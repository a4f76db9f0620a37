"""The targets a rule scores, at each level: a stored trace, a session, and the case built for one.

Owns the periodic pass that makes quiet traces ``ready`` and forgets old spans (``assembly``), a stored trace read
back as the dict evaluators get (``traces``), sessions — a conversation's traces grouped by a session id, its
messages, its case (``sessions``) — and the case of a (rule, target) with the batch load of the traces a round reads
(``cases``).

May import ``reading`` and ``receive`` (the open-traces gauge of the receiver) and the shapes; never ``deciding``,
``candidates``, ``scoring`` or ``backfill`` (``tests/unit/test_rooms.py``).
"""
