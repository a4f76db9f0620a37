"""The Python harness, by concept (standard library only; imported by ``../harness.py`` from this folder).

* :mod:`.channel`: the framed channel to the host (requests in, replies out, held and bulk replies,
  the raw-output sync marks);
* :mod:`.values`: a returned value made JSON-safe (the wire markers);
* :mod:`.loader`: the evaluator's code: bound from a ``load`` frame, imported (or compiled under the
  ``restricted`` policy), its errors as the user's own lines;
* :mod:`.metric`: the ``metric`` interface: a NeMo ``Metric`` class instantiated once, its
  ``compute_scores`` called per case, its result checked against ``output_spec()`` (the built-in
  ``nemo_evaluator_sdk`` is ``../protocols``);
* :mod:`.memory`: the worker's own address-space limit (a big allocation raises ``MemoryError``, the
  worker stays) and whether a worker that hit it must retire;
* :mod:`.cases`: one case: its arguments per interface, captured output, soft timeout, its reply;
* :mod:`.rows`: the row → case rule of job rows (shared with the host: ``evaluator_host/jobs/datasets/mapping.py``);
* :mod:`.egress`: the in-sandbox forwarder to the host's egress proxy;
* :mod:`.inflight`: the rows of an async evaluator, many awaiting at once (a run's ``in_flight``);
* :mod:`.serve`: the harness itself: the main loop over ``run`` frames.

The protocol is ``runtimes/PROTOCOL.md``.
"""
