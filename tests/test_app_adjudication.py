"""The Adjudication page driven with AppTest: a reviewer settles a disagreement on a grade or on a failure
type; the labels stay as saved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import streamlit as st

from r2med_app.views.markup import md
from r2med_core import load_demo
from r2med_core.judging.adjudication import decide, history
from r2med_core.judging.annotations import Annotation, AnnotationStore
from r2med_core.judging.backup import backup_text

from .test_app import by_label, open_app

TASK = "clinical-evidence"


@pytest.fixture(autouse=True)
def _compute_without_a_click(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")


#: The team-qrels caption after one adjudicated grade on a pair the original did not judge.
ONE_ADDITION = "1 change(s) to the original qrels — 1 addition(s) (pairs it did not judge) and 0 correction(s)"


def _seed() -> tuple[str, str, list[Annotation]]:
    dataset = load_demo(TASK)
    qid = next(iter(dataset.queries))
    doc = next(d for d in dataset.corpus if d not in dataset.qrels.get(qid, {}))
    store = AnnotationStore()
    common = {"dataset": dataset.source, "task": TASK, "query_id": qid, "doc_id": doc, "system": "bm25", "blind": True}
    note = "*answers* <b>it</b>"
    made = [
        store.add(Annotation(**common, failure_type="relevant_unjudged", annotator="alice", note=note)),
        store.add(Annotation(**common, failure_type="grade_0", annotator="bob")),
    ]
    return qid, doc, made


def _submit(at):  # type: ignore[no-untyped-def]
    (button,) = [b for b in at.button if b.label.startswith("Record")]
    return button


def test_a_reviewer_adjudicates_a_disagreement_and_the_labels_stay() -> None:
    qid, doc, made = _seed()
    at = open_app("adjudication", task=TASK, systems=["bm25"])
    assert not at.exception and not at.error
    assert any(s.value.startswith("Waiting for a decision (1)") for s in at.subheader)
    assert any(md("*answers* <b>it</b>") in m.value for m in at.markdown)  # the note is escaped, never formatted

    at.text_input(key="w_annotator").input("alice").run()  # alice labelled it: she cannot decide it
    assert _submit(at).disabled

    at.text_input(key="w_annotator").input("Dr. Rev").run()
    assert not _submit(at).disabled
    _submit(at).click().run()  # no grade chosen: refused, nothing saved
    assert any("choose the adjudicated grade" in e.value for e in at.error)
    assert history(AnnotationStore()) == []
    assert not [s for s in at.selectbox if s.label == "Adjudicated failure type"]  # the grades differ, not types

    by_label(at.selectbox, "Adjudicated grade").set_value(1)
    (reason,) = [t for t in at.text_input if t.label == "Reason (optional)"]
    reason.input("It answers the question")
    _submit(at).click().run()
    assert not at.exception
    assert any("recorded" in s.value and md("Dr. Rev") in s.value for s in at.success), [e.value for e in at.error]
    (decision,) = history(AnnotationStore())
    assert (decision.failure_type, decision.grade, decision.reviewer, decision.reason) == (
        "grade_1",
        1,
        "Dr. Rev",
        "It answers the question",
    )
    assert (decision.query_id, decision.doc_id) == (qid, doc)
    assert AnnotationStore().list() == made  # the labels are exactly as saved
    assert any(s.value.startswith("Waiting for a decision (0)") for s in at.subheader)

    # The report shows kappa before and after on grades; the adjudicated addition is in the team's qrels.
    table = next(t.value for t in at.table if "kappa after" in t.value.columns)
    assert list(table["ratings"]) == ["grades"]
    assert list(table["adjudicated"]) == [1] and list(table["same rating after"]) == [1]
    assert any(md(ONE_ADDITION) in c.value for c in at.caption)
    rows = next(df.value for df in at.dataframe if "qrels" in df.value.columns).set_index("qrels")
    assert set(rows.index) == {"original qrels", "team qrels"}

    # A second reviewer overturns it from the history: the first decision is kept, superseded.
    at.text_input(key="w_annotator").input("Dr. Two").run()
    by_label(at.selectbox, "Adjudicated grade").set_value(0)
    _submit(at).click().run()
    assert not at.exception and any("superseding decision" in s.value for s in at.success)
    first, second = history(AnnotationStore())
    assert first == decision and (second.reviewer, second.supersedes, second.grade) == ("Dr. Two", first.id, 0)
    assert AnnotationStore().list() == made
    # The pair was never judged: grade 0 is still an addition (an explicit "not relevant" judgement).
    assert any(md("and 1 adjudicated grade(s).") in c.value for c in at.caption)
    assert any(md(ONE_ADDITION) in c.value for c in at.caption)


def test_a_disagreement_on_the_failure_type_is_decided_apart_from_the_grade() -> None:
    qid, doc, _ = _seed()
    common = {"dataset": "demo:" + TASK, "task": TASK, "query_id": qid, "doc_id": doc, "system": "bm25"}
    AnnotationStore().add(Annotation(**common, failure_type="lexical_trap", annotator="alice"))
    AnnotationStore().add(Annotation(**common, failure_type="wrong_aspect", annotator="bob"))
    at = open_app("adjudication", task=TASK, systems=["bm25"])
    assert any(s.value.startswith("Waiting for a decision (2)") for s in at.subheader)
    at.text_input(key="w_annotator").input("Dr. Rev").run()
    by_label(at.selectbox, "Adjudicated failure type").set_value("lexical_trap")
    (_, failure) = [b for b in at.button if b.label.startswith("Record")]
    failure.click().run()
    assert not at.exception
    (decision,) = history(AnnotationStore())
    assert (decision.failure_type, decision.grade, decision.vocabulary) == ("lexical_trap", None, "failure type")
    assert any(s.value.startswith("Waiting for a decision (1)") for s in at.subheader)  # the grades still differ


def test_the_annotations_page_sends_disagreements_to_adjudication() -> None:
    _seed()
    at = open_app("annotations", task=TASK, systems=["bm25"])
    assert not [b for b in at.button if b.label == "Keep this one"]
    assert any("wait on the Adjudication page" in str(link.proto.label) for link in at.get("page_link"))


def test_a_decision_made_meanwhile_is_not_overwritten_and_the_choice_is_kept() -> None:
    qid, doc, _ = _seed()
    at = open_app("adjudication", task=TASK, systems=["bm25"])
    at.text_input(key="w_annotator").input("Dr. Rev").run()
    by_label(at.selectbox, "Adjudicated grade").set_value(0)
    (reason,) = [t for t in at.text_input if t.label == "Reason (optional)"]
    reason.input("shares words only")
    other = decide(AnnotationStore(), ("demo:" + TASK, TASK, qid, doc), "relevant_unjudged", "Dr. Two", grade=2)
    _submit(at).click().run()  # Dr. Rev's page still shows the unit undecided
    assert not at.exception
    assert any("changed while you decided" in e.value and "Your choice is kept" in e.value for e in at.error)
    assert history(AnnotationStore()) == [other]  # Dr. Two's decision stands, nothing overwritten
    (reason,) = [t for t in at.text_input if t.label == "Reason (optional)"]
    assert (by_label(at.selectbox, "Adjudicated grade").value, reason.value) == (0, "shares words only")  # kept
    _submit(at).click().run()  # now it knowingly supersedes Dr. Two's decision
    assert [d.supersedes for d in history(AnnotationStore())] == [None, other.id]


def test_the_annotations_page_offers_a_full_backup_and_restores_it() -> None:
    _seed()
    at = open_app("annotations", task=TASK, systems=["bm25"])
    assert not at.exception
    assert any(b.proto.label == "Download a full backup" for b in at.get("download_button"))
    assert any("Restore a full backup" in u.proto.label for u in at.get("file_uploader"))


def test_the_read_only_demo_refuses_a_restore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_DEMO_MODE", "1")
    at = open_app("annotations", task=TASK, systems=["bm25"])
    assert not at.exception
    assert not any("Restore a full backup" in u.proto.label for u in at.get("file_uploader"))
    assert not [b for b in at.button if b.label == "Restore"]


def test_the_models_proposals_are_suggestions_that_never_open_or_reopen_a_unit() -> None:
    qid, doc, _ = _seed()
    store = AnnotationStore()
    decide(store, ("demo:" + TASK, TASK, qid, doc), "grade_0", "Dr. Rev")
    common = {"dataset": "demo:" + TASK, "task": TASK, "query_id": qid, "system": "bm25"}
    model = "proposed by judge-model"
    # After the decision the model proposes the decided document, and one a person judged not relevant.
    store.add(Annotation(**common, doc_id=doc, failure_type="relevant_unjudged", annotator=model, note="grade 3/3"))
    other = next(d for d in load_demo(TASK).corpus if d not in load_demo(TASK).qrels.get(qid, {}) and d != doc)
    store.add(Annotation(**common, doc_id=other, failure_type="not_relevant", annotator="carol"))
    store.add(Annotation(**common, doc_id=other, failure_type="relevant_unjudged", annotator=model))
    at = open_app("adjudication", task=TASK, systems=["bm25"])
    assert not at.exception
    assert any(s.value.startswith("Waiting for a decision (0)") for s in at.subheader)
    assert not any("New labels arrived" in w.value for w in at.warning)
    assert any(c.value.startswith("Suggestion, not a judgement") and md(model) in c.value for c in at.caption)
    table = next(t.value for t in at.table if "kappa after" in t.value.columns)
    assert list(table["annotators"]) == ["alice · bob"]  # the model is no annotator
    # On the Annotations page the proposal nobody disputes waits for a reviewer; nothing to adjudicate.
    at.switch_page("views/pages/annotations.py").run()
    assert any(md(model) in m.value for m in at.markdown)
    assert not any("wait on the Adjudication page" in str(link.proto.label) for link in at.get("page_link"))


def test_a_hostile_backup_is_reported_by_line_on_the_page_and_the_rest_restored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    source = AnnotationStore(tmp_path / "elsewhere" / "source.sqlite")
    good = source.add(Annotation(dataset="demo:" + TASK, task=TASK, query_id="q1", failure_type="other", annotator="a"))
    header, line = backup_text(source).splitlines()
    hostile = [
        json.dumps({**json.loads(line), "created_at": "9999-12-31T23:59:59-14:00"}),
        '{"kind": "label", "rank": ' + "9" * 5000 + "}",
    ]
    data = "\n".join([header, *hostile, line]).encode()

    class Upload:  # what st.file_uploader returns (AppTest cannot upload a file)
        name, size = "team backup.jsonl", len(data)

        def getvalue(self) -> bytes:
            return data

    real = st.file_uploader

    def uploader(*args: object, key: str | None = None, **kwargs: object) -> object:
        return Upload() if key == "w_ann_restore_upload" else real(*args, key=key, **kwargs)

    monkeypatch.setattr(st, "file_uploader", uploader)
    at = open_app("annotations", task=TASK, systems=["bm25"])
    (restore,) = [b for b in at.button if b.label == "Restore"]
    restore.click().run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert any(md("team backup.jsonl:2: created_at '9999-12-31T23:59:59-14:00' is out of range") in e for e in errors)
    assert any(md("team backup.jsonl:3: a number too long to read") in e for e in errors)
    assert not any(str(tmp_path) in e or "Traceback" in e for e in errors)
    assert any(md("1 labels") in s.value for s in at.success)
    assert [a.content() for a in AnnotationStore().list()] == [good.content()]
