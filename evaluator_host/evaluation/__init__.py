"""The evaluation path: a definition → ``Prepared`` → ``Bound`` (a runtime and a worker key) → normalized results.

Stored evaluators and their immutable revisions (:mod:`.evaluators`), the path itself (:mod:`.path`),
inspection before a run (:mod:`.inspection`), normalization (:mod:`.normalize`) and aggregation
(:mod:`.aggregate`) of results, and the API models of these resources (:mod:`.models`).
"""
