"""Jobs spread over worker hosts with Celery on Redis (on when ``EVALUATOR_HOST_QUEUE_URL`` is set).

``broker``   the Celery app, its settings, the task's name and the Redis keys both sides use;
``chunks``   a chunk task's payload (dataset lines spliced into one JSON text);
``dispatch`` the service's side: a job's rows sent as chunk tasks, a window at a time;
``host``     a worker host's side: chunks run on its warm pool and committed to the shared database.

May import: ``jobs.running`` (the one chunk executor, the stored rows, the cache's rows), ``jobs.datasets``,
``jobs.models`` and the layers below jobs; never ``jobs.results`` (``tests/unit/test_layers.py``).
"""
