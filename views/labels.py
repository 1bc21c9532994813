"""Failure labels in the explorer: the form, and the tags shown next to labelled documents."""

from __future__ import annotations

from typing import Any

import streamlit as st

from r2med_core import Dataset
from r2med_core.annotations import GRADE_CODES, TAXONOMY, Annotation, AnnotationStoreError, check_unjudged
from r2med_core.identity import PermissionDenied, authorize
from r2med_core.runs import Run
from views import auth, ui
from views.state import bound, show_flash, view, widget_key

WHOLE_QUERY = "(the whole query)"


def label_form(dataset: Dataset, query_id: str, ranking: Run, documents: list[str], within: str) -> None:
    """Label this query, or one of its documents, with a failure type.

    The widgets are keyed by ``within`` (dataset and query), so a choice made on one query can never be
    saved on another. The label records ``ranking`` (the exact system shown: rewrite and reranker
    included) and the document's rank in it. Nothing typed is lost: a failed save keeps the form as it
    was and says why; the annotator's name is asked once and kept for the session. The label is recorded
    blind when its (query, document) — or whole query — was still hidden from the person
    (``r2med_core.visibility``).
    """
    if ui.read_only():
        st.caption("Labelling is off in this read-only demo.")
        return
    store = ui.annotation_store()
    if store is None:
        return
    show_flash()
    keys = {name: widget_key(f"label_{name}", within) for name in ("type", "doc", "note")}
    with st.form(widget_key("label_form", within), clear_on_submit=False):
        st.markdown("**Label a failure**")
        c1, c2 = st.columns(2)
        c1.selectbox(
            "Failure type",
            [c for c in TAXONOMY if c not in GRADE_CODES],  # grades are given on the List judging page
            index=None,
            placeholder="Choose a failure type",
            format_func=lambda c: TAXONOMY[c].label,
            help=_taxonomy_help(),
            key=keys["type"],
        )
        c2.selectbox("Document", [WHOLE_QUERY, *documents], key=keys["doc"])
        st.text_area("Note", placeholder="What went wrong? (free text)", key=keys["note"])
        acting = auth.acting()
        if not acting.signed_in_mode:
            st.text_input("Your name", key=bound("annotator"), placeholder="asked once, kept for this session")
        elif acting.person is not None:
            st.caption(f"Saved as **{ui.md(acting.person.name)}** (signed in).")
        else:
            st.caption("Sign in (in the sidebar) to save labels.")
        st.caption(
            f"Recorded with the ranking shown: {ui.md(ui.system_label(ranking.name))}. "
            "'Relevant but unjudged' is saved as a proposal; it counts as a judgement once a reviewer accepts "
            "it on the Annotations page."
        )
        st.form_submit_button("Save label", on_click=_save, args=(dataset, query_id, ranking, keys))


def _save(dataset: Dataset, query_id: str, ranking: Run, keys: dict[str, str]) -> None:
    """The form's submit callback (it runs before the page): validate, store, and say what happened."""
    v = view()
    values: dict[str, Any] = {name: st.session_state.get(key) for name, key in keys.items()}
    acting = auth.acting()
    if not acting.signed_in_mode:
        v.annotator = str(st.session_state.get(widget_key("annotator")) or "").strip()
        acting = auth.acting()
    code, target = values["type"], values["doc"]
    doc_id = None if target in (None, WHOLE_QUERY) else str(target)
    if code is None:
        v.flash_error = "Not saved: choose a failure type. Your note is kept."
        return
    if acting.error:
        v.flash_error = f"Not saved: sign-in is misconfigured ({ui.md(acting.error)}). Your note is kept."
        return
    if acting.person is None and not acting.signed_in_mode:
        v.flash_error = "Not saved: type your name under 'Your name' (asked once per session). Your note is kept."
        return
    try:
        person = authorize(acting.person, "label", config=acting.config)
    except PermissionDenied as err:
        v.flash_error = f"Not saved: {ui.md(err)}. Your note is kept."
        return
    store = ui.annotation_store()
    if store is None:
        v.flash_error = "Not saved: the annotation store is unavailable. Your note is kept."
        return
    # Blind when the unit was still hidden from them (read now: another tab may have saved meanwhile).
    earlier = store.list(dataset=dataset.source, task=dataset.name, query_id=query_id)
    blind = acting.sight.hidden(earlier, (dataset.source, dataset.name, query_id, doc_id))
    try:
        annotation = Annotation(
            dataset=dataset.source,
            task=dataset.name,
            query_id=query_id,
            doc_id=doc_id,
            system=ranking.name,
            rank=ranking.rank_of(query_id, doc_id) if doc_id is not None else None,
            failure_type=code,
            note=str(values["note"] or ""),
            annotator=person.name,
            blind=blind,
        )
        already_judged = None
        try:
            check_unjudged(annotation, dataset.qrels)
        except ValueError as err:
            if not blind:
                raise
            # Blind, the annotator cannot know the document is judged, and refusing would tell them: the
            # label is kept as their judgement (it agrees with the qrels, so it adds nothing to them).
            already_judged = str(err).split(";")[0]
        store.add(annotation)
    except (ValueError, AnnotationStoreError) as err:
        v.flash_error = f"Not saved: {ui.md(err)}. Your note is kept."
        return
    st.session_state[keys["note"]] = ""
    st.session_state[keys["type"]] = None
    what = TAXONOMY[code].label + ("" if doc_id is None else f" on {ui.md(doc_id)}")
    if already_judged:
        v.flash = f"Saved: {what}. Now that you have labelled it: {ui.md(already_judged)}, so your label agrees."
    elif code == "relevant_unjudged":
        v.flash = f"Saved: {what}, as a proposal for review on the Annotations page."
    else:
        v.flash = f"Saved: {what}"


def _taxonomy_help() -> str:
    return "\n".join(f"- **{t.label}**: {t.description}" for t in TAXONOMY.values())


def blind_queries(dataset: Dataset, acting: auth.Acting, query_ids: list[str]) -> frozenset[str]:
    """The queries still hidden from this person as a whole (they label blind and have not labelled the
    whole query yet: ``r2med_core.visibility``)."""
    if not acting.sight.blind:
        return frozenset()  # no blind view for them at all: skip reading the store
    store = ui.annotation_store()
    stored = [] if store is None else store.list(dataset=dataset.source, task=dataset.name)
    return acting.sight.hidden_queries(stored, dataset.source, dataset.name, query_ids)


def labels_for(dataset: Dataset, query_id: str) -> list[Annotation]:
    store = ui.annotation_store()
    return [] if store is None else store.list(dataset=dataset.source, task=dataset.name, query_id=query_id)


def status_of(annotation: Annotation) -> str:
    """The review state as shown: proposed, accepted (by whom) or rejected (by whom)."""
    status = annotation.status
    return f"{status} by {annotation.reviewer}" if annotation.reviewer else status


def label_tags(labels: list[Annotation], doc_id: str | None) -> str:
    """A short "🏷 type (status)" summary of the labels on one document (or the query itself)."""
    mine = [a for a in labels if a.doc_id == doc_id]
    return " · ".join(
        f"🏷 {TAXONOMY[a.failure_type].label if a.failure_type in TAXONOMY else a.failure_type}"
        + (f" ({a.status})" if a.failure_type == "relevant_unjudged" else "")
        for a in mine
    )
