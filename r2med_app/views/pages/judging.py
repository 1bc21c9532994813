"""Judging: annotators grade the pooled unjudged documents blind, one (query, document) at a time, each
document assigned to as many annotators as the operator set (``r2med_core.judging.queue``); below, how far each
annotator and the team got on every task (whose figures a visitor sees, ``visibility`` decides).

Nothing here primes the grade: a document is named by its place in the queue (``queue.blind_name``), never by
its id, which can name the answer — on the page, in its keys and in its messages; and the query's words are
highlighted in the document only for whoever switches that on (``View.marks``, kept in the address)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from r2med_app.views import annotation_db, datasets, serving, state
from r2med_app.views.markup import md
from r2med_app.views.panels import auth, labels, pooling
from r2med_app.views.panels.keylist import keyboard_list, rerun_after_reconnect
from r2med_core import Dataset
from r2med_core.analysis.explore import highlight, query_terms
from r2med_core.judging.annotations import AnnotationStoreError
from r2med_core.judging.list_judging import GradeEvent, Row, now_ms, parse_events, save_unit_grades
from r2med_core.judging.queue import JudgingQueue, QueueProgress, Turn
from r2med_core.judging.visibility import Sight
from r2med_core.runs import Run
from r2med_core.tasks import judging_guideline


def _units(queue: JudgingQueue, dataset: Dataset) -> dict[str, tuple[str, str, Run]]:
    """Every queued (query, document) of the task by its keyboard key — its blind name, never its id — with
    the ranking its label records: the annotator saw no system's ranking, so the label names the pool."""
    return {
        name: (e.query_id, e.doc_id, Run(f"pool@{e.depth}"))
        for name, e in queue.numbered(dataset.source, dataset.name).items()
    }


def _save_keys(
    queue: JudgingQueue,
    dataset: Dataset,
    units: dict[str, tuple[str, str, Run]],
    events: list[GradeEvent],
    skipped: set[tuple[str, str]],
) -> None:
    """Store the grades the keyboard sent (each event once, ``list_judging``) and note its skips in
    ``skipped``."""
    ledger = state.save_once()
    acting = auth.acting()
    annotator = auth.grader(acting)[0]
    if not annotator:  # nothing is saved nor acknowledged: the browser keeps the keys until someone may grade
        return
    outcomes = save_unit_grades(
        queue.store, ledger, events, units, dataset=dataset.source, task=dataset.name, annotator=annotator,
        sight=acting.sight,
    )  # fmt: skip
    now_skipped = {o.event.event_id for o in outcomes if o.status == "skipped"}
    skipped.update(units[e.doc_id][:2] for e in events if e.event_id in now_skipped)


def _keyboard(turn: Turn, events: list[GradeEvent], key: str) -> None:
    """The keys for the document shown: 0/1/2 grade it, u says unsure, s skips it; the next one follows at once.
    The component knows the document by its blind name only."""
    annotator, reason = auth.grader(auth.acting())
    row = Row(rank=1, doc_id=turn.name, text="", grade=None, revealed=False)
    keyboard_list(
        [{**row.to_args(), "label": turn.name}],
        events=events,
        ledger=state.save_once(),
        enabled=bool(annotator),
        reason=reason,
        key=key,
        single=True,
    )


@st.fragment
def _card(dataset: Dataset) -> None:
    """The document to judge and its keys, and the queue's progress below: a grade, a skip or a Save reruns
    only this part of the page."""
    store = annotation_db.annotation_store()
    if store is None:
        return
    queue = pooling.judging_queue(store)
    within = state.scope(datasets.dataset_key(dataset))
    key = state.widget_key("judge_keys", within)
    skipped: set[tuple[str, str]] = st.session_state.setdefault(state.widget_key("judge_skipped", within), set())
    units = _units(queue, dataset)
    events, problems = parse_events(st.session_state.get(key), units, skips=True, unsure=True)
    _save_keys(queue, dataset, units, events, skipped)
    person = None if serving.read_only() else auth.acting().person  # the read-only demo assigns nothing
    try:
        turn = queue.serve(dataset.source, dataset.name, person, queries=dataset.queries, skipped=skipped)
        if turn.entry is None and skipped:  # only skipped ones are left: they come back, in queue order
            st.caption(f"Back to the {len(skipped)} document(s) you skipped.")
            skipped.clear()
            turn = queue.serve(dataset.source, dataset.name, person, queries=dataset.queries)
    except AnnotationStoreError as err:
        st.error(md(err))
        return
    _turn(dataset, turn, key, events, st.session_state.setdefault(state.widget_key("judge_shown", within), {}))
    for problem in problems:
        st.warning(f"Ignored from the keyboard: {md(problem)}.")
    # The table is read with the card, in the same run: a key redraws both, so the card's "judged by you" and
    # the table's row for this person are one count taken at one moment (the table once stood as of the
    # page's opening while the card counted on: "11 judged by you" above "judged 5").
    try:
        found = queue.progress()
    except AnnotationStoreError as err:
        st.error(md(err))
        return
    _progress(found, queue.judges, auth.acting().sight)


def _turn(dataset: Dataset, turn: Turn, key: str, events: list[GradeEvent], shown: dict[str, int]) -> None:
    """The document this person judges now, with the query and the document only — no judgements, scores,
    systems or other people's labels — the family's guideline, and how far they got on the task. ``shown``
    keeps when this session was first sent the document, for the time a Save records."""
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
    unit = turn.name
    if unit not in shown:  # a new document: its time starts now (as the keys' does in the browser)
        shown.clear()
        shown[unit] = now_ms()
    text = dataset.corpus.get(entry.doc_id, "")
    query = dataset.queries.get(entry.query_id, "")
    marks = query_terms(query) if state.view().marks else frozenset()
    left, right = st.columns([3, 1])
    with left:
        with st.container(border=True):
            st.markdown(f"**Query {md(entry.query_id)}**")
            st.html(f"<div class='r2-text'>{highlight(query, frozenset())}</div>")
        with st.container(border=True):
            st.markdown(f"**Document {md(turn.name)}**")
            st.html(f"<div class='r2-text'>{highlight(text, marks)}</div>")
    with right:
        st.markdown("**What counts as relevant**")
        st.caption(judging_guideline(dataset.family))  # our own words, plain text
    _keyboard(turn, events, key)
    ranking = Run(f"pool@{entry.depth}")  # the annotator saw no system's ranking: the label names the pool
    within = state.scope(datasets.dataset_key(dataset), entry.query_id, turn.name)  # widget keys are in the page too
    labels.label_form(
        dataset, entry.query_id, ranking, [entry.doc_id], within, grade_only=True, ask_name=False,
        shown_at=shown[unit], shown_as=turn.name,
    )  # fmt: skip


def _progress(found: QueueProgress, judges: int, sight: Sight) -> None:
    """Per task, the team's progress (for reviewers) and each annotator's (their own for an annotator)."""
    people = sight.progress(found.annotators)
    if not found.tasks or not (people or sight.reviews):
        return
    st.subheader("Progress")
    st.caption(
        f"Each queued document goes to {judges} annotator(s) (the operator's R2MED_JUDGES_PER_DOCUMENT); it "
        "counts as judged by someone once they saved a label on it. Counted with the document above: each "
        "grade redraws both, so your row here and the bar above count the same labels."
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
        "document alone (0 not relevant, 1 relevant, 2 highly relevant), or say you are unsure (a reviewer then "
        "decides it); either takes it off your queue, with the time you spent on it. " + labels.TEAM_RULE
    )
    store = annotation_db.annotation_store()
    if store is None:
        return
    pooling.queue_notes()
    auth.name_field()
    st.toggle(
        "Highlight the query's words in the document",
        key=state.bound("marks"),
        on_change=state.store("marks"),
        help="Off by default: marked words can steer a grade. Your choice is kept in the page's address.",
    )
    _card(dataset)
    rerun_after_reconnect()


page(datasets.current_dataset())
