"""The evaluation path: a definition → ``Prepared`` → ``Bound`` (a runtime and a worker key) → normalized results.

The use cases every surface calls (:mod:`.usecases`: an inline call, a call by id, the run steps
migration's differential run takes), the limits of a definition and a call (:mod:`.limits`), the
path itself (:mod:`.path`: validate and bind) with its concepts (:mod:`.prepared`, :mod:`.bound`,
:mod:`.results`), stored evaluators and their immutable revisions (:mod:`.evaluators`), inspection
before a run (:mod:`.inspection`), normalization (:mod:`.normalize`) and aggregation
(:mod:`.aggregate`) of results, and the API models of these resources (:mod:`.models`).
"""
