"""What a span says: its stored body and its ``inputs``/``outputs`` in every convention.

Owns the one encoder and decoder of a stored span's ``body`` (``spans``), the readers of Agenta's ``ag.data``, the
OpenTelemetry GenAI semantic conventions and OpenInference (``conventions``), and a span's and a trace's
``inputs``/``outputs`` with a rule's mapping paths (``mapping``). Pure: no I/O, no store.

The lowest room of ``online``: imports no other room (``tests/unit/test_rooms.py``).
"""
