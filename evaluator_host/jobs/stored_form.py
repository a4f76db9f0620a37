"""A row's result as a job stores it: the shared fields left out, a bare row short, a long one cut.

Both sides of a job's results use it: the writers (``jobs/running/rows.py``, the executor's commits) make the
stored form, the reader (``jobs/results/exports.py``) puts the full form back. It imports neither of them, so
the write side never imports the read side.
"""

from __future__ import annotations

from evaluator_host.evaluation.models import EvaluationResult

__all__ = ["BARE_DURATION", "BARE_KEYS", "SHARED_FIELDS", "full_form", "is_bare", "stored_form"]


# What every row of a job shares: stored once (on the job and its revision), spliced back in when read.
SHARED_FIELDS = frozenset({"interface", "runtime", "evaluator_id", "revision", "cached"})
# ``cached`` is not shared but never written by stored_form: a row answered from the result cache is its
# cached text with CACHED_MARK appended (evaluation/caching/cache.py), read back as any other key.

# A bare row (ok, and nothing but a score, its verdict and a duration: most rows of most jobs) is stored
# short, without the fields it has at their defaults: {"status":"ok","score":S,"passed":P,"duration_ms":D}.
# (A third of the bytes: the database, its write-ahead log and the kernel's writeback do a third of the work.)
BARE_KEYS = frozenset({"status", "score", "passed", "duration_ms"})
BARE_DURATION = ',"duration_ms":'
# What a bare row leaves out, as the full form writes it: before its duration, and after it.
_FULL_MIDDLE = (
    ',"outputs":{},"details":{},"reason":null,"label":null,"error":null,"warnings":[],'
    '"stdout":"","stderr":"","truncated":false,"duration_ms":'
)
_FULL_END = ',"capabilities":null}'


def is_bare(result: EvaluationResult) -> bool:
    """Whether ``result`` is stored short (see :data:`BARE_KEYS`)."""
    return (
        result.status == "ok"
        and not (result.outputs or result.details or result.warnings or result.stdout or result.stderr)
        and not result.truncated
        and result.reason is None
        and result.label is None
        and result.error is None
        and result.capabilities is None
    )


def full_form(stored: str) -> str:
    """``stored`` (a row's stored JSON) with every field: a bare row's left-out fields put back at their
    defaults, in the model's order; any other row as it is. (Every full form names ``outputs``; a bare
    row holds no string at all, so it never does.)"""
    if '"outputs":' in stored:
        return stored
    cut = stored.rindex(BARE_DURATION)
    return stored[:cut] + _FULL_MIDDLE + stored[cut + len(BARE_DURATION) : -1] + _FULL_END


def stored_form(result: EvaluationResult, max_bytes: int | None = None) -> str:
    """A row's result as stored: the JSON of what is not shared with its job (see :data:`SHARED_FIELDS`),
    short for a bare row (see :data:`BARE_KEYS`).

    With ``max_bytes``, a longer one is cut to fit: stdout and stderr first (``truncated`` set),
    then ``details`` and the error's traceback; a warning says so.
    """
    if is_bare(result):
        return result.model_dump_json(include=set(BARE_KEYS))
    exclude = set(SHARED_FIELDS)
    text = result.model_dump_json(exclude=exclude)
    if max_bytes is None or len(text) <= max_bytes // 4 or len(text.encode()) <= max_bytes:
        return text
    note = f"this stored result was cut to max_stored_result_bytes={max_bytes}"
    warnings = [w[:1024] for w in result.warnings[:16]] + [note]
    bare = result.model_copy(update={"stdout": "", "stderr": "", "truncated": True, "warnings": warnings})
    room = max_bytes - len(bare.model_dump_json(exclude=exclude).encode()) - 64
    # characters of stdout and stderr: a short one leaves its share to the other; halved again while
    # multi-byte or escaped text overflows
    err_keep = min(len(result.stderr), room // 2)
    out_keep = min(len(result.stdout), room - err_keep)
    err_keep = min(len(result.stderr), room - out_keep)
    while out_keep > 0 or err_keep > 0:
        cut = bare.model_copy(update={"stdout": result.stdout[:out_keep], "stderr": result.stderr[:err_keep]})
        text = cut.model_dump_json(exclude=exclude)
        if len(text.encode()) <= max_bytes:
            return text
        out_keep, err_keep = out_keep // 2, err_keep // 2
    error = (
        bare.error.model_copy(update={"message": bare.error.message[:1024], "traceback": ""}) if bare.error else None
    )
    cut = bare.model_copy(update={"details": {"truncated": True}, "error": error})
    return cut.model_dump_json(exclude=exclude)
