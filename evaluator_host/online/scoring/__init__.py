"""Scoring: queued rows claimed, each rule's evaluator run on its cases, results stored and exported.

Owns the scorer (``scorer``: claim, budgets, run per (workspace, evaluator, revision), store under the claim, retry
infrastructure failures, hand the group to the shadow), a round's cases (``round_cases``) and scores sent back to
the application's tracing backend as ``gen_ai.evaluation.result`` (``export``).

May import ``candidates``, ``deciding``, ``levels``, ``receive``, ``reading`` and the shapes; never ``backfill``
(``tests/unit/test_rooms.py``).
"""
