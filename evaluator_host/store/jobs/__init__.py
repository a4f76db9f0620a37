"""Datasets and jobs: their rows, results, generations, leases and deliveries.

``repository`` datasets' metadata and jobs (``JobStore``); ``results`` a job's row results (the fenced commits, the
storage quota's rule) with ``refusals`` (how a commit is refused, whichever way), ``records`` (the frozen records
handed out) and ``outcome`` (how a job whose rows are all stored ends); ``generations`` a model-target job's
generations; ``leases`` who holds a job (issue 54); ``row_stores`` the one interface of the place holding datasets'
rows for every service, with ``dataset_chunks`` (in the database on PostgreSQL) and ``dataset_objects`` (in a
bucket); ``sink_deliveries`` a job's rows to its sinks.

A table family beside its peers (see :mod:`evaluator_host.store.online`): may import them, never what is above
``store``.
"""
