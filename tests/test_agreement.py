"""Agreement between annotators (kappa from scikit-learn / statsmodels) and the review queue."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from sklearn.metrics import cohen_kappa_score

from r2med_core.agreement import agreement, disagreements, review_queue
from r2med_core.annotations import Annotation

from .test_annotations import label


def _labels(rows: list[tuple[str, str, str]]) -> list[Annotation]:
    """(annotator, doc_id, failure_type) rows on one query, with increasing times and ids."""
    return [
        label(id=i, annotator=who, doc_id=doc, failure_type=code, created_at=f"2025-01-01T00:00:{i:02d}Z")
        for i, (who, doc, code) in enumerate(rows, start=1)
    ]


def test_cohen_kappa_per_pair_over_the_shared_units() -> None:
    alice = ["relevant_unjudged", "lexical_trap", "lexical_trap", "wrong_aspect", "relevant_unjudged"]
    bob = ["relevant_unjudged", "lexical_trap", "wrong_aspect", "wrong_aspect", "lexical_trap"]
    rows = [("alice", f"d{i}", code) for i, code in enumerate(alice)]
    rows += [("bob", f"d{i}", code) for i, code in enumerate(bob)]
    rows += [("carol", "d_only_carol", "lexical_trap")]  # nobody else labelled it: no pair
    result = agreement(_labels(rows))
    assert result.shared_units == 5 and result.group is None
    (pair,) = result.pairs
    assert (pair.annotator_a, pair.annotator_b, pair.units, pair.agreed) == ("alice", "bob", 5, 3)
    assert pair.kappa == pytest.approx(cohen_kappa_score(alice, bob))
    assert 0 < pair.kappa < 1


def test_an_annotators_latest_label_stands_and_undefined_kappa_is_nan() -> None:
    rows = [("alice", "d1", "lexical_trap"), ("alice", "d1", "relevant_unjudged"), ("bob", "d1", "relevant_unjudged")]
    result = agreement(_labels(rows))
    (pair,) = result.pairs
    assert (pair.units, pair.agreed) == (1, 1)
    assert math.isnan(pair.kappa)  # one unit: kappa is undefined, never a made-up number
    assert disagreements(_labels(rows)) == []


def test_fleiss_kappa_for_three_annotators() -> None:
    codes = {
        "alice": ["lexical_trap", "wrong_aspect", "relevant_unjudged", "lexical_trap"],
        "bob": ["lexical_trap", "wrong_aspect", "relevant_unjudged", "wrong_aspect"],
        "carol": ["lexical_trap", "lexical_trap", "relevant_unjudged", "wrong_aspect"],
    }
    rows = [(who, f"d{i}", code) for who, labels in codes.items() for i, code in enumerate(labels)]
    result = agreement(_labels(rows))
    assert len(result.pairs) == 3 and result.group is not None
    assert result.group.annotators == ("alice", "bob", "carol") and result.group.units == 4
    from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

    table, _ = aggregate_raters([[codes[w][i] for w in codes] for i in range(4)])
    assert result.group.kappa == pytest.approx(fleiss_kappa(table))
    assert len(disagreements(_labels(rows))) == 2  # d1 and d3


def test_the_review_queue_holds_proposals_and_disagreements_once() -> None:
    rows = [
        ("alice", "d1", "relevant_unjudged"),  # disputed by bob: one disagreement item
        ("bob", "d1", "lexical_trap"),
        ("alice", "d2", "relevant_unjudged"),  # a plain proposal
        ("carol", "d3", "lexical_trap"),  # neither
    ]
    labels = _labels(rows)
    queue = review_queue(labels)
    assert [(item.kind, item.unit[3], item.annotators) for item in queue] == [
        ("disagreement", "d1", ("alice", "bob")),
        ("proposed addition", "d2", ("alice",)),
    ]
    assert [item.unit[3] for item in review_queue(labels, annotator="bob")] == ["d1"]
    assert review_queue(labels, task="another-task") == []
    # Reviewed labels leave the queue.
    reviewed = [
        a if a.doc_id != "d2" else Annotation(**{**a.__dict__, "accepted": True, "reviewer": "rev"}) for a in labels
    ]
    assert [item.unit[3] for item in review_queue(reviewed)] == ["d1"]


def test_blind_first_agreement_counts_only_labels_made_blind() -> None:
    """A label made after seeing the judgements and others' labels may copy them: it must not count."""
    rows = [("alice", "d1", "lexical_trap"), ("bob", "d1", "wrong_aspect"), ("carol", "d1", "lexical_trap")]
    made = _labels(rows)
    blind = [a if a.annotator != "carol" else replace(a, blind=False) for a in (replace(a, blind=True) for a in made)]
    counted = agreement(blind, blind_only=True)
    ((pair,),) = [counted.pairs]
    assert (pair.annotator_a, pair.annotator_b, pair.agreed) == ("alice", "bob", 0)  # carol's copy is left out
    assert counted.group is None
    everything = agreement(blind)  # without sign-in every label counts, as before
    assert len(everything.pairs) == 3 and everything.group is not None


def test_a_models_proposals_are_no_annotator_in_agreement_or_disagreements() -> None:
    rows = [
        ("alice", "d1", "not_relevant"),
        ("proposed by judge-model", "d1", "relevant_unjudged"),
        ("bob", "d1", "not_relevant"),
        ("proposed by judge-model", "d2", "relevant_unjudged"),
        ("alice", "d2", "lexical_trap"),
    ]
    labels = [replace(a, blind=True) for a in _labels(rows)]
    for counted in (agreement(labels), agreement(labels, blind_only=True)):
        assert [(p.annotator_a, p.annotator_b, p.units, p.agreed) for p in counted.pairs] == [("alice", "bob", 1, 1)]
        assert counted.group is None and counted.shared_units == 1
    assert disagreements(labels) == []
    # The model's proposal on d2 is a proposed addition for a reviewer; d1's too (no person disputes it).
    assert [(item.kind, item.unit[3]) for item in review_queue(labels)] == [
        ("proposed addition", "d1"),
        ("proposed addition", "d2"),
    ]
