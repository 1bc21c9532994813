"""Agreement between annotators (kappa from scikit-learn / statsmodels), on grades and on failure types apart."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from sklearn.metrics import cohen_kappa_score

from r2med_core.judging.adjudication import adjudication_items
from r2med_core.judging.agreement import agreement, cohen_kappa
from r2med_core.judging.annotations import Annotation

from .test_annotations import label


def _labels(rows: list[tuple[str, str, str]]) -> list[Annotation]:
    """(annotator, doc_id, failure_type) rows on one query, with increasing times and ids."""
    return [
        label(id=i, annotator=who, doc_id=doc, failure_type=code, created_at=f"2025-01-01T00:00:{i:02d}Z")
        for i, (who, doc, code) in enumerate(rows, start=1)
    ]


def test_cohen_kappa_per_pair_over_the_shared_units() -> None:
    alice = ["gold_questionable", "lexical_trap", "lexical_trap", "wrong_aspect", "gold_questionable"]
    bob = ["gold_questionable", "lexical_trap", "wrong_aspect", "wrong_aspect", "lexical_trap"]
    rows = [("alice", f"d{i}", code) for i, code in enumerate(alice)]
    rows += [("bob", f"d{i}", code) for i, code in enumerate(bob)]
    rows += [("carol", "d_only_carol", "lexical_trap")]  # nobody else labelled it: no pair
    result = agreement(_labels(rows), "failure type")
    assert result.shared_units == 5 and result.group is None
    (pair,) = result.pairs
    assert (pair.annotator_a, pair.annotator_b, pair.units, pair.agreed) == ("alice", "bob", 5, 3)
    assert pair.kappa == pytest.approx(cohen_kappa_score(alice, bob))
    assert 0 < pair.kappa < 1


def test_an_annotators_latest_label_stands_in_each_vocabulary_and_undefined_kappa_is_nan() -> None:
    rows = [
        ("alice", "d1", "lexical_trap"),
        ("alice", "d1", "grade_1"),
        ("alice", "d1", "wrong_aspect"),  # her latest failure type: her grade still stands beside it
        ("bob", "d1", "wrong_aspect"),
        ("bob", "d1", "grade_2"),
        ("bob", "d1", "grade_1"),  # his latest grade
    ]
    for vocabulary in ("grade", "failure type"):
        (pair,) = agreement(_labels(rows), vocabulary).pairs
        assert (pair.units, pair.agreed) == (1, 1), vocabulary
        assert math.isnan(pair.kappa)  # one unit: kappa is undefined, never a made-up number
    assert adjudication_items(_labels(rows), []) == []


def test_an_annotator_who_gave_one_category_throughout_has_an_undefined_kappa_not_zero() -> None:
    """Chance agreement then equals observed agreement: sklearn says 0 however often they agreed."""
    alice = ["lexical_trap"] * 4
    bob = ["lexical_trap", "lexical_trap", "lexical_trap", "wrong_aspect"]  # agrees on 3 of 4
    rows = [("alice", f"d{i}", code) for i, code in enumerate(alice)]
    rows += [("bob", f"d{i}", code) for i, code in enumerate(bob)]
    (pair,) = agreement(_labels(rows), "failure type").pairs
    assert (pair.units, pair.agreed) == (4, 3)
    assert math.isnan(pair.kappa)


def test_the_llm_judge_and_the_annotators_share_one_kappa_rule() -> None:
    """The same ratings give the same kappa, defined or not, on the Annotations page and the LLM judge panel."""
    from r2med_core.judging import llm_judge

    assert llm_judge.cohen_kappa is cohen_kappa
    assert math.isnan(cohen_kappa([1, 1, 1], [1, 0, 1])) and math.isnan(cohen_kappa([1], [1]))
    assert cohen_kappa([1, 0, 1, 0], [1, 0, 0, 0]) == pytest.approx(cohen_kappa_score([1, 0, 1, 0], [1, 0, 0, 0]))
    with pytest.raises(ValueError, match="same items"):
        cohen_kappa([1, 0], [1])


def test_fleiss_kappa_for_three_annotators() -> None:
    codes = {
        "alice": ["lexical_trap", "wrong_aspect", "gold_questionable", "lexical_trap"],
        "bob": ["lexical_trap", "wrong_aspect", "gold_questionable", "wrong_aspect"],
        "carol": ["lexical_trap", "lexical_trap", "gold_questionable", "wrong_aspect"],
    }
    rows = [(who, f"d{i}", code) for who, labels in codes.items() for i, code in enumerate(labels)]
    result = agreement(_labels(rows), "failure type")
    assert len(result.pairs) == 3 and result.group is not None
    assert result.group.annotators == ("alice", "bob", "carol") and result.group.units == 4
    from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

    table, _ = aggregate_raters([[codes[w][i] for w in codes] for i in range(4)])
    assert result.group.kappa == pytest.approx(fleiss_kappa(table))
    assert [item.unit[3] for item in adjudication_items(_labels(rows), [])] == ["d1", "d3"]
    assert agreement(_labels(rows), "grade").pairs == ()  # nobody graded


def test_blind_first_agreement_counts_only_labels_made_blind() -> None:
    """A label made after seeing the judgements and others' labels may copy them: it must not count."""
    rows = [("alice", "d1", "lexical_trap"), ("bob", "d1", "wrong_aspect"), ("carol", "d1", "lexical_trap")]
    made = _labels(rows)
    blind = [a if a.annotator != "carol" else replace(a, blind=False) for a in (replace(a, blind=True) for a in made)]
    counted = agreement(blind, "failure type", blind_only=True)
    ((pair,),) = [counted.pairs]
    assert (pair.annotator_a, pair.annotator_b, pair.agreed) == ("alice", "bob", 0)  # carol's copy is left out
    assert counted.group is None
    everything = agreement(blind, "failure type")  # without sign-in every label counts, as before
    assert len(everything.pairs) == 3 and everything.group is not None


def test_a_models_proposals_are_no_annotator_in_agreement_or_disagreements() -> None:
    rows = [
        ("alice", "d1", "not_relevant"),
        ("proposed by judge-model", "d1", "relevant_unjudged"),
        ("bob", "d1", "not_relevant"),
        ("proposed by judge-model", "d2", "relevant_unjudged"),
        ("alice", "d2", "grade_0"),
    ]
    labels = [replace(a, blind=True) for a in _labels(rows)]
    for counted in (agreement(labels, "grade"), agreement(labels, "grade", blind_only=True)):
        assert [(p.annotator_a, p.annotator_b, p.units, p.agreed) for p in counted.pairs] == [("alice", "bob", 1, 1)]
        assert counted.group is None and counted.shared_units == 1
    assert adjudication_items(labels, []) == []  # the model disagrees with alice on d2: it is no annotator


def test_a_grade_counts_as_the_grade_it_is_whichever_page_gave_it() -> None:
    """The Judging page wrote 'Relevant but unjudged' / 'Judged not relevant', Judge a list grades: the
    same judgement made on the two pages agrees, in kappa and in adjudication."""
    rows = [
        ("alice", "d1", "relevant_unjudged"),  # the Judging page, as older versions stored it
        ("bob", "d1", "grade_1"),  # Judge a list
        ("alice", "d2", "not_relevant"),
        ("bob", "d2", "grade_0"),
        ("alice", "d3", "grade_2"),  # the Judging page now
        ("bob", "d3", "grade_2"),
        ("alice", "d4", "grade_1"),
        ("bob", "d4", "grade_2"),  # the one real disagreement
    ]
    labels = _labels(rows)
    (pair,) = agreement(labels, "grade").pairs
    assert (pair.units, pair.agreed) == (4, 3)
    assert pair.kappa == pytest.approx(
        cohen_kappa_score(["grade_1", "grade_0", "grade_2", "grade_1"], ["grade_1", "grade_0", "grade_2", "grade_2"])
    )
    assert [(item.unit[3], item.vocabulary) for item in adjudication_items(labels, [])] == [("d4", "grade")]


def test_agreement_counts_every_pooled_judgement() -> None:
    """Every pair two annotators graded is an item, whatever else they labelled on it afterwards: a failure
    type saved later on the same document never hides the grade."""
    pooled = [f"p{i}" for i in range(6)]
    rows = [("alice", doc, "relevant_unjudged" if i % 2 else "not_relevant") for i, doc in enumerate(pooled)]
    rows += [("bob", doc, f"grade_{i % 2}") for i, doc in enumerate(pooled)]
    rows += [("alice", "p1", "lexical_trap"), ("bob", "p3", "wrong_aspect")]  # the explorer, later
    (pair,) = agreement(_labels(rows), "grade").pairs
    assert (pair.units, pair.agreed, pair.kappa) == (len(pooled), len(pooled), pytest.approx(1.0))
