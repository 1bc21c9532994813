"""Who sees what, page by page and download by download (AppTest, sign-in faked through ``st.user``):
signed out, signed in without a role, an annotator before and after judging a document, a reviewer, an
admin, and without sign-in (one trusted team)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from r2med_app.views.panels.labels import WHOLE_QUERY
from r2med_core import load_demo, run_system
from r2med_core.judging.annotations import Annotation, AnnotationStore
from r2med_core.judging.pooling import pool
from r2med_core.judging.queue import JudgingQueue

from .test_app import as_written, by_label, open_app, save_label
from .test_app_pooling import heading

TASK = "clinical-evidence"
#: st.login's settings: their presence switches sign-in on (the provider is never reached in AppTest).
AUTH = {
    "client_id": "r2med-test",
    "client_secret": "r2med-test-secret",
    "redirect_uri": "http://localhost:8501/oauth2callback",
    "cookie_secret": "a-test-cookie-secret-of-some-length",
    "server_metadata_url": "http://localhost:9/.well-known/openid-configuration",
}
ROLES = (
    '"ann@example.org" = "annotator"\n"rev@example.org" = "reviewer"\n'
    '"adm@example.org" = "admin"\n"nobody@example.org" = []\n"ann2@example.org" = "annotator"\n'
)
STORE_WIDE = {"All labels (CSV)", "All labels (JSONL)", "Download a full backup"}
NOTE_A, NOTE_B = "carol-note-on-a", "carol-note-on-b"


@pytest.fixture(autouse=True)
def _roles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")
    roles = tmp_path / "roles.toml"
    roles.write_text(ROLES, encoding="utf-8")
    monkeypatch.setenv("R2MED_ROLES_FILE", str(roles))


def _seed(ann_judged_a: bool = False) -> tuple[str, str, str]:
    """Carol and the LLM judge graded two unjudged documents A and B of one query, Dan graded B
    otherwise (a disagreement); with ``ann_judged_a``, the annotator Ann judged A."""
    dataset = load_demo(TASK)
    qid = next(iter(dataset.queries))
    doc_a, doc_b = [d for d in dataset.corpus if d not in dataset.qrels.get(qid, {})][:2]
    store = AnnotationStore()

    def add(doc: str, kind: str, who: str, note: str = "") -> None:
        common = {"dataset": dataset.source, "task": TASK, "query_id": qid, "system": "bm25"}
        store.add(Annotation(**common, doc_id=doc, failure_type=kind, annotator=who, note=note, blind=True))

    add(doc_a, "relevant_unjudged", "carol@example.org", NOTE_A)
    add(doc_a, "relevant_unjudged", "proposed by judge-model", "LLM judge grade 3/3")
    add(doc_b, "grade_2", "carol@example.org", NOTE_B)
    add(doc_b, "relevant_unjudged", "proposed by judge-model", "LLM judge grade 2/3")
    add(doc_b, "not_relevant", "dan@example.org")
    if ann_judged_a:
        add(doc_a, "not_relevant", "ann@example.org")
    return qid, doc_a, doc_b


def _open(page: str, email: str | None) -> AppTest:
    user = {"is_logged_in": True, "email": email} if email else {}
    return open_app(page, secrets={"auth": AUTH}, user=user, task=TASK, systems=["bm25"])


def _shown(at: AppTest) -> str:
    """Everything the page shows as text: its elements and its tables, cell by cell (markdown unescaped)."""
    parts = [str(getattr(e, "value", "")) for kind in ("markdown", "caption", "info", "warning", "subheader")
             for e in getattr(at, kind)]  # fmt: skip
    parts += [df.value.to_csv() for df in [*at.dataframe, *at.table]]
    return "\n".join(parts).replace("\\", "")


def _downloads(at: AppTest) -> set[str]:
    return {b.proto.label for b in at.get("download_button")}


def _label_table(at: AppTest):  # type: ignore[no-untyped-def]
    found = [df.value for df in at.dataframe if "label" in df.value.columns]
    return found[0] if found else None


# --------------------------------------------------------------------------- the Annotations page


@pytest.mark.parametrize("email", [None, "nobody@example.org"])
def test_annotations_signed_out_or_without_a_role_shows_no_label_and_offers_no_download(email: str | None) -> None:
    _seed()
    at = _open("annotations", email)
    assert not at.exception and not at.error
    shown = _shown(at)
    assert _label_table(at) is None
    for secret in (NOTE_A, NOTE_B, "carol@example.org", "dan@example.org", "judge-model", "LLM judge grade"):
        assert secret not in shown, secret
    assert _downloads(at) == set()  # no label export, no qrels additions, no backup
    assert "Agreement figures are for reviewers." in shown and "LLM relevance proposals" not in shown
    assert ("Sign in to see labels" if email is None else "no role") in shown


def test_annotations_an_annotator_sees_others_labels_on_a_document_only_after_judging_it() -> None:
    qid, doc_a, _ = _seed()
    at = _open("annotations", "ann@example.org")
    assert not at.exception and _label_table(at) is None
    assert NOTE_A not in _shown(at) and "judge-model" not in _shown(at)

    AnnotationStore().add(
        Annotation(dataset=load_demo(TASK).source, task=TASK, query_id=qid, doc_id=doc_a,
                   failure_type="not_relevant", annotator="ann@example.org")
    )  # fmt: skip
    at.run()
    table = _label_table(at)
    assert sorted(zip(table["document"], table["annotator"])) == [
        (doc_a, "ann@example.org"),
        (doc_a, "carol@example.org"),
        (doc_a, "proposed by judge-model"),
    ]
    shown = _shown(at)
    assert NOTE_A in shown and NOTE_B not in shown and "dan@example.org" not in shown  # B stays hidden
    assert _downloads(at) == set() and "Agreement figures are for reviewers." in shown
    assert "LLM relevance proposals" not in shown


def test_annotations_a_reviewer_sees_every_label_but_only_an_admin_downloads_the_store() -> None:
    _seed()
    rev = _open("annotations", "rev@example.org")
    assert not rev.exception
    assert len(_label_table(rev)) == 5 and NOTE_B in _shown(rev)
    assert _downloads(rev) == {f"Team qrels for {TASK} (TREC)"}
    assert "Agreement between annotators" in _shown(rev) and "Agreement figures are for reviewers." not in _shown(rev)

    adm = _open("annotations", "adm@example.org")
    assert len(_label_table(adm)) == 5
    assert _downloads(adm) == STORE_WIDE | {f"Team qrels for {TASK} (TREC)"}


def test_annotations_without_sign_in_the_trusted_team_sees_and_downloads_everything() -> None:
    _seed()
    at = open_app("annotations", task=TASK, systems=["bm25"])
    assert len(_label_table(at)) == 5
    assert _downloads(at) == STORE_WIDE | {f"Team qrels for {TASK} (TREC)"}


# --------------------------------------------------------------------------- the Adjudication page


@pytest.mark.parametrize("email", [None, "nobody@example.org", "ann@example.org"])
def test_adjudication_is_review_work_nobody_else_sees(email: str | None) -> None:
    _seed(ann_judged_a=True)  # Ann even judged A, where she and Carol disagree: still the reviewers' work
    at = _open("adjudication", email)
    assert not at.exception and not at.error
    shown = _shown(at)
    assert "Waiting for a decision" not in shown and not at.dataframe
    for secret in (NOTE_A, NOTE_B, "carol@example.org", "dan@example.org"):
        assert secret not in shown, secret
    assert _downloads(at) == set()


def test_adjudication_reviewers_see_the_queue_and_only_an_admin_downloads_the_raw_labels() -> None:
    _seed()
    rev = _open("adjudication", "rev@example.org")
    assert not rev.exception
    assert any(s.value.startswith("Waiting for a decision (") for s in rev.subheader)
    assert NOTE_B in _shown(rev)
    reviewer_downloads = {
        f"Team qrels changes for {TASK} (TREC)",
        "Team qrels changes (CSV)",
        "Every decision with history (CSV)",
        "Agreement report (CSV)",
    }
    assert _downloads(rev) == reviewer_downloads
    assert _downloads(_open("adjudication", "adm@example.org")) == reviewer_downloads | {"Raw labels (CSV)"}


@pytest.mark.parametrize("email", [None, "nobody@example.org", "ann@example.org", "rev@example.org"])
def test_hard_items_are_ranked_for_reviewers_only(email: str | None) -> None:
    """Issue 28 item 7: the Adjudication page ranks the documents annotators took long on and disagreed
    about, says what "hard" means, and shows it to reviewers only (``Sight``)."""
    dataset = load_demo(TASK)
    qid = next(iter(dataset.queries))
    quick, slow = [d for d in dataset.corpus if d not in dataset.qrels.get(qid, {})][:2]
    store = AnnotationStore()
    for doc, seconds in ((quick, 4), (slow, 90)):
        for who, code in (("carol@example.org", "grade_2"), ("dan@example.org", "grade_0")):
            common = {"dataset": dataset.source, "task": TASK, "query_id": qid, "system": "pool@10", "blind": True}
            store.add(Annotation(**common, doc_id=doc, failure_type=code, annotator=who, time_ms=seconds * 1000))
    at = _open("adjudication", email)
    assert not at.exception and not at.error
    shown = _shown(at)
    if email != "rev@example.org":
        assert "Hard items" not in shown and slow not in shown
        return
    assert any(s.value == "Hard items (2)" for s in at.subheader)
    assert "took annotators longest and on which they disagreed" in shown
    (table,) = [as_written(t.value) for t in at.table if "hardness" in t.value.columns]
    assert list(table["document"]) == [slow, quick]  # the longest read of a disagreement first
    assert list(table["median time (s)"]) == ["90.0", "4.0"]


# --------------------------------------------------------------------------- the Query explorer


def test_explorer_shows_a_querys_labels_to_the_team_and_not_to_someone_signed_out() -> None:
    qid, _, _ = _seed()
    params = {"task": TASK, "systems": ["bm25"], "system": "bm25", "q": qid}
    team = open_app("explorer", **params)
    assert NOTE_A in _shown(team)  # the query's labels, under the documents
    signed_out = open_app("explorer", secrets={"auth": AUTH}, user={}, **params)
    assert not signed_out.exception
    assert NOTE_A not in _shown(signed_out) and "carol@example.org" not in _shown(signed_out)
    assert not any("🏷" in e.label for e in signed_out.expander)  # no label tags next to the documents


# --------------------------------------------------------------------------- blind per judging unit


def test_pooled_documents_are_each_judged_blind_and_agreement_counts_every_blind_judgement() -> None:
    """Two annotators grade three pooled documents of one query on the Judging page: each judgement is
    recorded blind (not only each one's first on the query), so the reviewer's agreement counts all three."""
    dataset = load_demo(TASK)
    runs = {name: run_system(dataset, name) for name in ("bm25", "bm25s")}
    queue = JudgingQueue(AnnotationStore())
    queue.send(dataset.source, dataset.name, pool(runs, dataset.qrels, 10), "rev@example.org")
    queued = queue.items(dataset.source, dataset.name)[:3]
    assert len({e.query_id for e in queued}) == 1  # several documents of one query: the case that matters
    for email, verdict in (("ann@example.org", 0), ("ann2@example.org", 1)):
        at = _open("judging", email)
        for entry in queued:
            assert heading(entry) in " ".join(m.value for m in at.markdown)
            by_label(at.selectbox, "Relevance grade").set_value(verdict)
            save_label(at)
            assert not at.exception and not at.error, [e.value for e in at.error]
    labels = AnnotationStore().list()
    assert [(a.doc_id, a.blind) for a in labels] == [(e.doc_id, True) for e in queued] * 2
    rev = _open("adjudication", "rev@example.org")
    table = next(t.value for t in rev.table if "kappa before" in t.value.columns)
    assert list(table["items"]) == [3] and list(table["same rating before"]) == [0]

    # Progress: an annotator sees their own, a reviewer everyone's and the team's per task.
    mine = _open("judging", "ann@example.org")
    people = [df.value for df in mine.dataframe if "waiting" in df.value.columns]
    assert [p["annotator"].tolist() for p in people] == [["ann@example.org"]]
    assert not any("queued" in df.value.columns for df in mine.dataframe) and "ann2@example.org" not in _shown(mine)
    rev.switch_page("views/pages/judging.py").run()
    (everyone,) = [df.value for df in rev.dataframe if "waiting" in df.value.columns]
    assert everyone[["annotator", "judged"]].values.tolist() == [["ann2@example.org", 3], ["ann@example.org", 3]]
    (team,) = [df.value for df in rev.dataframe if "queued" in df.value.columns]
    assert team[["judged by 2", "judged by fewer"]].values.tolist() == [[3, 0]]
    assert not _shown(_open("judging", "nobody@example.org")).count("ann@example.org")  # no role: nobody's


def test_the_explorer_stays_blind_after_a_document_label_until_the_whole_query_is_labelled() -> None:
    dataset = load_demo(TASK)
    qid = next(iter(dataset.queries))
    first, second = [d for d, _ in run_system(dataset, "bm25").top(qid, 2)]
    user = {"is_logged_in": True, "email": "ann@example.org"}
    at = open_app("explorer", secrets={"auth": AUTH}, user=user, task=TASK, systems=["bm25"], system="bm25", q=qid)

    def label(doc: str, kind: str) -> None:
        by_label(at.selectbox, "Failure type").set_value(kind)
        by_label(at.selectbox, "Document").set_value(doc)
        save_label(at)
        assert not at.exception and not at.error, [e.value for e in at.error]

    def blind() -> bool:
        return any("Blind first." in i.value for i in at.info)

    assert blind() and not any(s.value.startswith("Gold documents") for s in at.subheader)
    label(first, "lexical_trap")
    assert blind() and not any(s.value.startswith("Gold documents") for s in at.subheader)  # one document only
    label(WHOLE_QUERY, "missing_reasoning_step")
    assert not blind() and any(s.value.startswith("Gold documents") for s in at.subheader)
    label(second, "wrong_aspect")  # after the whole query's judgements were shown: not blind
    assert [(a.doc_id, a.blind) for a in AnnotationStore().list()] == [(first, True), (None, True), (second, False)]
