"""Examples of the shadow-revision schemas (``/v1/online-rules/{id}/shadow`` and ``/promote``; issue 53) for the
OpenAPI document: merged into :data:`evaluator_host.api.examples.EXAMPLES`, checked by ``tests/api/test_openapi.py``."""

from __future__ import annotations

from typing import Any

from evaluator_host.api.examples_online import ONLINE

__all__ = ["SHADOW"]

_WHEN = "2026-11-25T12:00:00Z"
_T = "4bf92f3577b34da6a3ce929d0e0e4736"
_RULE = ONLINE["Rule"][0]
_LIVE = {"revision": 3, "status": "ok", "score": 0.9, "passed": True, "label": "right"}
_CANDIDATE = {"revision": 4, "status": "ok", "score": 0.2, "passed": False, "label": "wrong"}
_EXAMPLE = {
    "target_id": _T, "trace_id": _T, "span_id": None, "session_id": None, "flip": "pass_to_fail", "delta": -0.7,
    "live": _LIVE, "candidate": _CANDIDATE, "scored_at": _WHEN,
}  # fmt: skip
_FLIPS = {"pass_to_fail": 7, "fail_to_pass": 2}
_SIDE = {
    "revision": 3, "reviewed": 40, "accuracy": 0.775, "cohen_kappa": 0.52, "cohen_kappa_reason": None,
    "confusion": {"tp": 22, "fp": 6, "fn": 3, "tn": 9}, "evaluator_unanswered": 0, "score_mae": 0.18, "scored": 40,
    "spearman": 0.66, "spearman_reason": None, "by_label": {"right": {"reviewed": 28, "accuracy": 0.79,
    "label_agreement": None}},
}  # fmt: skip
_AGREEMENTS = {
    "live": _SIDE,
    "candidate": {**_SIDE, "revision": 4, "accuracy": 0.875, "cohen_kappa": 0.73, "by_label": {}},
}
_COMPARISON = {
    "rule_id": _RULE["id"], "live_revision": 3, "candidate_revision": 4, "pending_candidate": True, "compared": 500,
    "flips": _FLIPS, "same_passed": 488, "mean_delta": -0.031, "scored": 500,
    "errors": {"live": 1, "candidate": 2}, "examples": [_EXAMPLE], "agreement_with_reviews": _AGREEMENTS,
    "agreement_reason": None, "message": None,
}  # fmt: skip

SHADOW: dict[str, list[Any]] = {
    "ShadowFlips": [_FLIPS],
    "ShadowAnswer": [_LIVE, _CANDIDATE],
    "ShadowExample": [_EXAMPLE],
    "ShadowAgreement": [_SIDE],
    "ShadowAgreements": [_AGREEMENTS],
    "ShadowComparison": [
        _COMPARISON,
        {
            **_COMPARISON,
            "compared": 0,
            "flips": {"pass_to_fail": 0, "fail_to_pass": 0},
            "same_passed": 0,
            "mean_delta": None,
            "scored": 0,
            "errors": {"live": 0, "candidate": 0},
            "examples": [],
            "agreement_with_reviews": None,
            "agreement_reason": "no review verdicts on this rule's items (a review queue on the rule, then verdicts)",
            "message": "no target was scored by both the live revision and revision 4 yet: the candidate scores "
            "each target the rule scores from when it is set",
        },
    ],  # fmt: skip
    "Promotion": [
        {
            "rule_id": _RULE["id"],
            "previous_revision": 3,
            "revision": 4,
            "rule": {**_RULE, "revision": 4, "candidate_revision": None},
        }
    ],  # fmt: skip
}
