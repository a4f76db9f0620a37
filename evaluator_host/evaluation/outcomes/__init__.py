"""What an evaluation's results are, once normalized: the pure core every surface and store shares.

Owns the normalization table of docs/api.md (``normalize``), the result's models (``result_models``: ``Case``,
``Status``, ``ErrorInfo``, ``EvaluationResult``), aggregates over results (``aggregate``, ``aggregate_models``) and
what failed rows have in common (``error_summary``). No I/O.

Imports nothing else of ``evaluation`` (``tests/unit/test_rooms.py``): the path, the cache and the stored
evaluators build on it, and ``store`` may import it.
"""
