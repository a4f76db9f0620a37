"""The commands that speak to a running service's API with a key: ``workspaces``/``keys``, ``rules``, ``jobs``,
``review``, ``results replay``.

One module per command group (``admin``, ``rules``, ``jobs``, ``review``, ``results``), each through
:mod:`evaluator_host.cli.remote`. May import the shared pieces of ``cli``; never another command room
(``tests/unit/test_rooms.py``).
"""
