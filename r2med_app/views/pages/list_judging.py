"""Judge a list: grade one query's top-k documents of a system with the keyboard, saved as you go.

Blind first: each row shows the query and the document only until you graded it; then its qrels
grade and the other annotators' labels appear. The grading itself lives in ``r2med_core.judging.list_judging``.
"""

from __future__ import annotations

import streamlit as st

from r2med_app.views import annotation_db, datasets, naming, notices, state, summaries, work
from r2med_app.views.markup import md
from r2med_app.views.panels import auth
from r2med_app.views.panels.keylist import keyboard_list, rerun_after_reconnect
from r2med_app.views.panels.labels import TEAM_RULE
from r2med_core import Dataset
from r2med_core.judging.list_judging import list_done, list_rows, next_query, parse_events, save_grades
from r2med_core.runs import Run

DEPTHS = [5, 10, 20]

dataset = datasets.current_dataset()
v = state.view()
within = state.scope(datasets.dataset_key(dataset))
st.title("Judge a list")
notices.demo_banner(dataset)
st.caption(
    "Grade every document a system retrieved for one query, by keyboard: **0** not relevant, **1** relevant, "
    "**2** highly relevant (focus then moves down); **↑ ↓** move, **Enter** shows the whole document. Each "
    "grade is saved at once as a label (the latest per annotator stands), the same grade as on the Judging page "
    "and in the explorer. " + TEAM_RULE
)

systems = list(v.systems) or list(state.DEFAULT_SYSTEMS)
top = st.columns([3, 1])
top[0].selectbox(
    "System",
    systems,
    format_func=naming.system_label,
    key=state.bound("system", systems),
    on_change=state.store("system"),
)
v.system = st.session_state["w_system"]
k = top[1].select_slider("Top k", options=DEPTHS, value=10, key="w_lj_k")
computed = work.results(dataset, v.system)
if computed is None:
    st.stop()
run = computed[0]
query_ids = [qid for qid in dataset.queries if run.top(qid, 1)]
if not query_ids:
    st.warning("This system ranked no documents for any query.")
    st.stop()
picker = state.widget_key("lj_q", within)
if st.session_state.get(picker) not in query_ids:
    st.session_state[picker] = v.q if v.q in query_ids else query_ids[0]


def _picked() -> None:
    v.q = st.session_state[picker]


st.selectbox("Query", query_ids, key=picker, on_change=_picked, format_func=summaries.query_labels(dataset).__getitem__)
qid = v.q = st.session_state[picker]
with st.container(border=True):
    st.markdown(f"**Query {md(qid)}**")
    st.markdown(md(dataset.queries[qid]))

auth.name_field()


@st.fragment
def judging(dataset: Dataset, run: Run, qid: str, k: int) -> None:
    """The list and its saving: a keypress reruns only this fragment, so a grade is confirmed quickly."""
    store = annotation_db.annotation_store()
    if store is None:
        return
    key = state.widget_key("lj_list", state.scope(within, qid, run.name, k))
    documents = [doc for doc, _ in run.top(qid, k)]
    events, problems = parse_events(st.session_state.get(key), documents)
    ledger = state.save_once()
    acting = auth.acting()
    annotator, reason = auth.grader(acting)
    if annotator:  # else nothing is saved nor acknowledged: the browser keeps the keys until someone may grade
        save_grades(
            store,
            ledger,
            events,
            dataset=dataset.source,
            task=dataset.name,
            query_id=qid,
            ranking=run,
            annotator=annotator,
            sight=acting.sight,
        )
    labels = acting.sight.labels(store.list(dataset=dataset.source, task=dataset.name, query_id=qid))
    rows = list_rows(run, qid, k, dataset.corpus, dataset.qrels, labels, annotator)
    keyboard_list(
        [row.to_args() for row in rows], events=events, ledger=ledger, enabled=bool(annotator), reason=reason, key=key
    )
    graded = sum(row.grade is not None for row in rows)
    who = f" by {md(annotator)}" if annotator else ""
    doubted = sum(row.unsure for row in rows)
    unsure = f" · {doubted} marked unsure (no grade: a reviewer decides; a grade here replaces it)" if doubted else ""
    st.caption(
        f"{graded} of {len(rows)} rows graded{who}{unsure} · recorded with the ranking shown: "
        f"{md(naming.system_label(run.name))}."
    )
    for problem in problems:
        st.warning(f"Ignored from the list: {md(problem)}.")
    if annotator and list_done(rows):
        _next(qid)


def _go_to(query_id: str) -> None:
    """The "Next query" button's callback: it runs before the page, so the query picker can be set."""
    st.session_state[picker] = v.q = query_id


def _next(qid: str) -> None:
    """Once every row is judged: the way on to the next query of the list (the whole page reruns on it)."""
    following = next_query(query_ids, qid)
    if following is None:
        st.success("Every row of this list is judged, and this is the last query of the list.")
        return
    label = summaries.query_labels(dataset)[following]
    st.success("Every row of this list is judged.")
    if st.button(f"Next query: {md(label)} →", key="w_lj_next", type="primary", on_click=_go_to, args=(following,)):
        st.rerun(scope="app")  # the picker and the query box above belong to the whole page


judging(dataset, run, qid, k)
rerun_after_reconnect()
