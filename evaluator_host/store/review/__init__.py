"""Review queues (issue 53, migration ``0018_review_queues``): queues, items, verdicts.

``rows`` the tables; ``queues`` create/read/rename/delete; ``items`` items and verdicts with their history;
``fill`` which answers a queue takes and putting them in it (called in the transaction that stores scores).

A table family beside its peers (see :mod:`evaluator_host.store.online`): may import them, never what is above
``store``.
"""
