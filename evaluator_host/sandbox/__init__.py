"""Where user code runs, in rooms a newcomer can name.

- the backends' contract, at this level: ``base.py`` (the ``SandboxBackend``, ``Worker`` and ``Builder``
  Protocols and the values crossing them), ``protocol.py`` (the frame protocol), ``fastjson.py``,
  ``inventory.py`` (what builders list, the one prune rule), and the host facilities both backends use:
  ``cgroups.py`` (a worker's memory cgroup) and ``strays.py`` (reaping a worker's stray processes);
- ``pool/``: the one worker pool every backend serves (leasing, admission, spares, batches, replies);
- ``egress/``: the egress proxy (addresses, TLS, header injection, hand-off, splice);
- ``process/`` and ``docker/``: one folder per backend.

Rooms import the contract, never each other's insides, except where a room's docstring says so
(``tests/unit/test_layers.py`` keeps it so).
"""
