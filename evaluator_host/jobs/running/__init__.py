"""A job run in this service: ``runner`` (``JobRunner``: create, read, wait, cancel, delete, resume), ``lanes``
(a job's rows over ``parallelism`` lanes), ``executor`` (the one chunk executor, also the worker hosts'),
``progress`` (a running job in memory, chunk sizes), ``targeted`` (model-target jobs), ``cached`` (rows answered
from the result cache) and ``rows`` (a row's stored result written without a model: the write side).

May import: ``jobs.datasets``, ``jobs.models``, ``jobs.stored_form`` and the layers below jobs; never
``jobs.results`` (the write side never imports the read side) nor ``jobs.queue`` (``tests/unit/test_layers.py``).
"""
