"""Pooling and holes: the Metrics page's section (metrics and ranks with and without the team's judgements,
Judged@k, sending a pool for judging), and the judging queue both it and the Judging page use."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from r2med_app.views import annotation_db, datasets, markup, naming, serving, state
from r2med_app.views.markup import md
from r2med_app.views.panels import auth, team
from r2med_core import Dataset
from r2med_core.evaluation import MAIN_METRICS, metric_label
from r2med_core.judging.annotations import AnnotationStore, AnnotationStoreError, Qrels
from r2med_core.judging.identity import PermissionDenied, authorize
from r2med_core.judging.pooling import DEFAULT_DEPTH, JUDGED_WORDS, Pool, compare_with_team, pool, pooling_by_measure
from r2med_core.judging.queue import JudgingQueue, kept_queue_files
from r2med_core.runs import Run

DEPTHS = [5, 10, 20, 50, 100]


def judging_queue(store: AnnotationStore) -> JudgingQueue:
    """The store's judging queue, each document going to as many annotators as the operator set."""
    return JudgingQueue(store, serving.settings().judges_per_document)


def queue_notes() -> None:
    """The damaged queue files kept aside (what in each could not be read), where senders and judges look;
    named by file name only."""
    problems = kept_queue_files()
    if problems:
        st.warning("The judging queue file needs a look:\n\n" + "\n".join(f"- {md(str(p))}" for p in problems))


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
    st.subheader("Documents nobody judged, and what judging them changes (pooling and holes)")
    st.caption(
        "A *hole* is a retrieved document nobody judged: the score counts it as not relevant. Not the "
        "benchmark's setting: **with** scores against the team's qrels — the original ones with the "
        "team's agreed, accepted and adjudicated grades (counted under the table). "
        f"{JUDGED_WORDS} (ir_measures): a low value means its score rests on holes counted as not relevant."
    )
    judged = team.read(dataset)
    team_json = json.dumps(dataset.qrels if judged is None else judged.qrels, sort_keys=True)
    key = (datasets.dataset_key(dataset), tuple(runs))
    c1, c2 = st.columns(2)
    metric = c1.selectbox("Metric", list(MAIN_METRICS), format_func=metric_label, key="w_pool_metric")
    depth = c2.select_slider("Pool depth", options=DEPTHS, value=DEFAULT_DEPTH, key="w_pool_depth")
    table = _comparison(key, team_json, metric, runs, dataset.qrels)
    pooled = _pool(key, team_json, depth, runs)
    # One row per measure and a column per system, what each says in words: fits from 800 px up, as the
    # official metrics table above it (a column per measure was cut at the edge).
    markup.table(pooling_by_measure(table, pooled, {name: naming.system_label(name) for name in runs}, metric))
    counted = "No team judgements could be read: 'with' equals 'without'. " if judged is None else judged.caption()
    st.caption(
        f"{md(counted)} Pool: {len(pooled)} unjudged document(s) in the top {depth} of "
        f"{len(runs)} system(s), over {len(pooled.docs)} judged quer{'y' if len(pooled.docs) == 1 else 'ies'}."
    )
    state.show_flash()
    if not serving.read_only():
        queue_notes()
    if not auth.acting().signed_in_mode and not serving.read_only():
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
        disabled=serving.read_only() or not len(pooled),
        key="w_pool_send",
        help="Annotators then judge each document blind (query and document only) on the Judging page.",
    )


def _send(dataset: Dataset, pooled: Pool) -> None:
    """The button's callback: a reviewer sends the pool; the flash says what happened."""
    v = state.view()
    acting = auth.acting()
    if serving.read_only():
        v.flash_error = "Not sent: this read-only demo keeps no judging queue."
        return
    if not acting.signed_in_mode:
        v.annotator = str(st.session_state.get(state.widget_key("annotator")) or "").strip()
        acting = auth.acting()
    store = annotation_db.annotation_store()
    if store is None:
        v.flash_error = "Not sent: the annotation store is unavailable."
        return
    try:
        person = authorize(acting.person, "review", config=acting.config)
        added = judging_queue(store).send(dataset.source, dataset.name, pooled, person.name)
    except (PermissionDenied, ValueError, AnnotationStoreError) as err:
        v.flash_error = f"Not sent: {md(err)}"
        return
    v.flash = f"Sent: {added} new document(s) in the judging queue ({len(pooled) - added} already queued)."
