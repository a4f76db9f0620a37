"""A rule's evaluator tried before it is live: the trial of a rule body and shadow revisions.

Owns try-before-live (``trial``: ``POST /v1/online-rules/test``, nothing stored) and shadow revisions — a rule's
candidate revision scoring the live revision's cases apart (``shadow``, called by the scorer), their comparison
(``shadow_report``) and their API shapes (``shadow_models``).

May import ``deciding``, ``levels``, ``reading`` and the shapes; never ``scoring`` or ``backfill``
(``tests/unit/test_rooms.py``): the scorer calls the shadow, not the other way round.
"""
