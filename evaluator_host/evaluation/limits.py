"""The limits of a definition and of a call, each checked here and nowhere else.

* the code's size, ``MAX_CODE_BYTES``: :func:`code_size_error` (what inspection reports) and
  :func:`check_code_size` (what validation and the codemod raise), one message;
* the cases of one call, ``MAX_CASES``: :func:`check_case_count` (an inline call, a call by id,
  a differential run of inline rows, the CLI's ``--cases``).

Both are ``LimitError`` (HTTP 422). ``tests/unit/test_use_cases.py`` proves no other module
compares a value with these settings.
"""

from __future__ import annotations

from evaluator_host.errors import LimitError
from evaluator_host.settings import Settings

__all__ = ["check_case_count", "check_code_size", "code_size_error"]


def code_size_error(code: str, settings: Settings) -> LimitError | None:
    """The ``LimitError`` of ``code`` over ``max_code_bytes`` (UTF-8 bytes), or None when it fits."""
    size = len(code.encode())
    if size > settings.max_code_bytes:
        return LimitError(
            f"the code is {size} bytes; the limit is {settings.max_code_bytes} (EVALUATOR_HOST_MAX_CODE_BYTES)"
        )
    return None


def check_code_size(code: str, settings: Settings) -> None:
    """Raise :func:`code_size_error`'s error when ``code`` is over the limit."""
    error = code_size_error(code, settings)
    if error is not None:
        raise error


def check_case_count(count: int, settings: Settings) -> None:
    """``LimitError`` when one call carries more than ``max_cases`` cases."""
    if count > settings.max_cases:
        raise LimitError(f"{count} cases; at most {settings.max_cases} per call (use a job for more)")
