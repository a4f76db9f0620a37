"""A job's results after the run: ``exports`` (``ResultReader``: JSON pages, NDJSON, CSV, in input order, in
bounded memory), ``replay`` (a stored row run again and compared) and ``retention`` (finished jobs past
``RESULTS_RETENTION_DAYS`` swept).

May import: ``jobs.running`` (the runner), ``jobs.datasets``, ``jobs.models``, ``jobs.stored_form`` and the
layers below jobs; never ``jobs.queue`` (``tests/unit/test_layers.py``).
"""
