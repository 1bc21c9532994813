"""Judging: annotators grade the pooled unjudged documents blind, one (query, document) at a time, each
document assigned to as many annotators as the operator set (``r2med_core.judging.queue``); below, how far each
annotator and the team got on every task (whose figures a visitor sees, ``visibility`` decides)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from r2med_app.views import state, ui
from r2med_app.views.panels import auth, labels, pooling
from r2med_core import Dataset
from r2med_core.analysis.explore import highlight, query_terms
from r2med_core.judging.annotations import AnnotationStoreError
from r2med_core.judging.queue import QueueProgress, Turn
from r2med_core.judging.visibility import Sight
from r2med_core.runs import Run


def _turn(dataset: Dataset, turn: Turn) -> None:
    """The document this person judges now, with the query and the document only — no judgements, scores,
    systems or other people's labels — and how far they got on the task."""
    if not turn.queued:
        st.info("Nothing to judge on this task: send a pool from the Metrics page (Pooling and holes).")
        return
    done = f"{turn.judged} of the {turn.queued} queued document(s) judged by you"
    if turn.entry is None:
        rest = turn.queued - turn.judged
        others = f"; the other {rest} have their {turn.judges} annotator(s)" if rest else ""
        st.success(f"Nothing left for you on this task: {done}{others}.")
        return
    st.progress(turn.judged / (turn.judged + turn.left), text=f"{done}; {turn.left} for you, this one included")
    entry = turn.entry
    text = dataset.corpus.get(entry.doc_id, "")
    with st.container(border=True):
        st.markdown(f"**Query {ui.md(entry.query_id)}**")
        st.html(f"<div class='r2-text'>{highlight(dataset.queries.get(entry.query_id, ''), frozenset())}</div>")
    with st.container(border=True):
        st.markdown(f"**Document {ui.md(entry.doc_id)}**")
        st.html(f"<div class='r2-text'>{highlight(text, query_terms(dataset.queries.get(entry.query_id, '')))}</div>")
    ranking = Run(f"pool@{entry.depth}")  # the annotator saw no system's ranking: the label names the pool
    within = state.scope(ui.dataset_key(dataset), entry.query_id, entry.doc_id)
    labels.label_form(dataset, entry.query_id, ranking, [entry.doc_id], within, grade_only=True)


def _progress(found: QueueProgress, judges: int, sight: Sight) -> None:
    """Per task, the team's progress (for reviewers) and each annotator's (their own for an annotator)."""
    people = sight.progress(found.annotators)
    if not found.tasks or not (people or sight.reviews):
        return
    st.subheader("Progress")
    st.caption(
        f"Each queued document goes to {judges} annotator(s) (the operator's R2MED_JUDGES_PER_DOCUMENT); it "
        "counts as judged by someone once they saved a label on it."
    )
    if sight.reviews:
        team = [
            {
                "dataset": t.dataset,
                "task": t.task,
                "queued": t.queued,
                f"judged by {judges}": t.complete,
                "judged by fewer": t.started,
                "not judged yet": t.untouched,
            }
            for t in found.tasks
        ]
        st.dataframe(pd.DataFrame(team), hide_index=True, width="stretch")
    if people:
        rows = [
            {"annotator": r.annotator, "dataset": r.dataset, "task": r.task, "judged": r.judged, "waiting": r.waiting}
            for r in people
        ]
        st.dataframe(
            pd.DataFrame(rows),
            hide_index=True,
            width="stretch",
            column_config={"waiting": st.column_config.NumberColumn(help="Assigned, not judged yet.")},
        )


def page(dataset: Dataset) -> None:
    st.title("Judging")
    st.caption(
        "Documents pooled from the systems' top k that nobody judged. Grade each from the query and the "
        "document alone (0 not relevant, 1 relevant, 2 highly relevant); a grade takes it off your queue. "
        + labels.TEAM_RULE
    )
    store = ui.annotation_store()
    if store is None:
        return
    pooling.queue_notes()
    queue = pooling.judging_queue(store)
    acting = auth.acting()
    person = None if ui.read_only() else acting.person  # the read-only demo assigns nothing
    try:
        turn = queue.serve(dataset.source, dataset.name, person, queries=dataset.queries)
        found = queue.progress()
    except AnnotationStoreError as err:
        st.error(ui.md(err))
        return
    _turn(dataset, turn)
    _progress(found, queue.judges, acting.sight)


page(ui.current_dataset())
