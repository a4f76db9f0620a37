"""Secret values out of everything a worker sends back (see :mod:`evaluator_host.tenancy.vault`)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["Redactor"]


class Redactor:
    """Replaces secret values by ``[secret NAME]`` in text and JSON-like values."""

    def __init__(self, values: dict[str, str]) -> None:
        forms: dict[str, str] = {}
        for name, value in values.items():
            forms[value] = f"[secret {name}]"
            escaped = json.dumps(value)[1:-1]  # what a JSON dump of it shows
            forms.setdefault(escaped, f"[secret {name}]")
        self._forms = sorted(forms.items(), key=lambda item: -len(item[0]))  # longest first

    def __bool__(self) -> bool:
        return bool(self._forms)

    def text(self, text: str) -> str:
        """``text`` with every secret value replaced."""
        for value, mark in self._forms:
            if value in text:
                text = text.replace(value, mark)
        return text

    def value(self, value: Any) -> Any:
        """A JSON-like value with every string (keys too) redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value
