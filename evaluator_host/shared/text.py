"""``StoredText``: a string the API stores as text, refused alike on every database when it holds
a NUL character (PostgreSQL cannot store one; SQLite would, so both answer 422).

Here, not in ``store/``, because the models of every domain (and the Python client's through them) use it:
importing ``store.text`` imported the whole store and SQLAlchemy with it."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

__all__ = ["StoredText", "storable"]


def storable(text: str) -> str:
    """``text`` when a database keeps it as text: no NUL character (``ValueError`` otherwise)."""
    if "\x00" in text:
        raise ValueError("must not contain NUL characters (U+0000); in code, write the escape \\u0000 instead")
    return text


StoredText = Annotated[str, AfterValidator(storable)]
