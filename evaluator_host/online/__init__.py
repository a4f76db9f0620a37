"""Online evaluation: the OTLP receiver, trace assembly, rules and the scoring queue (docs/online.md).

The parts meet only in the tables of :mod:`evaluator_host.store.online_rows`: the receiver writes
spans and traces, assembly marks a trace ready, the router turns a ready trace into one queued score
per matching rule, scorers claim and fill them.
"""
