"""Agreement figures (review/metrics.py) against an independent computation written differently
(tests/support/agreement.py: kappa pairwise, not from the confusion counts; Spearman from ranks by counting),
on seeded sets with and without ties; the degenerate cases; and a queue's sample: the same items on every
fill, about the share asked."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from evaluator_host.review.metrics import Pair, agreement, ranks
from evaluator_host.store.review.fill import Candidate, takes
from tests.support.agreement import kappa_pairwise, spearman


def _seeded(seed: int, n: int, ties: bool) -> list[Pair]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        score = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]) if ties else rng.random()
        human_score = min(1.0, max(0.0, score + rng.gauss(0, 0.3)))
        human_score = round(human_score * 4) / 4 if ties else human_score
        label = rng.choice(["good", "bad", None])
        pairs.append(
            Pair(
                passed=rng.choice([score >= 0.5, None]) if rng.random() < 0.1 else score >= 0.5,
                score=score,
                label=label,
                human_passed=rng.random() < 0.5 + (score - 0.5) * 0.8,
                human_score=human_score if rng.random() < 0.8 else None,
                human_label=rng.choice(["good", "bad", None]),
            )
        )
    return pairs


@pytest.mark.parametrize(("seed", "ties"), [(53, False), (7, True), (2026, True)])
def test_agreement_equals_an_independent_computation_on_a_seeded_set(seed: int, ties: bool) -> None:
    pairs = _seeded(seed, 200, ties)
    got = agreement(pairs)
    truth = [p.human_passed for p in pairs]
    said = [p.passed is True for p in pairs]  # no passed from the evaluator counts as not passed
    assert got.reviewed == 200 and got.unanswered == sum(p.passed is None for p in pairs)
    assert got.accuracy == pytest.approx(sum(a == b for a, b in zip(truth, said, strict=True)) / 200)
    assert (got.tp, got.fp, got.fn, got.tn) == (
        sum(a and b for a, b in zip(truth, said, strict=True)),
        sum(b and not a for a, b in zip(truth, said, strict=True)),
        sum(a and not b for a, b in zip(truth, said, strict=True)),
        sum(not a and not b for a, b in zip(truth, said, strict=True)),
    )
    assert got.kappa == pytest.approx(kappa_pairwise(truth, said), abs=1e-12)
    both = [(p.score, p.human_score) for p in pairs if p.score is not None and p.human_score is not None]
    assert got.scored == len(both)
    assert got.score_mae == pytest.approx(sum(abs(a - b) for a, b in both) / len(both))
    assert got.spearman == pytest.approx(spearman([a for a, _ in both], [b for _, b in both]), abs=1e-12)
    for label in ("good", "bad"):
        group = [p for p in pairs if p.label == label]
        n, accuracy, same = got.by_label[label]
        assert n == len(group)
        assert accuracy == pytest.approx(sum((p.passed is True) == p.human_passed for p in group) / len(group))
        labelled = [p for p in group if p.human_label is not None]
        assert same == pytest.approx(sum(p.human_label == label for p in labelled) / len(labelled))


def test_ranks_average_ties() -> None:
    assert ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]
    assert ranks([5.0, 5.0, 5.0]) == [2.0, 2.0, 2.0]


def test_kappa_is_null_with_a_reason_when_both_sides_gave_one_class() -> None:
    got = agreement([Pair(True, None, None, True), Pair(True, None, None, True)])
    assert got.accuracy == 1.0 and got.kappa is None and "undefined" in (got.kappa_reason or "")
    assert got.spearman is None and "at least 2" in (got.spearman_reason or "") and got.score_mae is None


def test_spearman_is_null_with_a_reason_when_a_side_is_constant() -> None:
    got = agreement([Pair(True, 0.5, None, True, 0.1), Pair(False, 0.5, None, False, 0.9)])
    assert got.kappa == 1.0 and got.spearman is None and "same score" in (got.spearman_reason or "")


def test_no_pairs_is_refused_not_zeros() -> None:
    with pytest.raises(ValueError):
        agreement([])


def test_a_queue_sample_takes_the_same_items_on_every_fill_and_about_the_share_asked() -> None:
    queue = SimpleNamespace(id="rq_sample", selection={"passed": False}, sample=0.3)
    candidates = [Candidate(str(i), 1, "ok", i / 1000, i % 2 == 0, None) for i in range(2000)]
    first = [c.source_key for c in candidates if takes(queue, c)]
    again = [c.source_key for c in reversed(candidates) if takes(queue, c)]
    assert sorted(first) == sorted(again)  # the draw is per item, not per pass
    assert all(int(k) % 2 == 1 for k in first)  # the selection first: only the failures
    assert 0.25 * 1000 < len(first) < 0.35 * 1000
    other = SimpleNamespace(id="rq_other", selection=None, sample=0.3)
    assert {c.source_key for c in candidates if takes(other, c)} != set(first)  # seeded per queue and item


@pytest.mark.parametrize(
    ("selection", "wanted"),
    [
        ({"score_below": 0.5}, [0, 1]),
        ({"score_above": 0.5}, [3]),
        ({"passed": False}, [1, 4]),
        ({"label_in": ["x"]}, [0, 3]),
        ({"status_in": ["error"]}, [4]),
        (None, [0, 1, 2, 3, 4]),
    ],
)
def test_each_selection_takes_what_it_names(selection: dict[str, object] | None, wanted: list[int]) -> None:
    queue = SimpleNamespace(id="rq_sel", selection=selection, sample=1.0)
    candidates = [
        Candidate("0", 1, "ok", 0.1, True, "x"),
        Candidate("1", 1, "ok", 0.4, False, "y"),
        Candidate("2", 1, "ok", 0.5, True, None),
        Candidate("3", 1, "ok", 0.9, True, "x"),
        Candidate("4", 1, "error", None, False, None),
    ]
    assert [int(c.source_key) for c in candidates if takes(queue, c)] == wanted
