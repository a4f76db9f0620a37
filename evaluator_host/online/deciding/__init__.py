"""Which rules score a ready target, why one did not, and when a rule's claimed rows may run.

Owns routing (``router``: a rule's filter, sampling, the evaluated span; the loop that routes ready traces), the
decisions per (rule, target) ``GET /v1/traces/{id}`` shows (``decisions``, ``explain``, ``decision_models``), and
a rule's budgets and pace (``budgets``; ``model_calls``: its judges' calls from the egress proxy's own record).

May import ``levels``, ``receive``, ``reading`` and the shapes; never ``candidates``, ``scoring`` or ``backfill``
(``tests/unit/test_rooms.py``).
"""
