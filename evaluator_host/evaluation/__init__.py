"""The evaluation path: a definition → ``Prepared`` → ``Bound`` (a runtime and a worker key) → normalized results.

At the top, the path and its use cases: the use cases every surface calls (:mod:`.usecases`: an inline call, a call
by id, the run steps migration's differential run takes), the limits of a definition and a call (:mod:`.limits`),
the path itself (:mod:`.path`: validate and bind) with its concepts (:mod:`.prepared`, :mod:`.bound`,
:mod:`.results`), stored evaluators and their immutable revisions (:mod:`.evaluators`, :mod:`.fixtures`),
inspection before a run (:mod:`.inspection`), two versions compared (:mod:`.compare`) and the API models
(:mod:`.models`). Two rooms below it (``tests/unit/test_rooms.py``): ``outcomes/`` (normalization, the result's
models, aggregates, error summaries: pure, importing nothing else of ``evaluation``) and ``caching/`` (the result
cache's key and decisions, below ``evaluators`` and ``usecases``).
"""
