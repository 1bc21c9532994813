"""Pooling and holes: the Metrics page's section (metrics and ranks with and without the team's judgements,
Judged@k, sending a pool for judging) and the blind grading of the queue (the Judging page)."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from r2med_core import Dataset
from r2med_core.annotations import AnnotationStoreError, Qrels
from r2med_core.evaluation import MAIN_METRICS
from r2med_core.explore import highlight, query_terms
from r2med_core.identity import PermissionDenied, authorize
from r2med_core.pooling import DEFAULT_DEPTH, JudgingQueue, Pool, compare_with_team, pool
from r2med_core.report import metric_label
from r2med_core.runs import Run
from views import auth, labels, state, team, ui

DEPTHS = [5, 10, 20, 50, 100]


def _queue() -> JudgingQueue:
    """The queue file next to the default store (opened per use: it follows $R2MED_DATA_HOME)."""
    return JudgingQueue()


def _queue_problems(queue: JudgingQueue) -> None:
    """What is wrong with the queue file (skipped entries, an unreadable file, damaged copies kept aside),
    where senders and judges look; named by file name only."""
    problems = queue.problems()
    if problems:
        st.warning("The judging queue file needs a look:\n\n" + "\n".join(f"- {ui.md(str(p))}" for p in problems))


@st.cache_data(show_spinner="Scoring with the team's judgements …", max_entries=32)
def _comparison(
    key: tuple[str, tuple[str, ...]], team_json: str, metric: str, _runs: dict[str, Run], _qrels: Qrels
) -> pd.DataFrame:
    """Cached per dataset, systems, team qrels and metric (the runs and qrels follow from the key)."""
    return compare_with_team(_runs, _qrels, json.loads(team_json), metric=metric, k=DEFAULT_DEPTH)


@st.cache_data(show_spinner=False, max_entries=32)
def _pool(key: tuple[str, tuple[str, ...]], team_json: str, depth: int, _runs: dict[str, Run]) -> Pool:
    return pool(_runs, json.loads(team_json), depth)


def section(dataset: Dataset, runs: dict[str, Run]) -> None:
    """The Metrics page's "Pooling and holes": each system without / with the team's judgements, its rank
    change and Judged@10, and a button sending the unjudged documents of the top k for blind judging."""
    st.subheader("Pooling and holes")
    st.caption(
        "Not the benchmark's setting: **with** scores against the team's qrels — the original ones with the "
        "team's agreed, accepted and adjudicated grades (counted under the table). "
        f"Judged@{DEFAULT_DEPTH} (ir_measures) is the share of a system's top {DEFAULT_DEPTH} that "
        "has any judgement: a low value means its score rests on holes counted as not relevant."
    )
    judged = team.read(dataset)
    team_json = json.dumps(dataset.qrels if judged is None else judged.qrels, sort_keys=True)
    key = (ui.dataset_key(dataset), tuple(runs))
    c1, c2 = st.columns(2)
    metric = c1.selectbox("Metric", list(MAIN_METRICS), format_func=metric_label, key="w_pool_metric")
    depth = c2.select_slider("Pool depth", options=DEPTHS, value=DEFAULT_DEPTH, key="w_pool_depth")
    table = _comparison(key, team_json, metric, runs, dataset.qrels)
    pooled = _pool(key, team_json, depth, runs)
    contributed, unique = pooled.contributed(), pooled.unique()
    shown = pd.DataFrame(
        {
            "system": [ui.system_label(name) for name in table["system"]],
            "without": table["without"],
            "with": table["with"],
            "rank": [f"{a} → {b}" for a, b in zip(table["rank_without"], table["rank_with"])],
            "rank change": table["rank_change"],
            f"Judged@{DEFAULT_DEPTH}": table["judged_without"],
            f"Judged@{DEFAULT_DEPTH} with": table["judged_with"],
            f"pooled @{depth}": [contributed[name] for name in table["system"]],
            "only it": [unique[name] for name in table["system"]],
        }
    )
    number = st.column_config.NumberColumn(format="%.4f")
    st.dataframe(
        shown,
        hide_index=True,
        width="stretch",
        key="pool_table",
        column_config={
            "without": st.column_config.NumberColumn(f"{metric_label(metric)} without", format="%.4f"),
            "with": st.column_config.NumberColumn(f"{metric_label(metric)} with", format="%.4f"),
            "rank change": st.column_config.NumberColumn(help="Positive: the system moves up with the new judgements."),
            f"Judged@{DEFAULT_DEPTH}": number,
            f"Judged@{DEFAULT_DEPTH} with": number,
            f"pooled @{depth}": st.column_config.NumberColumn(help="Unjudged documents of its top k in the pool."),
            "only it": st.column_config.NumberColumn(help="Pooled documents no other chosen system retrieved."),
        },
    )
    counted = "No team judgements could be read: 'with' equals 'without'. " if judged is None else judged.caption()
    st.caption(
        f"{ui.md(counted)} Pool: {len(pooled)} unjudged document(s) in the top {depth} of "
        f"{len(runs)} system(s), over {len(pooled.docs)} judged quer{'y' if len(pooled.docs) == 1 else 'ies'}."
    )
    state.show_flash()
    if not ui.read_only():
        _queue_problems(_queue())
    if not auth.acting().signed_in_mode and not ui.read_only():
        st.text_input(
            "Your name",
            key=state.bound("annotator"),
            on_change=state.store("annotator"),
            placeholder="recorded as who sent the pool",
        )
    st.button(
        f"Send the pool ({len(pooled)}) to the judging queue",
        on_click=_send,
        args=(dataset, pooled),
        disabled=ui.read_only() or not len(pooled),
        key="w_pool_send",
        help="Annotators then judge each document blind (query and document only) on the Judging page.",
    )


def _send(dataset: Dataset, pooled: Pool) -> None:
    """The button's callback: a reviewer sends the pool; the flash says what happened."""
    v = state.view()
    acting = auth.acting()
    if ui.read_only():
        v.flash_error = "Not sent: this read-only demo keeps no judging queue."
        return
    if not acting.signed_in_mode:
        v.annotator = str(st.session_state.get(state.widget_key("annotator")) or "").strip()
        acting = auth.acting()
    try:
        person = authorize(acting.person, "review", config=acting.config)
        added = _queue().send(dataset.source, dataset.name, pooled, person.name)
    except (PermissionDenied, ValueError, OSError) as err:
        v.flash_error = f"Not sent: {ui.md(err)}"
        return
    v.flash = f"Sent: {added} new document(s) in the judging queue ({len(pooled) - added} already queued)."


def judging_page(dataset: Dataset) -> None:
    """Blind judging of the queue: the next (query, document) this person has not labelled, with the query
    and the document only — no judgements, scores, systems or other people's labels — graded 0-2 as on
    every page."""
    st.title("Judging")
    st.caption(
        "Documents pooled from the systems' top k that nobody judged. Grade each from the query and the "
        "document alone (0 not relevant, 1 relevant, 2 highly relevant); a grade takes it off your queue. "
        + labels.TEAM_RULE
    )
    store = ui.annotation_store()
    if store is None:
        return
    acting = auth.acting()
    who = acting.person.name if acting.person is not None else ""
    queue = _queue()
    try:
        task_labels = store.list(dataset=dataset.source, task=dataset.name)
    except AnnotationStoreError as err:
        st.error(ui.md(err))
        return
    _queue_problems(queue)
    pending = queue.pending(dataset.source, dataset.name, task_labels, who)
    total = len(queue.items(dataset.source, dataset.name))
    pending = [e for e in pending if e.query_id in dataset.queries]  # a queue sent on another version of the task
    if not total:
        st.info("Nothing to judge on this task: send a pool from the Metrics page (Pooling and holes).")
        return
    if not pending:
        st.success(f"You have judged all {total} queued document(s) of this task.")
        return
    st.progress(1 - len(pending) / total, text=f"{total - len(pending)} of {total} judged by you")
    entry = pending[0]
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
