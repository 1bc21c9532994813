"""Failure labels in the explorer: the form, and the tags shown next to labelled documents."""

from __future__ import annotations

import streamlit as st

from r2med_core import Dataset
from r2med_core.annotations import TAXONOMY, Annotation
from views import ui
from views.state import view


def label_form(dataset: Dataset, query_id: str, system: str, documents: list[str]) -> None:
    """Label this query, or one of its documents, with a failure type (stored at once, never lost)."""
    v = view()
    store = ui.annotation_store()
    if store is None:
        return
    codes = list(TAXONOMY)
    whole = "(the whole query)"
    if v.flash:
        st.success(v.flash)
        v.flash = ""
    with st.form(f"label_{query_id}", clear_on_submit=True):
        st.markdown("**Label a failure**")
        c1, c2 = st.columns(2)
        code = c1.selectbox(
            "Failure type", codes, format_func=lambda c: TAXONOMY[c].label, help=_taxonomy_help(), key="w_label_type"
        )
        target = c2.selectbox("Document", [whole, *documents], key="w_label_doc")
        note = st.text_area("Note", placeholder="What went wrong? (free text)", key="w_label_note")
        name = st.text_input("Your name", value=v.annotator, key="w_label_annotator")
        if not st.form_submit_button("Save label"):
            return
    v.annotator = name.strip()
    try:
        store.add(
            Annotation(
                dataset=dataset.source,
                task=dataset.name,
                query_id=query_id,
                doc_id=None if target == whole else target,
                system=system,
                failure_type=code,
                note=note,
                annotator=v.annotator,
            )
        )
    except ValueError as err:
        st.error(f"Not saved: {ui.md(err)}")
        return
    v.flash = f"Saved: {TAXONOMY[code].label}" + ("" if target == whole else f" on {ui.md(target)}")
    st.rerun()  # so every panel shows the new label


def _taxonomy_help() -> str:
    return "\n".join(f"- **{t.label}**: {t.description}" for t in TAXONOMY.values())


def labels_for(dataset: Dataset, query_id: str) -> list[Annotation]:
    store = ui.annotation_store()
    return [] if store is None else store.list(dataset=dataset.source, task=dataset.name, query_id=query_id)


def label_tags(labels: list[Annotation], doc_id: str | None) -> str:
    """A short "🏷 type (annotator)" summary of the labels on one document (or the query itself)."""
    mine = [a for a in labels if a.doc_id == doc_id]
    return " · ".join(
        f"🏷 {TAXONOMY[a.failure_type].label if a.failure_type in TAXONOMY else a.failure_type}" for a in mine
    )
