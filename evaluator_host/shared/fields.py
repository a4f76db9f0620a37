"""Unknown fields of a pydantic model's input: the names accepted where one was not, and the closest one.

:func:`unknown_field` turns pydantic's ``extra_forbidden`` error into the sentence the API's 422 and the
CLI's fixture-file check print (``output: unknown field; did you mean 'outputs'? Accepted here: …``);
:func:`strict_models` lists a model and every model nested in it with whether it forbids extra fields.
Pure pydantic, nothing of the package: the API (:mod:`evaluator_host.api.fields`) and the command line
(``cli/evaluate/fixtures.py``, which must not import the app) use it alike.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel

__all__ = ["accepted_fields", "models_in", "strict_models", "unknown_field"]


def accepted_fields(model: type[BaseModel]) -> list[str]:
    """The names a body of ``model`` may use (aliases where set), in declaration order."""
    return [info.alias or name for name, info in model.model_fields.items()]


def unknown_field(model: type[BaseModel], loc: list[Any]) -> dict[str, Any]:
    """For an ``extra_forbidden`` error at ``loc`` (``["body", …, name]``) of a body of ``model``:
    ``msg`` (the sentence), ``field``, ``accepted`` (the names allowed in that object) and
    ``did_you_mean`` (the closest accepted name, or null). Empty when ``loc`` cannot be followed."""
    path = loc[1:] if loc and loc[0] == "body" else loc
    if not path or not isinstance(path[-1], str):
        return {}
    owner = _follow(model, path[:-1])
    if owner is None:
        return {}
    name = path[-1]
    accepted = accepted_fields(owner)
    close = difflib.get_close_matches(name, accepted, n=1, cutoff=0.6)
    if not close:  # case or separators only: "Outputs", "app-params"
        folded = {a.lower().replace("_", ""): a for a in accepted}
        hit = folded.get(name.lower().replace("_", "").replace("-", ""))
        close = [hit] if hit else []
    guess = close[0] if close else None
    sentence = "unknown field" + (f"; did you mean '{guess}'?" if guess else ";")
    return {
        "msg": f"{sentence} Accepted here: {', '.join(accepted)}",
        "field": name,
        "accepted": accepted,
        "did_you_mean": guess,
    }


def strict_models(model: type[BaseModel]) -> dict[str, bool]:
    """``{qualified name: forbids extra fields}`` for ``model`` and every model nested in its fields
    (the test of "every body is strict" walks this)."""
    seen: dict[str, bool] = {}
    todo = [model]
    while todo:
        current = todo.pop()
        key = f"{current.__module__}.{current.__qualname__}"
        if key in seen:
            continue
        seen[key] = current.model_config.get("extra") == "forbid"
        for info in current.model_fields.values():
            todo.extend(models_in(info.annotation))
    return seen


def _follow(model: type[BaseModel], path: list[Any]) -> type[BaseModel] | None:
    """The model of the object at ``path`` inside ``model`` (list indexes and pydantic's union tags
    skipped), or None."""
    candidates = [model]
    for part in path:
        if isinstance(part, int):
            continue
        tagged = [m for m in candidates if m.__name__ == part]
        if tagged:
            candidates = tagged
            continue
        nested: list[type[BaseModel]] = []
        for m in candidates:
            info = m.model_fields.get(part) or next((f for f in m.model_fields.values() if f.alias == part), None)
            if info is not None:
                nested.extend(models_in(info.annotation))
        if not nested:
            return None
        candidates = nested
    return candidates[0] if candidates else None


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation may hold (``X | None``, ``list[X]``, ``Annotated[X, …]`` …)."""
    if isinstance(annotation, type) and not isinstance(annotation, types.GenericAlias):
        return [annotation] if issubclass(annotation, BaseModel) else []
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        for found in models_in(arg):
            if found not in out:
                out.append(found)
    return out
