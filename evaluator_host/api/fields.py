"""Unknown fields in a request body: what the 422 says about them (docs/api.md, "Unknown fields").

Every JSON body model the API takes forbids fields it does not know, at the top level and in every
nested object (``settings``, ``field_mapping``, ``cases[i]``, a rule's ``filter`` …): a misspelled
field would otherwise be dropped and the request run without it (``"output"`` for ``"outputs"``
scores ``None`` and answers ``ok``). The framework reports such a field as ``extra_forbidden``; the
error handler (:mod:`evaluator_host.api.errors`) asks :func:`unknown_field` for the fields accepted
at that place and the closest one (difflib), so the answer reads
``output: unknown field; did you mean 'outputs'? Accepted here: inputs, outputs, …``.

:func:`body_model` finds a route's body model (the model pydantic validated the body with); the
fast path (:mod:`evaluator_host.api.middleware.fastpath`) leaves a body that does not validate to
the app, so its answer is this same 422. :func:`unknown_field`, :func:`accepted_fields` and
:func:`strict_models` live in :mod:`evaluator_host.shared.fields` (pure pydantic: the command line's
fixture-file check uses them without importing the app) and are re-exported here.
"""

from __future__ import annotations

from pydantic import BaseModel

from evaluator_host.shared.fields import accepted_fields, models_in, strict_models, unknown_field

__all__ = ["accepted_fields", "body_model", "strict_models", "unknown_field"]


def body_model(route: object) -> type[BaseModel] | None:
    """The pydantic model of ``route``'s JSON body, or None (no body, or not one model)."""
    field = getattr(route, "body_field", None)
    info = getattr(field, "field_info", None)
    annotation = getattr(info, "annotation", None)
    models = models_in(annotation)
    return models[0] if len(models) == 1 else None
