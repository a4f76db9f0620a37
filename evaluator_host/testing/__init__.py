"""Support for tests of backends: the fake backend (a pure-Python stand-in that speaks the wire protocol).

Imported by tests only, never by product code (``tests/unit/test_layers.py`` says so).
"""
