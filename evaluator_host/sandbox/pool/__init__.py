"""The one worker pool every backend serves.

Owns: binding warm workers by their load frame (``workers.py``: ``WorkerPool``), who gets a worker when
(``leasing.py``, ``holdings.py``), admission per evaluator (``admission.py``) and against the memory budget
(``memory.py``), unbound spares (``spares.py``), coalescing single-case calls (``coalesce.py``), what the
pool learned of each key (``key_stats.py``), one batch on one worker (``batches.py``) and what the pool
makes of its replies (``replies.py``).

May import: the sandbox contract (``sandbox.base``, ``sandbox.protocol``), ``errors``, ``settings`` and
``observability``. Never a backend (``process/``, ``docker/``) nor ``egress/``: backends are handed in.
"""
