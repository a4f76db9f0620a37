"""Bounds of the integers a request may carry: every one is stored or compared in SQL, whose integers are
signed 64-bit (SQLite's and PostgreSQL's ``bigint``); a larger one raised deep in the driver (a 500) instead
of naming the field (a 422).

:data:`Int64` is ``int`` within that range, for a field without bounds of its own; a field with its own
``ge`` adds ``le=INT64_MAX`` instead (a ``Field(ge=…)`` and ``Int64``'s lower bound on one field: the
annotation's wins, so the two are not mixed). ``tests/api/test_fuzz.py`` walks the OpenAPI schema: every
integer of every request body and parameter has both bounds within this range, and a value past them is
answered 4xx on every route.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

__all__ = ["INT64_MAX", "INT64_MIN", "Int64"]

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
