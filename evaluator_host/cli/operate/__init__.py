"""The operator's commands on this host: ``serve``, ``worker``, ``db``, ``images``, ``runtimes``.

One module per command group. May import the shared pieces of ``cli``; never another command room
(``tests/unit/test_rooms.py``).
"""
