"""Labels in the explorer and on the Judging page: a relevance grade and a failure type, and the tags
shown next to labelled documents."""

from __future__ import annotations

from typing import Any

import streamlit as st

from r2med_app.views import annotation_db, naming, serving
from r2med_app.views.markup import md
from r2med_app.views.panels import auth
from r2med_app.views.state import bound, show_flash, view, widget_key
from r2med_core import Dataset
from r2med_core.judging.annotations import (
    GRADES,
    TAXONOMY,
    UNSURE,
    Annotation,
    AnnotationStoreError,
    failure_types,
    grade_code,
)
from r2med_core.judging.identity import PermissionDenied, authorize
from r2med_core.judging.list_judging import spent_ms
from r2med_core.reporting.review_tables import review_status
from r2med_core.runs import Run

WHOLE_QUERY = "(the whole query)"
TEAM_RULE = (
    "A grade counts for the team once another annotator gives the same grade or a reviewer accepts it; "
    "grades that differ are adjudicated."
)


def grade_label(grade: int | str) -> str:
    """A grade as every page shows it ("Grade 1: relevant"), and ``UNSURE`` as "Unsure"."""
    return TAXONOMY[UNSURE if grade == UNSURE else grade_code(int(grade))].label


def label_form(
    dataset: Dataset,
    query_id: str,
    ranking: Run,
    documents: list[str],
    within: str,
    *,
    grade_only: bool = False,
    ask_name: bool = True,
    shown_at: int | None = None,
    shown_as: str | None = None,
) -> None:
    """Judge a document's relevance with a grade 0-2, and say why a system failed on it (or on the whole
    query) with a failure type: one label each, both in one save. ``grade_only`` (the Judging page): a
    grade for ``documents[0]``, or unsure, and nothing else. ``ask_name`` False: the page asks the typed
    name itself (outside the form, so its keyboard grades have it too). ``shown_at``: when the page sent
    the document (``list_judging.now_ms``); the grade records the time from then to the Save. ``shown_as``:
    what the page calls ``documents[0]`` in place of its id (a blind page's ``queue.blind_name``), in the
    messages too; the label is stored against the id.

    The widgets are keyed by ``within`` (dataset and query), so a choice made on one query can never be
    saved on another. The label records ``ranking`` (the exact system shown: rewrite and reranker
    included) and the document's rank in it. Nothing typed is lost: a failed save keeps the form as it
    was and says why; the annotator's name is asked once and kept for the session. The label is recorded
    blind when its (query, document) — or whole query — was still hidden from the person
    (``r2med_core.judging.visibility``).
    """
    if serving.read_only():
        st.caption("Labelling is off in this read-only demo.")
        return
    store = annotation_db.annotation_store()
    if store is None:
        return
    show_flash()
    keys = {name: widget_key(f"label_{name}", within) for name in ("grade", "type", "doc", "note")}
    with st.form(widget_key("label_form", within), clear_on_submit=False):
        st.markdown("**Grade this document**" if grade_only else "**Grade a document, or label a failure**")
        c1, c2, c3 = st.columns(3)
        c1.selectbox(
            "Relevance grade",
            [*GRADES, UNSURE] if grade_only else GRADES,
            index=None,
            placeholder="Not graded",
            format_func=grade_label,
            help="How well the document answers the query: the same grades on every page"
            + (" (Unsure: no grade; a reviewer decides it)." if grade_only else "."),
            key=keys["grade"],
        )
        if not grade_only:
            c2.selectbox(
                "Failure type",
                failure_types(),
                index=None,
                placeholder="No failure type",
                format_func=lambda c: TAXONOMY[c].label,
                help=_taxonomy_help(),
                key=keys["type"],
            )
            c3.selectbox("Document", [WHOLE_QUERY, *documents], key=keys["doc"])
        st.text_area("Note", placeholder="Why? (free text)", key=keys["note"])
        acting = auth.acting()
        if not acting.signed_in_mode:
            if ask_name:
                st.text_input("Your name", key=bound("annotator"), placeholder="asked once, kept for this session")
        elif acting.person is not None:
            st.caption(f"Saved as **{md(acting.person.name)}** (signed in).")
        else:
            st.caption("Sign in (in the sidebar) to save labels.")
        shown = "" if grade_only else f"Recorded with the ranking shown: {md(naming.system_label(ranking.name))}. "
        st.caption(shown + TEAM_RULE)
        fixed = documents[0] if grade_only else None
        st.form_submit_button(
            "Save label", on_click=_save, args=(dataset, query_id, ranking, keys, fixed, shown_at, shown_as)
        )


def _save(
    dataset: Dataset,
    query_id: str,
    ranking: Run,
    keys: dict[str, str],
    fixed: str | None,
    shown_at: int | None,
    shown_as: str | None = None,
) -> None:
    """The form's submit callback (it runs before the page): validate, store, and say what happened.
    ``fixed``: the only document the form grades (the Judging page); ``shown_at``: when it was sent;
    ``shown_as``: what the page calls it."""
    v = view()
    values: dict[str, Any] = {name: st.session_state.get(key) for name, key in keys.items()}
    acting = auth.acting()
    if not acting.signed_in_mode:
        v.annotator = str(st.session_state.get(widget_key("annotator")) or "").strip()
        acting = auth.acting()
    grade, code, target = values["grade"], values["type"], values["doc"]
    doc_id = fixed if fixed is not None else None if target in (None, WHOLE_QUERY) else str(target)
    if grade is None and code is None:
        v.flash_error = "Not saved: choose a grade" + ("" if fixed else " or a failure type") + ". Your note is kept."
        return
    if grade is not None and doc_id is None:
        v.flash_error = "Not saved: a grade judges a document; choose the document. Your note is kept."
        return
    if acting.error:
        v.flash_error = f"Not saved: sign-in is misconfigured ({md(acting.error)}). Your note is kept."
        return
    if acting.person is None and not acting.signed_in_mode:
        v.flash_error = "Not saved: type your name under 'Your name' (asked once per session). Your note is kept."
        return
    try:
        person = authorize(acting.person, "label", config=acting.config)
    except PermissionDenied as err:
        v.flash_error = f"Not saved: {md(err)}. Your note is kept."
        return
    store = annotation_db.annotation_store()
    if store is None:
        v.flash_error = "Not saved: the annotation store is unavailable. Your note is kept."
        return
    # Blind when the unit was still hidden from them (read now: another tab may have saved meanwhile).
    earlier = store.list(dataset=dataset.source, task=dataset.name, query_id=query_id)
    blind = acting.sight.hidden(earlier, (dataset.source, dataset.name, query_id, doc_id))
    judged = None if grade is None else UNSURE if grade == UNSURE else grade_code(grade)
    spent = None if shown_at is None else spent_ms(shown_at)  # the judgement's time, as a key's
    codes = [c for c in (judged, code) if c is not None]
    saved = []
    try:
        for made in codes:
            label = Annotation(
                dataset=dataset.source,
                task=dataset.name,
                query_id=query_id,
                doc_id=doc_id,
                system=ranking.name,
                rank=ranking.rank_of(query_id, doc_id) if doc_id is not None else None,
                failure_type=made,
                note=str(values["note"] or ""),
                annotator=person.name,
                blind=blind,
                time_ms=spent if made == judged else None,
            )
            store.add(label)
            saved.append(TAXONOMY[made].label)
    except (ValueError, PermissionDenied, AnnotationStoreError) as err:
        done = f" ({' and '.join(saved)} was saved)" if saved else ""
        v.flash_error = f"Not saved: {md(err)}{done}. Your note is kept."
        return
    for name in ("note", "grade", "type"):
        st.session_state[keys[name]] = "" if name == "note" else None
    named = shown_as if shown_as is not None else doc_id
    v.flash = f"Saved: {' and '.join(saved)}" + ("" if named is None else f" on {md(named)}")


def _taxonomy_help() -> str:
    return "\n".join(f"- **{t.label}**: {t.description}" for t in TAXONOMY.values())


def blind_queries(dataset: Dataset, acting: auth.Acting, query_ids: list[str]) -> frozenset[str]:
    """The queries still hidden from this person as a whole (they label blind and have not labelled the
    whole query yet: ``r2med_core.judging.visibility``)."""
    if not acting.sight.blind:
        return frozenset()  # no blind view for them at all: skip reading the store
    store = annotation_db.annotation_store()
    stored = [] if store is None else store.list(dataset=dataset.source, task=dataset.name)
    return acting.sight.hidden_queries(stored, dataset.source, dataset.name, query_ids)


def labels_for(dataset: Dataset, query_id: str) -> list[Annotation]:
    store = annotation_db.annotation_store()
    return [] if store is None else store.list(dataset=dataset.source, task=dataset.name, query_id=query_id)


def status_of(annotation: Annotation) -> str:
    """The review state as shown: proposed, accepted (by whom) or rejected (by whom)."""
    return review_status(annotation.status, annotation.reviewer)


def label_tags(labels: list[Annotation], doc_id: str | None) -> str:
    """A short "🏷 grade or type (accepted / rejected, once reviewed)" summary of the labels on one
    document (or the query itself)."""
    mine = [a for a in labels if a.doc_id == doc_id]
    return " · ".join(
        f"🏷 {TAXONOMY[a.failure_type].label if a.failure_type in TAXONOMY else a.failure_type}"
        + (f" ({a.status})" if a.reviewer else "")
        for a in mine
    )
