"""The result cache's decisions: a row answered from an earlier identical run instead of running again.

``cache`` the key, the decision (the setting, else the definition's determinism) and a job's cache (``JobCache``);
``cached_calls`` a stored evaluator's call answered from the cache where it can be (an online backfill's rows).
The entries themselves are ``store/result_cache.py``'s.

May import the evaluation path (``path``, ``prepared``, ``models``) and ``outcomes``; never ``evaluators`` or
``usecases``, which use it (``tests/unit/test_rooms.py``).
"""
