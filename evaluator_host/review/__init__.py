"""Review (issue 53): people check the evaluator, and their verdicts become its tests.

Owns: review queues (filled from an online rule's scores — at creation and as scores arrive, through the
store's hook in ``ScoreQueue.finish`` — or from a job's results), their items (the evaluator's answer beside
the trace or the job row), verdicts (one current per item, history kept) and their exports, agreement per
revision (a revision that never scored the items runs on them through the evaluation use cases, result cache
included), and verdicts turned into an evaluator's fixtures (a new revision; the save's fixture gate does
the rest). Models in ``models.py``.

May import: ``evaluation`` (stored evaluators, the use cases, fixtures), ``jobs`` (a job's rows and their
cases), ``online`` (a trace and its case), ``store``, ``tenancy``, ``errors``, ``shared``; never the surfaces
(``api``, ``cli``), ``services``, ``migration`` or ``testing`` (``tests/unit/test_layers.py``). Nothing below
imports it: the scorer's hook is the store's (``store/review/fill.py``).
"""
