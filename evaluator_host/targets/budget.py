"""A model-target job's budgets and its cost estimate.

Contract:

* :class:`Budget` counts a job's model calls and tokens (restored from its stored generations when it
  resumes). :meth:`Budget.take_call` is asked before every call (retries included): past ``max_calls``,
  or once the tokens reached ``max_tokens_total``, it raises :class:`BudgetExhausted` and no call is
  sent. Calls are counted when sent, so ``max_calls`` is never passed; tokens are known only when a call
  answers, so the calls in flight when ``max_tokens_total`` is reached may pass it by their own tokens
  (at most ``concurrency`` calls' worth).
* :class:`Prices` reads the operator's prices (``EVALUATOR_HOST_TARGET_PRICES``: ``{model:
  {"input_per_1k": …, "output_per_1k": …}}``) and estimates a call's or a job's cost; None for a model
  without a price.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Budget", "BudgetExhausted", "Prices"]


class BudgetExhausted(Exception):
    """A job's ``max_calls`` or ``max_tokens_total`` is reached: no further call is sent."""


@dataclass
class Budget:
    """The job's caps (None: none) and what it has used (see the module's contract)."""

    max_calls: int | None
    max_tokens_total: int | None
    calls: int = 0
    tokens: int = 0
    exhausted: str | None = None  # why, once reached

    def take_call(self) -> None:
        """Count one call about to be sent, or :class:`BudgetExhausted` (and send nothing)."""
        if self.exhausted is None:
            if self.max_calls is not None and self.calls >= self.max_calls:
                self.exhausted = f"max_calls={self.max_calls} reached"
            elif self.max_tokens_total is not None and self.tokens >= self.max_tokens_total:
                self.exhausted = f"max_tokens_total={self.max_tokens_total} reached ({self.tokens} tokens used)"
        if self.exhausted is not None:
            raise BudgetExhausted(self.exhausted)
        self.calls += 1

    def add_tokens(self, tokens: int) -> None:
        self.tokens += tokens


class Prices:
    """Per-model prices per 1,000 tokens, as the operator set them."""

    def __init__(self, table: Mapping[str, Mapping[str, float]]) -> None:
        self.table = {
            model: (float(p.get("input_per_1k", 0.0)), float(p.get("output_per_1k", 0.0))) for model, p in table.items()
        }

    def known(self, model: str) -> bool:
        return model in self.table

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The estimate for these tokens of ``model``; None without a price for it."""
        price = self.table.get(model)
        if price is None:
            return None
        return round((prompt_tokens * price[0] + completion_tokens * price[1]) / 1000.0, 8)
