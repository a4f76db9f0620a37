"""Spans in: the OTLP receivers and what leaves with the spans.

Owns the OTLP/HTTP body's decoding (``otlp``: protobuf and OTLP/JSON into ``SpanData``, each span checked against the
``ONLINE_MAX_*`` bounds), its cheap look before a whole parse (``outline``) and bounded inflating (``inflate``), the
receiver's use case (``ingest``: one write per request, the span store's 503 bound) and the forwarding of every
received request to the workspace's own OTLP backends (``forwarding``). gRPC is the API's (``api/otlp_grpc``).

May import ``reading`` (a stored span's body) and the shapes (``models``); no other room of ``online``
(``tests/unit/test_rooms.py``).
"""
