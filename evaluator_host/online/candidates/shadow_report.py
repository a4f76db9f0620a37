"""The comparison of a rule's candidate revision with its live one (``GET /v1/online-rules/{id}/shadow``, issue 53).

Contract:

* The revision compared: ``revision`` when asked, else the rule's candidate, else the candidate revision with
  the rule's newest shadow score (one just promoted); none of them: ``compared`` 0 and a ``message``.
* ``compared``, ``flips``, ``same_passed``, ``mean_delta``, ``scored``, ``errors`` and ``examples``: over every
  stored pair of that revision (:func:`~evaluator_host.store.online.shadow.compare`, in the database).
* ``agreement_with_reviews``: over the rule's reviewed items (one per target, its newest verdict:
  :func:`~evaluator_host.review.agreement.reviewed_once`) that the candidate also scored — the live side is the
  item's answer as it was reviewed, the candidate side its shadow score of the same target; both sides over
  the same targets, figured by :func:`~evaluator_host.review.metrics.agreement` (what
  ``GET /v1/evaluators/{id}/agreement`` uses). Nothing is run for it. No verdict on the rule's items, or none
  on a target the candidate scored: null, and ``agreement_reason`` says which.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy.engine import Engine

from evaluator_host.online.candidates.shadow_models import (
    ShadowAgreement,
    ShadowAgreements,
    ShadowComparison,
    ShadowExample,
    ShadowFlips,
)
from evaluator_host.review.agreement import figure_fields, reviewed_once
from evaluator_host.review.metrics import Pair, agreement
from evaluator_host.store.online import shadow as online_shadow
from evaluator_host.store.online.rules import RuleRecord
from evaluator_host.store.review.items import ItemRecord

__all__ = ["compare_rule", "which_revision"]


def which_revision(engine: Engine, rule: RuleRecord, asked: int | None) -> int | None:
    """The candidate revision to compare (see the module docstring)."""
    if asked is not None:
        return asked
    if rule.candidate_revision is not None:
        return rule.candidate_revision
    return online_shadow.latest_revision(engine, rule.id)


def compare_rule(
    engine: Engine, rule: RuleRecord, revision: int | None, reviewed: list[ItemRecord], examples: int
) -> ShadowComparison:
    """The comparison of ``revision`` (from :func:`which_revision`) as ``rule``'s candidate; ``reviewed``: the
    reviewed items of the rule's evaluator in its workspace (``ReviewItemStore.reviewed_of``)."""
    pending = revision is not None and revision == rule.candidate_revision
    if revision is None:
        return ShadowComparison(
            rule_id=rule.id, live_revision=rule.revision, candidate_revision=None, pending_candidate=False,
            compared=0, flips=ShadowFlips(pass_to_fail=0, fail_to_pass=0), same_passed=0, mean_delta=None,
            scored=0, errors={"live": 0, "candidate": 0}, examples=[], agreement_with_reviews=None,
            agreement_reason="no candidate revision to compare",
            message="the rule has no candidate revision and never had one: set candidate_revision "
            "(PATCH /v1/online-rules/{id}) and send traffic",
        )  # fmt: skip
    f = online_shadow.compare(engine, rule.id, revision, examples)
    agreements, reason = _agreements(engine, rule, revision, reviewed)
    message = None
    if not f.compared:
        message = (
            f"no target was scored by both the live revision and revision {revision} yet: the candidate scores "
            "each target the rule scores from when it is set"
        )
    return ShadowComparison(
        rule_id=rule.id,
        live_revision=rule.revision,
        candidate_revision=revision,
        pending_candidate=pending,
        compared=f.compared,
        flips=ShadowFlips(pass_to_fail=f.pass_to_fail, fail_to_pass=f.fail_to_pass),
        same_passed=f.same_passed,
        mean_delta=f.mean_delta,
        scored=f.scored,
        errors={"live": f.live_errors, "candidate": f.candidate_errors},
        examples=[ShadowExample.model_validate(e) for e in f.examples],
        agreement_with_reviews=agreements,
        agreement_reason=reason,
        message=message,
    )


def _agreements(
    engine: Engine, rule: RuleRecord, revision: int, reviewed: list[ItemRecord]
) -> tuple[ShadowAgreements | None, str | None]:
    items = reviewed_once([i for i in reviewed if i.rule_id == rule.id and i.verdict is not None])
    if not items:
        return None, "no review verdicts on this rule's items (a review queue on the rule, then verdicts)"
    shadow = online_shadow.answers(engine, rule.id, revision, [i.source_key for i in items])
    both = [i for i in items if i.source_key in shadow]
    if not both:
        return None, (
            f"{len(items)} reviewed item(s) of this rule, none of them scored by revision {revision} "
            "(the candidate scores targets from when it is set)"
        )
    live, cand = [], []
    for item in both:
        v, s = item.verdict, shadow[item.source_key]
        assert v is not None
        live.append(Pair(item.passed, item.score, item.label, v.passed, v.score, v.label))
        cand.append(Pair(s.passed, s.score, s.label, v.passed, v.score, v.label))
    revisions = Counter(i.revision for i in both)
    live_revision = revisions.most_common(1)[0][0]
    return ShadowAgreements(live=_side(live, live_revision), candidate=_side(cand, revision)), None


def _side(pairs: list[Pair], revision: int | None) -> ShadowAgreement:
    return ShadowAgreement(revision=revision, **figure_fields(agreement(pairs)))
