"""The rows a job reads: dataset files (``files``: streaming parsers into ``.jsonl`` + block index, rows read
back), uploads (``uploads``: ``DatasetCatalog``), the field mapping of a row to a case (``mapping``) and a
comparison's sample rows (``samples``).

May import: ``jobs.models``, the layers below jobs (evaluation, store, definitions, errors, settings, storage);
never ``jobs.running``, ``jobs.results`` or ``jobs.queue`` (``tests/unit/test_layers.py``).
"""
