"""The team's judgements (``r2med_core.judging.team``): one definition of the team's qrels — the original, then
agreed grades and accepted proposals, then adjudicated grades — on SQLite and PostgreSQL, the review
queue that settles a pair once for every identical proposal, and the TREC file it writes."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from r2med_core.data import DataError, _read_qrels_trec, load_r2med_dir
from r2med_core.evaluation import evaluate
from r2med_core.judging.adjudication import adjudication_queue, decide, history
from r2med_core.judging.annotations import Annotation, AnnotationStore
from r2med_core.judging.list_judging import GradeEvent, SaveOnce, now_ms, save_grades
from r2med_core.judging.team import qrels_text, read_team_qrels, review_queue, team_qrels
from r2med_core.runs import Run

from .test_annotations import DATASET, TASK

Target = str | Path
ORIGINAL = {"q1": {"gold": 2, "weak": 1, "zero": 0}, "q2": {"g2": 1}}


def _add(store: AnnotationStore, who: str, doc: str, code: str, query: str = "q1", **fields: object) -> Annotation:
    return store.add(
        Annotation(dataset=DATASET, task=TASK, query_id=query, doc_id=doc, failure_type=code, annotator=who, **fields)
    )


def _team(store: AnnotationStore, original: dict[str, dict[str, int]] = ORIGINAL):  # type: ignore[no-untyped-def]
    return team_qrels(original, store.list(), history(store), dataset=DATASET, task=TASK)


def test_the_teams_qrels_are_the_original_then_agreed_and_accepted_then_adjudicated(
    new_target: Callable[[str], Target],
) -> None:
    store = AnnotationStore(new_target("team"))
    _add(store, "alice", "agreed", "relevant_unjudged")  # the Judging page, as older versions stored it …
    _add(store, "bob", "agreed", "grade_1")  # … and Judge a list: the same grade, agreed without a review
    _add(store, "alice", "weak", "grade_2")
    _add(store, "bob", "weak", "grade_2")  # two people agree on a judged pair: the team's grade
    _add(store, "carol", "proposal", "grade_2")  # one person's grade above 0: waits for a reviewer
    accepted = _add(store, "dan", "accepted", "grade_1")
    store.review(accepted.id, True, "rev")  # an accepted addition
    _add(store, "dan", "looked", "grade_0")  # one person's grade 0 on a hole: counted, no review
    _add(store, "dan", "zero", "grade_2")  # … a lone grade above 0 on a judged pair proposes nothing by itself
    _add(store, "alice", "disputed", "grade_1")
    _add(store, "bob", "disputed", "grade_0")  # a disagreement nobody decided: not used
    _add(store, "alice", "gold", "grade_0")
    _add(store, "bob", "gold", "grade_2")
    decide(store, (DATASET, TASK, "q1", "gold"), "grade_0", "rev", reason="does not support the answer")
    _add(store, "alice", "x", "grade_1", query="q3")  # an unjudged query joins with a relevant grade …
    _add(store, "bob", "x", "grade_1", query="q3")
    _add(store, "carol", "y", "grade_0", query="q4")  # … never with grade 0 only (it would score 0)
    _add(store, "alice", "agreed", "lexical_trap")  # a failure type later on the same document changes nothing
    other = Annotation(dataset=DATASET, task="another-task", query_id="q1", doc_id="o", failure_type="grade_2",
                       annotator="x", accepted=True, reviewer="rev")  # fmt: skip
    store.add(other)  # another task's: never this one's

    team = _team(store)
    assert team.qrels == {
        "q1": {"gold": 0, "weak": 2, "zero": 0, "agreed": 1, "accepted": 1, "looked": 0},
        "q2": {"g2": 1},
        "q3": {"x": 1},
    }
    assert [(c.doc_id, c.original, c.grade, c.source, c.kind) for c in team.changes] == [
        ("accepted", None, 1, "accepted", "addition"),
        ("agreed", None, 1, "agreed", "addition"),
        ("gold", 2, 0, "adjudicated", "correction"),
        ("looked", None, 0, "not relevant", "addition"),
        ("weak", 1, 2, "agreed", "correction"),
        ("x", None, 1, "agreed", "addition"),
    ]
    assert (team.proposed, team.disputed) == (2, 1)  # carol's and dan's on "zero"; alice and bob on "disputed"
    assert team.caption() == (
        "6 change(s) to the original qrels — 4 addition(s) (pairs it did not judge) and 2 correction(s) (pairs "
        "it graded otherwise) — coming from 3 agreed grade(s), 1 accepted proposal(s), 1 judged not relevant by "
        "one annotator and 1 adjudicated grade(s). Not used: 2 proposal(s) awaiting review, 1 disagreement(s) or "
        "unsure judgement(s) awaiting adjudication."
    )
    assert ORIGINAL["q1"] == {"gold": 2, "weak": 1, "zero": 0}  # nothing given is changed
    # The store's reading is the same function on the same labels and decisions.
    dataset = SimpleNamespace(source=DATASET, name=TASK, qrels=ORIGINAL)
    assert read_team_qrels(store, dataset) == team  # type: ignore[arg-type]


def test_agreeing_independent_grades_enter_the_team_qrels_without_a_review(tmp_path: Path) -> None:
    """A grade given on the Judging page and the same grade given on Judge a list agree: no review, no
    adjudication, and the team's qrels hold it."""
    store = AnnotationStore(tmp_path / "labels.sqlite")
    _add(store, "alice", "d1", "grade_1")  # the Judging page's form writes the grade …
    run = Run("bm25", {"q1": [("d1", 2.0), ("d2", 1.0)]})
    save_grades(store, SaveOnce(), [GradeEvent("e1", "d1", 1, now_ms())], dataset=DATASET, task=TASK,
                query_id="q1", ranking=run, annotator="bob")  # fmt: skip  # … and Judge a list the same
    assert adjudication_queue(store.list(), []) == []
    assert review_queue(store.list(), []) == []
    team = _team(store)
    assert team.qrels["q1"]["d1"] == 1 and [(c.doc_id, c.source) for c in team.changes] == [("d1", "agreed")]
    # One person under two spellings of their name is not two independent annotators: still a proposal.
    _add(store, "Carol", "d2", "grade_2")
    _add(store, " carol ", "d2", "grade_2")
    assert "d2" not in _team(store).qrels["q1"]
    assert [item.pair[3] for item in review_queue(store.list(), [])] == ["d2"]


def test_accepting_one_proposal_settles_the_pair_for_every_identical_proposal(tmp_path: Path) -> None:
    store = AnnotationStore(tmp_path / "labels.sqlite")
    model = "proposed by judge-model"
    person = _add(store, "alice", "d1", "grade_1")
    suggested = _add(store, model, "d1", "relevant_unjudged", note="LLM judge grade 2/3")
    _add(store, "alice", "d2", "grade_2")
    _add(store, model, "d2", "relevant_unjudged")  # proposes another grade for d2
    rejected = _add(store, "bob", "d3", "grade_1")
    _add(store, model, "d3", "relevant_unjudged")

    queue = review_queue(store.list(), [])
    assert [(item.pair[3], item.annotators) for item in queue] == [
        ("d1", ("alice", model)),
        ("d2", ("alice", model)),
        ("d3", ("bob", model)),
    ]  # one item per document, however many proposed it
    assert queue[0].by_grade() == {1: (person, suggested)}  # identical: one review
    assert list(queue[1].by_grade()) == [2, 1]  # different grades: the reviewer picks one

    store.review(person.id, True, "rev")  # accepting one settles the pair: the model's identical one too
    store.review(queue[1].by_grade()[2][0].id, True, "rev")  # accepting grade 2 settles d2 with it
    store.review(rejected.id, False, "rev")  # a rejected grade takes the identical proposals with it
    assert review_queue(store.list(), []) == []
    team = _team(store, {"q1": {"gold": 2}})
    assert [(c.doc_id, c.grade, c.source) for c in team.changes] == [("d1", 1, "accepted"), ("d2", 2, "accepted")]
    assert team.changes[0].accepted == store.get(person.id)
    # A pair the task judges relevant is no proposal (with the task's qrels known), nor one with a decision.
    _add(store, "carol", "gold", "grade_1")
    _add(store, "carol", "d4", "grade_1")
    _add(store, "dave", "d4", "grade_0")
    _add(store, "erin", "d4", "grade_2")
    decide(store, (DATASET, TASK, "q1", "d4"), "grade_1", "rev")
    judged = {(DATASET, TASK): {"q1": {"gold": 2}}}
    assert [item.pair[3] for item in review_queue(store.list(), history(store))] == ["gold"]
    assert review_queue(store.list(), history(store), qrels=judged) == []


def test_a_lone_grade_never_lowers_a_judgement_and_an_accepted_proposal_only_adds(tmp_path: Path) -> None:
    store = AnnotationStore(tmp_path / "labels.sqlite")
    _add(store, "alice", "gold", "grade_0")  # one person's 0 on a gold document: a judgement, not a change
    legacy = _add(store, "bob", "weak", "relevant_unjudged", accepted=True, reviewer="legacy")  # accepted, on gold
    assert legacy.status == "accepted"
    _add(store, "carol", "zero", "grade_1", accepted=True, reviewer="rev")  # judged 0: an accepted grade raises it
    team = _team(store)
    assert team.qrels["q1"] == {"gold": 2, "weak": 1, "zero": 1}
    assert [(c.doc_id, c.source) for c in team.changes] == [("zero", "accepted")]


def test_the_team_qrels_file_reads_back_as_the_tasks_qrels(tiny_r2med: Path, tmp_path: Path) -> None:
    dataset = load_r2med_dir(tiny_r2med)
    store = AnnotationStore(tmp_path / "labels.sqlite")
    first = _add(store, "alice", "asthma_0", "grade_1", query="q2")  # the run's unjudged top document
    store.review(first.id, True, "rev")
    _add(store, "bob", "gout_0", "grade_2", query="q2")  # proposed, never reviewed
    team = team_qrels(dataset.qrels, store.list(), [], dataset=DATASET, task=TASK)
    assert team.qrels == {**dataset.qrels, "q2": {"mi_0": 1, "asthma_0": 1}}

    folder = tmp_path / "team"
    folder.mkdir()
    (folder / "qrels.txt").write_text(qrels_text(team.qrels))
    read_back: dict[str, dict[str, int]] = {}
    for _, qid, did, grade in _read_qrels_trec(folder / "qrels.txt"):
        read_back.setdefault(qid, {})[did] = grade
    assert read_back == team.qrels
    for name in ("corpus.jsonl", "query.jsonl"):
        shutil.copy(tiny_r2med / name, folder / name)
    assert load_r2med_dir(folder).qrels == team.qrels  # a valid qrels.txt of the task

    run = Run("bm25", {"q1": [("dka_0", 3.0), ("dka_1", 2.0)], "q2": [("asthma_0", 3.0), ("mi_0", 2.0)]})
    original, judged = evaluate(run, dataset.qrels), evaluate(run, team.qrels)
    assert original.per_query.loc["q2", "mrr"] == pytest.approx(0.5)
    assert judged.per_query.loc["q2", "mrr"] == pytest.approx(1.0)
    assert dataset.qrels["q2"] == {"mi_0": 1}  # the dataset's own qrels are untouched
    with pytest.raises(DataError, match="an id a TREC line cannot hold"):
        qrels_text({"q1": {"a doc": 1}}, "team qrels")


def test_unsure_is_no_grade_it_waits_for_a_reviewer_who_gives_the_grade(new_target: Callable[[str], Target]) -> None:
    """Issue 28 item 7: "unsure" (the Judging page's ``u``) never becomes a team judgement — not beside
    agreeing grades, not as a lone 0 — it withdraws its annotator's earlier grade, and the pair waits for
    adjudication until a reviewer's decision gives it its grade."""
    store = AnnotationStore(new_target("unsure"))
    _add(store, "alice", "u1", "grade_1")
    _add(store, "bob", "u1", "grade_1")
    _add(store, "carol", "u1", "unsure")  # two agree, a third is unsure: not agreed
    _add(store, "dan", "u2", "grade_2")
    _add(store, "dan", "u2", "unsure")  # dan's later unsure withdraws his grade: no proposal left
    _add(store, "erin", "u3", "unsure")
    _add(store, "fay", "u3", "unsure")  # two unsure "agree" on nothing: no grade 0 for the team
    team = _team(store)
    assert team.qrels == ORIGINAL and team.changes == ()
    assert (team.proposed, team.disputed) == (0, 3)
    assert review_queue(store.list(), []) == []
    waiting = adjudication_queue(store.list(), [])
    assert [(i.unit[3], i.unsure, i.vocabulary) for i in waiting] == [("u1", True, "grade"), ("u2", True, "grade"),
                                                                        ("u3", True, "grade")]  # fmt: skip
    decide(store, (DATASET, TASK, "q1", "u2"), "grade_2", "rev", reason="answers the question")
    team = _team(store)
    assert [(c.doc_id, c.grade, c.source) for c in team.changes] == [("u2", 2, "adjudicated")]
    assert [i.unit[3] for i in adjudication_queue(store.list(), history(store))] == ["u1", "u3"]
    with pytest.raises(ValueError, match="'unsure' is what it settles"):
        decide(store, (DATASET, TASK, "q1", "u1"), "unsure", "rev")


def test_a_later_unsure_takes_out_an_automatic_team_grade_but_not_a_reviewers(tmp_path: Path) -> None:
    """Someone unsure of a document after the team settled it: an automatic settlement (two agreeing grades,
    one person's grade 0 on a hole) no longer holds and the pair waits for adjudication; a reviewer's
    (an accepted proposal, an adjudicated grade) is final and stays, not counted as waiting."""
    store = AnnotationStore(tmp_path / "final.sqlite")
    _add(store, "alice", "agreed", "grade_1")
    _add(store, "bob", "agreed", "grade_1")
    _add(store, "dan", "looked", "grade_0")
    store.review(_add(store, "fay", "accepted", "grade_2").id, True, "rev")
    _add(store, "alice", "decided", "grade_1")
    _add(store, "bob", "decided", "grade_0")
    decide(store, (DATASET, TASK, "q1", "decided"), "grade_2", "rev", reason="answers it")
    settled = {"agreed": (1, "agreed"), "looked": (0, "not relevant"), "accepted": (2, "accepted"),
               "decided": (2, "adjudicated")}  # fmt: skip
    team = _team(store)
    assert {c.doc_id: (c.grade, c.source) for c in team.changes} == settled and team.disputed == 0

    for doc in settled:
        _add(store, "gus", doc, "unsure")
    team = _team(store)
    assert {c.doc_id: (c.grade, c.source) for c in team.changes} == {
        "accepted": (2, "accepted"), "decided": (2, "adjudicated"),
    }  # fmt: skip
    assert team.disputed == 2  # the agreed and the not relevant pairs: not used, waiting for a reviewer
    assert "2 disagreement(s) or unsure judgement(s) awaiting adjudication" in team.caption()
    waiting = {i.unit[3]: i for i in adjudication_queue(store.list(), history(store))}
    assert {"agreed", "looked"} <= set(waiting) and waiting["decided"].reopened  # the reviewer sees the doubt
