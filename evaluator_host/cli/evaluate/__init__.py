"""The commands that evaluate here or hand one evaluation to a service: ``run``, ``run --data``, ``test``,
``migrate``, ``demo-traffic``.

``run`` (``run``), a batch job from the terminal (``batch``, sent where ``targets`` says), an LLM judge's options
(``judge``), an evaluator's fixtures for CI (``fixtures``, ``fixture_runs``), legacy evaluators rewritten
(``migrate``), instrumented chat traffic (``demo``).

May import the shared pieces of ``cli`` (``inputs``, ``output``, ``remote``, ``lazy``); never another command room
(``tests/unit/test_rooms.py``).
"""
