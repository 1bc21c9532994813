"""Adjudication: decisions in their own table on SQLite and PostgreSQL (schema 4), the queue per
vocabulary (grades, failure types), the decisions' qrels additions/corrections in the team's qrels, and
agreement before/after checked against scikit-learn and statsmodels."""

from __future__ import annotations

import csv
import io
import json
import math
import sqlite3
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

from r2med_core.judging.adjudication import (
    Decision,
    SelfAdjudication,
    StaleDecision,
    adjudication_items,
    adjudication_queue,
    current,
    decide,
    decisions_csv,
    history,
)
from r2med_core.judging.agreement import agreement, agreement_report, report_csv, with_decisions
from r2med_core.judging.annotations import Annotation, AnnotationStore
from r2med_core.judging.stores import SCHEMA_VERSION, is_postgres_url
from r2med_core.judging.team import changes_csv, changes_text, review_queue, team_qrels

from .test_annotations import DATASET, TASK, label

Target = str | Path
UNIT = (DATASET, TASK, "q1", "d1")


def _disputed(store: AnnotationStore) -> list[Annotation]:
    """alice (the Judging page, as older versions stored it) and bob (Judge a list) grade (q1, d1)
    differently; carol labelled q2's d5 alone."""
    return [
        store.add(label(annotator="alice", failure_type="relevant_unjudged", note="answers it", blind=True)),
        store.add(label(annotator="bob", failure_type="grade_0", note="same words only", blind=True)),
        store.add(label(annotator="carol", query_id="q2", doc_id="d5", failure_type="wrong_aspect")),
    ]


def test_decisions_are_kept_with_their_history_and_labels_stay_untouched(
    new_target: Callable[[str], Target],
) -> None:
    target = new_target("history")
    store = AnnotationStore(target)
    labels = _disputed(store)
    before = store.list()
    (item,) = adjudication_queue(store.list(), history(store))
    assert item.unit == UNIT and item.vocabulary == "grade" and item.annotators == ("alice", "bob")
    assert item.decision is None

    first = decide(store, UNIT, "relevant_unjudged", "Dr. Rev", grade=1, reason="answers the question")
    assert (first.reviewer, first.grade, first.reason, first.supersedes) == ("Dr. Rev", 1, "answers the question", None)
    assert first.decided_at.endswith("Z") and set(first.label_ids) == {labels[0].id, labels[1].id}
    assert adjudication_queue(store.list(), history(store)) == []  # decided: out of the queue

    # A second reviewer overturns it: the first decision is superseded, never overwritten.
    second = decide(store, UNIT, "grade_0", "Dr. Two", reason="", replacing=first.id)
    reopened = AnnotationStore(target)
    assert [(d.id, d.failure_type, d.grade, d.reviewer, d.supersedes) for d in history(reopened)] == [
        (first.id, "relevant_unjudged", 1, "Dr. Rev", None),
        (second.id, "grade_0", 0, "Dr. Two", first.id),  # a decision on a grade carries it
    ]
    assert current(history(reopened))[(UNIT, "grade")] == second
    assert history(reopened, unit=(DATASET, TASK, "q2", "d5")) == []
    assert reopened.list() == before  # every label exactly as it was: decisions never touch them
    (settled,) = adjudication_items(reopened.list(), history(reopened))
    assert settled.decision == second and not settled.waiting

    # A grade arriving after the decision reopens it; a failure type is another question and does not.
    store.add(label(annotator="erin", failure_type="wrong_aspect"))
    assert adjudication_queue(store.list(), history(store)) == []
    store.add(label(annotator="dave", failure_type="grade_2"))
    (again,) = adjudication_queue(store.list(), history(store))
    assert again.reopened and again.decision == second


def test_a_models_proposals_are_suggestions_never_a_disagreement_nor_a_reopening(
    new_target: Callable[[str], Target],
) -> None:
    store = AnnotationStore(new_target("model"))
    model = "proposed by judge-model"
    # A person's "not relevant" next to the model's grade-3 proposal is no disagreement to adjudicate, and
    # the proposal waits in the review queue for a reviewer.
    store.add(label(annotator="alice", doc_id="d7", failure_type="not_relevant", blind=True))
    suggested = store.add(label(annotator=model, doc_id="d7", note="LLM judge grade 3/3"))
    assert adjudication_items(store.list(), []) == []
    assert [item.labels for item in review_queue(store.list(), [])] == [(suggested,)]
    # On a unit people dispute, a proposal arriving after the decision is shown, and reopens nothing.
    _disputed(store)
    decision = decide(store, UNIT, "grade_0", "Dr. Rev")
    proposal = store.add(label(annotator=model, note="LLM judge grade 2/3"))
    (item,) = adjudication_items(store.list(), history(store))
    assert item.annotators == ("alice", "bob") and item.suggestions == (proposal,)
    assert item.decision == decision and not item.reopened and not item.waiting
    assert adjudication_queue(store.list(), history(store)) == []
    # Agreement is between people: the model is no annotator in the report.
    rows = agreement_report(store.list(), history(store))
    assert [r.annotators for r in rows] == [("alice", "bob")]


def test_self_adjudication_is_refused_clearly_and_nothing_is_lost(new_target: Callable[[str], Target]) -> None:
    store = AnnotationStore(new_target("self"))
    _disputed(store)
    kept = decide(store, UNIT, "grade_0", "Dr. Rev")
    labels_before, decisions_before = store.list(), history(store)
    with pytest.raises(SelfAdjudication, match=r"Alice labelled clinical-case · query q1 · document d1: nobody"):
        decide(store, UNIT, "relevant_unjudged", " Alice ", grade=2, replacing=kept.id)  # case and spaces ignored
    assert store.list() == labels_before and history(store) == decisions_before
    # Carol did not label (q1, d1): she may decide it.
    assert decide(store, UNIT, "relevant_unjudged", "carol", grade=2, replacing=kept.id).supersedes == kept.id


def test_nobody_labels_a_unit_they_adjudicated_live_or_by_import(
    new_target: Callable[[str], Target], tmp_path: Path
) -> None:
    """The same rule the other way round: a reviewer who decided a unit cannot then label it (a label
    by them would stand beside the decision settling it), whichever way the label comes."""
    store = AnnotationStore(new_target("late"))
    _disputed(store)
    decide(store, UNIT, "grade_0", "Dr. Rev")
    labels_before = store.list()
    with pytest.raises(SelfAdjudication, match=r"Dr. Rev adjudicated clinical-case · query q1 · document d1: nobody"):
        store.add(label(annotator=" dr. rev ", failure_type="grade_2"))  # case and spaces ignored
    assert store.list() == labels_before
    # Another document of the query, and anyone else on this one, are labelled as ever.
    store.add(label(annotator="Dr. Rev", doc_id="d2", failure_type="grade_1"))
    store.add(label(annotator="dave", failure_type="grade_2"))
    # An import refuses that label by line and imports the others.
    lines = [label(annotator="erin", doc_id="d3"), label(annotator="DR. REV", failure_type="lexical_trap")]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(asdict(a)) + "\n" for a in lines), encoding="utf-8")
    report = store.import_jsonl(path)
    assert report.added == 1
    (problem,) = report.errors
    assert (problem.path, problem.line) == (str(path), 2) and "nobody labels a unit they adjudicated" in problem.message
    assert not [a for a in store.list() if a.annotator.lower() == "dr. rev" and a.doc_id == "d1"]


def test_a_decision_on_a_stale_view_or_a_bad_decision_is_refused(new_target: Callable[[str], Target]) -> None:
    store = AnnotationStore(new_target("stale"))
    _disputed(store)
    first = decide(store, UNIT, "grade_0", "Dr. Rev")
    with pytest.raises(StaleDecision, match=r"you saw no decision, the current one is #\d+ by Dr. Rev"):
        decide(store, UNIT, "grade_1", "Dr. Two")  # Dr. Two's page predates Dr. Rev's decision
    with pytest.raises(ValueError, match="needs the grade the document deserves"):
        decide(store, UNIT, "relevant_unjudged", "Dr. Two", replacing=first.id)
    with pytest.raises(ValueError, match="a decision for grade 1 cannot give the pair grade 2"):
        decide(store, UNIT, "grade_1", "Dr. Two", grade=2, replacing=first.id)
    with pytest.raises(ValueError, match="no labels on clinical-case · query q9"):
        decide(store, (DATASET, TASK, "q9", "d1"), "lexical_trap", "Dr. Two")
    with pytest.raises(ValueError, match="unknown failure type"):
        decide(store, UNIT, "no_such_type", "Dr. Two", replacing=first.id)
    with pytest.raises(ValueError, match="reviewer must be a non-empty string"):
        decide(store, UNIT, "grade_1", "  ", replacing=first.id)
    assert [d.id for d in history(store)] == [first.id]
    # A failure type is decided apart from the grade: no decision on it yet, so none is stale.
    failure = decide(store, UNIT, "lexical_trap", "Dr. Two")
    assert current(history(store)) == {(UNIT, "grade"): first, (UNIT, "failure type"): failure}


def _make_schema_3(target: Target) -> None:
    """A store exactly as schema 3 left it: the annotations table only (schema 3 was its last change)."""
    from r2med_core.judging.stores.schema import ANNOTATIONS, create_index, create_table

    if is_postgres_url(target):
        import psycopg

        with psycopg.connect(str(target), autocommit=True) as conn:
            conn.execute(create_table(ANNOTATIONS, "postgresql"))
            conn.execute("CREATE TABLE annotations_schema (version INTEGER NOT NULL)")
            conn.execute("INSERT INTO annotations_schema VALUES (3)")
        return
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(target)
    conn.execute(create_table(ANNOTATIONS, "sqlite"))
    for index in ANNOTATIONS.indexes:
        conn.execute(create_index(ANNOTATIONS, index))
    conn.execute("PRAGMA user_version = 3")
    conn.close()


def _version(target: Target) -> int:
    if is_postgres_url(target):
        import psycopg

        with psycopg.connect(str(target), autocommit=True) as conn:
            return int(conn.execute("SELECT max(version) FROM annotations_schema").fetchone()[0])
    with sqlite3.connect(target) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def test_a_schema_3_store_gains_the_adjudications_table_and_keeps_every_label(
    new_target: Callable[[str], Target],
) -> None:
    target = new_target("v3")
    _make_schema_3(target)
    # Rows written through SQL, as the schema-3 version wrote them (accepted, reviewed, blind, query-level).
    REVIEWED = "2024-02-01T00:00:00.000000Z"
    rows = [
        ("q1", "d1", "relevant_unjudged", "alice", "2024-01-01T00:00:00.000000Z", 1, 3, "rev", REVIEWED, 1),
        ("q1", "d1", "lexical_trap", "bob", "2024-01-02T00:00:00.000000Z", 0, None, "", None, 1),
        ("q2", None, "rewrite_hallucination", "bob", "2024-01-03T00:00:00.000000Z", 0, None, "", None, 0),
    ]  # fmt: skip
    insert = (
        "INSERT INTO annotations (dataset, task, query_id, doc_id, system, failure_type, note, annotator, created_at, "
        "accepted, rank, reviewer, reviewed_at, blind) VALUES (?, ?, ?, ?, 'bm25', ?, 'n', ?, ?, ?, ?, ?, ?, ?)"
    )
    if is_postgres_url(target):
        import psycopg

        with psycopg.connect(str(target), autocommit=True) as conn:
            for row in rows:
                conn.execute(insert.replace("?", "%s"), (DATASET, TASK, *row))
    else:
        with sqlite3.connect(target) as conn:
            conn.executemany(insert, [(DATASET, TASK, *row) for row in rows])
    store = AnnotationStore(target)
    labels = store.list()
    assert [(a.query_id, a.doc_id, a.failure_type, a.annotator, a.status, a.rank, a.blind) for a in labels] == [
        ("q1", "d1", "relevant_unjudged", "alice", "accepted", 3, True),
        ("q1", "d1", "lexical_trap", "bob", "proposed", None, True),
        ("q2", None, "rewrite_hallucination", "bob", "proposed", None, False),
    ]
    assert labels[0].reviewer == "rev" and labels[0].reviewed_at == REVIEWED
    assert _version(target) == SCHEMA_VERSION == 6
    assert history(store) == []
    made = decide(store, UNIT, "lexical_trap", "carol", grade=0)
    reopened = AnnotationStore(target)  # a second open migrates nothing and loses nothing
    assert reopened.list() == labels and history(reopened) == [made]


def test_a_foreign_adjudications_table_is_reported_and_left_alone(tmp_path: Path) -> None:
    from r2med_core.judging.annotations import AnnotationStoreError

    path = tmp_path / "store.sqlite"
    AnnotationStore(path).add(label())
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE adjudications")
        conn.execute("CREATE TABLE adjudications (verdict TEXT)")
        conn.execute("INSERT INTO adjudications VALUES ('someone else''s')")
        conn.execute("PRAGMA user_version = 3")
    with pytest.raises(
        AnnotationStoreError, match=r"adjudications table is not an annotation store's .*left untouched"
    ):
        AnnotationStore(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT * FROM adjudications").fetchall() == [("someone else's",)]


def test_a_foreign_postgres_adjudications_table_is_reported_and_left_alone(postgres_urls: Callable[[], str]) -> None:
    import psycopg

    from r2med_core.judging.annotations import AnnotationStoreError

    url = postgres_urls()
    _make_schema_3(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE adjudications (verdict TEXT)")
        conn.execute("INSERT INTO adjudications VALUES ('someone else''s')")
    with pytest.raises(
        AnnotationStoreError, match=r"adjudications table is not an annotation store's .*left untouched"
    ):
        AnnotationStore(url)
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT * FROM adjudications").fetchall() == [("someone else's",)]
        assert conn.execute("SELECT version FROM annotations_schema").fetchall() == [(3,)]


# --------------------------------------------------------------------------- qrels additions and corrections


def _decision(doc: str, code: str, grade: int | None, *, id: int, query: str = "q1", who: str = "rev") -> Decision:
    return Decision(
        id=id, dataset=DATASET, task=TASK, query_id=query, doc_id=doc, failure_type=code, grade=grade, reviewer=who
    )


def test_decisions_become_qrels_additions_and_corrections() -> None:
    qrels = {"q1": {"gold": 2, "weak": 1}}
    decisions = [
        _decision("new", "relevant_unjudged", 1, id=1),  # never judged: an addition
        _decision("gold", "gold_questionable", 0, id=2),  # judged relevant, the reviewer says not: a correction
        _decision("weak", "gold_questionable", None, id=3),  # questioned, grade left alone: no change
        _decision("new", "relevant_unjudged", 2, id=4, who="rev2"),  # supersedes #1
        _decision("same", "lexical_trap", 1, id=5, query="q2"),  # addition on another query
        _decision("weak", "other", 1, id=6, query="q1"),  # supersedes #3 with the grade it has: no change
    ]
    team = team_qrels(qrels, [], decisions, dataset=DATASET, task=TASK)
    changes = team.changes
    assert [(c.kind, c.query_id, c.doc_id, c.original, c.grade, c.decision.id) for c in changes] == [
        ("correction", "q1", "gold", 2, 0, 2),
        ("addition", "q1", "new", None, 2, 4),
        ("addition", "q2", "same", None, 1, 5),
    ]
    assert {c.source for c in changes} == {"adjudicated"} and team.count("adjudicated") == 3
    assert changes_text(changes) == "q1 0 gold 0\nq1 0 new 2\nq2 0 same 1\n"
    assert team.qrels == {"q1": {"gold": 0, "weak": 1, "new": 2}, "q2": {"same": 1}}
    assert qrels == {"q1": {"gold": 2, "weak": 1}}  # the original is not changed
    table = list(csv.DictReader(io.StringIO(changes_csv(changes))))
    assert [(r["kind"], r["doc_id"], r["original_grade"], r["team_grade"], r["reviewer"]) for r in table] == [
        ("correction", "gold", "2", "0", "rev"),
        ("addition", "new", "", "2", "rev2"),
        ("addition", "same", "", "1", "rev"),
    ]
    assert [r["decision_id"] for r in table] == ["2", "4", "5"]
    history_rows = list(csv.DictReader(io.StringIO(decisions_csv(decisions))))
    assert [r["id"] for r in history_rows] == ["1", "2", "3", "4", "5", "6"]
    with pytest.raises(ValueError, match="a decision on a whole query has none"):
        Decision(dataset=DATASET, task=TASK, query_id="q1", failure_type="other", grade=1, reviewer="rev")


def test_reevaluation_uses_the_adjudicated_grades() -> None:
    from r2med_core.evaluation import evaluate
    from r2med_core.runs import Run

    run = Run("sys", {"q1": [("new", 3.0), ("gold", 2.0), ("weak", 1.0)], "q2": [("x", 1.0), ("y", 0.5)]})
    qrels = {"q1": {"gold": 2, "weak": 1}, "q2": {"y": 1}}
    decisions = [
        _decision("new", "relevant_unjudged", 2, id=1),
        _decision("y", "gold_questionable", 0, id=2, query="q2"),
    ]
    team = team_qrels(qrels, [], decisions, dataset=DATASET, task=TASK)
    expected = {"q1": {"gold": 2, "weak": 1, "new": 2}, "q2": {"y": 0}}  # q2 stays judged: it was
    assert team.qrels == expected
    original, adjudicated = evaluate(run, qrels), evaluate(run, team.qrels)
    assert adjudicated.per_query.loc["q1", "ndcg_at_10"] > original.per_query.loc["q1", "ndcg_at_10"]


# --------------------------------------------------------------------------- agreement before / after


def _rated(codes: dict[str, list[str]], *, task: str = TASK) -> list[Annotation]:
    return [
        label(
            id=100 * n + i,
            annotator=who,
            doc_id=f"d{i}",
            task=task,
            failure_type=code,
            blind=True,
            created_at=f"2025-01-01T00:{n:02d}:{i:02d}Z",
        )
        for n, (who, row) in enumerate(codes.items())
        for i, code in enumerate(row)
    ]


def test_agreement_before_and_after_adjudication_matches_sklearn_and_statsmodels() -> None:
    A, B, C = "lexical_trap", "wrong_aspect", "gold_questionable"
    codes = {
        "alice": [A, A, B, B, C, A],
        "bob": [A, B, B, A, C, A],
        "carol": [A, B, A, B, C, B],
    }
    labels = _rated(codes)
    # Reviewers settle d1 as B and d3 as A; d2 and d5 stay as labelled.
    decisions = [_decision("d1", B, None, id=1), _decision("d3", A, None, id=2)]
    after = {who: list(row) for who, row in codes.items()}
    for who in after:
        after[who][1], after[who][3] = B, A
    rows = agreement_report(labels, decisions)
    pairs = {r.annotators: r for r in rows if r.measure == "Cohen's kappa"}
    assert set(pairs) == {("alice", "bob"), ("alice", "carol"), ("bob", "carol")}
    for (x, y), row in pairs.items():
        assert row.units == 6 and row.adjudicated == 2 and row.task == TASK
        assert row.kappa_before == pytest.approx(cohen_kappa_score(codes[x], codes[y]))
        assert row.kappa_after == pytest.approx(cohen_kappa_score(after[x], after[y]))
        assert row.agreed_before == sum(p == q for p, q in zip(codes[x], codes[y]))
        assert row.agreed_after == sum(p == q for p, q in zip(after[x], after[y]))
    (group,) = [r for r in rows if r.measure == "Fleiss' kappa"]
    table_before, _ = aggregate_raters([[codes[w][i] for w in codes] for i in range(6)])
    table_after, _ = aggregate_raters([[after[w][i] for w in after] for i in range(6)])
    assert group.kappa_before == pytest.approx(fleiss_kappa(table_before))
    assert group.kappa_after == pytest.approx(fleiss_kappa(table_after))
    assert group.kappa_after > group.kappa_before and (group.units, group.adjudicated) == (6, 2)
    assert [a.failure_type for a in labels[:2]] == [A, A]  # with_decisions copies; the labels are unchanged
    assert with_decisions(labels, decisions)[1].failure_type == B

    text = report_csv(rows)
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert [r["annotators"] for r in parsed] == ["alice · bob", "alice · carol", "bob · carol", "alice · bob · carol"]
    first = parsed[0]
    assert float(first["kappa_before"]) == pytest.approx(cohen_kappa_score(codes["alice"], codes["bob"]))
    assert float(first["kappa_after"]) == pytest.approx(cohen_kappa_score(after["alice"], after["bob"]))
    assert (first["units"], first["adjudicated_units"], parsed[3]["agreed_before"]) == ("6", "2", "")
    assert {r.vocabulary for r in rows} == {r["ratings"] for r in parsed} == {"failure type"}  # nobody graded


def test_the_report_measures_grades_and_failure_types_apart_and_a_grade_decision_settles_grades_only() -> None:
    grades = _rated({"alice": ["relevant_unjudged", "grade_0", "grade_2"], "bob": ["grade_1", "grade_1", "grade_0"]})
    failures = [
        replace(a, id=(a.id or 0) + 1000, failure_type=code)
        for a, code in zip(grades, ["lexical_trap", "wrong_aspect", "lexical_trap"] * 2)
    ]  # both also named a failure type on each document: never mixed with their grades
    decisions = [_decision("d1", "grade_0", None, id=1)]  # d1: a grade, not a failure type
    rows = {r.vocabulary: r for r in agreement_report(grades + failures, decisions)}
    assert (rows["grade"].units, rows["grade"].agreed_before, rows["grade"].agreed_after) == (3, 1, 2)
    assert rows["grade"].adjudicated == 1
    assert rows["grade"].kappa_before == pytest.approx(
        cohen_kappa_score(["grade_1", "grade_0", "grade_2"], ["grade_1", "grade_1", "grade_0"])
    )
    assert (rows["failure type"].units, rows["failure type"].agreed_after, rows["failure type"].adjudicated) == (
        3,
        3,
        0,
    )


def test_the_report_is_per_task_counts_blind_labels_and_leaves_undefined_kappa_empty() -> None:
    labels = _rated({"alice": ["lexical_trap", "wrong_aspect"], "bob": ["lexical_trap", "lexical_trap"]})
    other = _rated({"alice": ["other", "other"], "bob": ["other", "other"]}, task="clinical-evidence")
    seen = [label(annotator="carol", doc_id="d0", failure_type="wrong_aspect", blind=False)]  # not blind
    rows = agreement_report(labels + other + seen, [], blind_only=True)
    assert [(r.task, r.annotators) for r in rows] == [
        ("clinical-case", ("alice", "bob")),
        ("clinical-evidence", ("alice", "bob")),
    ]
    assert math.isnan(rows[1].kappa_before)  # one category: undefined, never a made-up number
    assert list(csv.DictReader(io.StringIO(report_csv(rows))))[1]["kappa_before"] == ""
    counted = agreement_report(labels + seen, [])  # counting every label brings carol's pairs in
    assert len([r for r in counted if r.measure == "Cohen's kappa"]) == 3


def test_an_unsure_annotator_counts_in_no_agreement_before_or_after() -> None:
    """Issue 28 item 7: on a document where an annotator's latest judgement is unsure, they gave no grade
    (their earlier grade is withdrawn): agreement counts the other documents only, before and after the
    reviewer's decision on it."""
    both = {"alice": ["grade_1", "grade_0", "grade_2", "grade_2"], "bob": ["grade_1", "grade_0", "grade_1", "grade_0"]}
    grades = _rated(both)
    later = replace(grades[-1], id=999, failure_type="unsure", created_at="2025-01-02T00:00:00Z")  # bob, d3
    labels = [*grades, later]
    (pair,) = agreement(labels, "grade").pairs
    assert (pair.units, pair.agreed) == (3, 2)  # d0-d2; d3 left out, bob's grade 0 on it too
    (row,) = agreement_report(labels, [_decision("d3", "grade_2", None, id=1)])
    assert (row.units, row.adjudicated, row.agreed_before, row.agreed_after) == (3, 0, 2, 2)
    kappa = cohen_kappa_score(["grade_1", "grade_0", "grade_2"], ["grade_1", "grade_0", "grade_1"])
    assert row.kappa_before == pytest.approx(kappa) and row.kappa_after == pytest.approx(kappa)
