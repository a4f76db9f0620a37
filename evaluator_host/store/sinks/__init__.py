"""A score's (or a job row's) deliveries to the sinks of its rule or job (issue 52).

``deliveries`` ``online_sink_deliveries``: enqueue, claim, finish; ``records`` what one delivery is and its
idempotency key; ``requeue`` ended deliveries sent again.

A table family beside its peers (see :mod:`evaluator_host.store.online`): may import them, never what is above
``store``.
"""
