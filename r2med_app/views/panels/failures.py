"""Failures in plain words (page part): the Overview's landing section, which starts from where the
chosen system fails, and the explorer's verdict above a failed question. Both read one value, the core
workbench's ``failures`` (its sentences are ``r2med_core.analysis.verdicts``'); this only asks and renders.
"""

from __future__ import annotations

import streamlit as st

from r2med_app.views import annotation_db, datasets, naming, routes, state, work
from r2med_app.views.markup import md
from r2med_app.views.panels import auth, diagnosis
from r2med_core.analysis.explore import contrast, highlight, query_terms, shorten
from r2med_core.compute.workbench import Failures, short_words
from r2med_core.data import Dataset
from r2med_core.runs import Run

#: How many failure cards the landing shows.
CARDS = 3


def failures_of(dataset: Dataset, system: str) -> Failures | None:
    """Where ``system`` fails, from the workbench's one call (the landing, the explorer's class column and
    its verdict read the same value), with the rewrite in view (else the one views start from) and the LLM
    judge's proposals this visitor may see; None after drawing where a run it needs stands."""
    oracle, rewrite = diagnosis.chosen_oracle(), state.view().rewrite or None
    store, sight = annotation_db.annotation_store(), auth.acting().sight
    return work.ask(
        naming.system_label(system),
        lambda progress: work.bench().failures(
            dataset,
            system,
            oracle=oracle,
            rewrite=rewrite,
            store=store,
            sight=sight,
            progress=progress,
        ),
        waiting=work.waiting(dataset, system),
    )


def _open(dataset: Dataset, qid: str, system: str) -> None:
    """Open one question in the explorer, its query table folded so the question is in view."""
    v = state.view()
    v.q, v.system = qid, system
    st.session_state.pop(state.widget_key("all_queries", state.scope(datasets.dataset_key(dataset))), None)
    st.switch_page(routes.page("explorer"))


def landing(dataset: Dataset) -> None:
    """Where the chosen system fails on this task: one sentence overall, one per failure class, and the
    worst failures as cards, each one click from its question in the explorer."""
    v = state.view()
    systems = list(v.systems) or list(state.DEFAULT_SYSTEMS)
    # Its own widget, not bound to the explorer's system: a link's system=… that is not in play here
    # must not be overwritten by a visit to the landing (the card's click sets it).
    system = st.selectbox(
        "System",
        systems,
        index=systems.index(v.system) if v.system in systems else 0,
        format_func=naming.system_label,
        key="w_landing_system",
        help="Where this system fails on the task shown; choose systems in the sidebar.",
    )
    found = failures_of(dataset, system)
    if found is None:
        return
    words = found.summary
    st.markdown(f"#### {md(words.headline)}")
    for line in words.class_lines:
        st.markdown(f"- {md(line)}")
    if found.rewrite_line is not None:
        st.markdown(f"- {md(found.rewrite_line)}")
    if not words.n_failed:
        st.success("No failures to look at on this task: every judged question has a relevant document in the top 10.")
        return
    cards = found.worst(CARDS)
    columns = st.columns(len(cards))
    for column, item in zip(columns, cards):
        said = found.verdict(item.query_id)
        with column.container(border=True):
            st.markdown(f"**Question {md(item.query_id)}** · {md(item.failure_class)}")
            st.caption(md(shorten(dataset.queries[item.query_id], 220)))
            if said is not None:
                st.markdown(md(said.text))
            if st.button("Open this question", key=f"w_card_{item.query_id}", type="primary", width="stretch"):
                _open(dataset, item.query_id, system)
    st.caption(
        f"A diagnostic, not the benchmark's score: a question fails when none of its relevant documents is in the "
        f"top {found.diagnosis.depth}; the reason is told by retrieving with the question's reference answer "
        f"({md(naming.system_label(diagnosis.chosen_oracle()))})."
    )


def verdict_box(found: Failures, qid: str, picker_key: str) -> None:
    """The explorer's sentence above a question (what was missed, why, what a rewrite changed) and a
    button to the next failed question (``picker_key``: the explorer's query picker, moved with it)."""
    told = found.verdict(qid)
    if told is None:
        return
    text, button = st.container(key="r2-stack-verdict").columns([5, 1.2], vertical_alignment="center")
    if told.failed:
        text.warning(md(told.text), icon=":material/search_off:")  # not an app error
    else:
        text.markdown(f":green[:material/task_alt:] {md(told.text)}")
    failed = found.failed
    following = found.next_after(qid)

    def _go() -> None:
        state.view().q = st.session_state[picker_key] = following

    button.button(
        "Next failure ▶",
        on_click=_go,
        disabled=following is None,
        key="w_next_failure",
        help=f"{len(failed)} questions failed on this task; this walks them in order.",
        width="stretch",
    )


def contrast_box(dataset: Dataset, run: Run, qid: str, system: str) -> None:
    """Why the top wrong document beat a missed gold one, from shared words alone (no LLM): the words
    each shares with the question, and the gold document's words shared with the reference answer."""
    told = contrast(dataset, run, qid)
    if told is None:
        return
    with st.expander("Why did a wrong document beat the gold one? (shared words; no LLM)"):
        for line in told.sentences():
            st.markdown(md(line))
        question = query_terms(dataset.queries[qid])
        answer = dataset.query_meta.get(qid, {}).get("answer")
        bridge = query_terms(answer) if isinstance(answer, str) else frozenset()
        left, right = st.container(key="r2-stack-contrast").columns(2)
        with left:
            ranked = f"rank {told.winner_rank} in {md(short_words(system, dataset))}"
            st.markdown(f"**{md(told.winner)}** · {ranked} · not gold")
            st.caption("Shared with the question: " + (md(", ".join(told.winner_words)) or "none"))
            st.html(f"<div class='r2-text'>{highlight(dataset.corpus.get(told.winner, ''), question)}</div>")
        with right:
            where = f"rank {told.loser_rank}" if told.loser_rank is not None else "not in the top 100"
            st.markdown(f"**{md(told.loser)}** · {where} · gold")
            st.caption("Shared with the question: " + (md(", ".join(told.loser_words)) or "none"))
            if told.has_answer:
                st.caption(
                    "Highlighted below: words shared with the reference answer; not in the question: "
                    + (md(", ".join(told.bridge_words)) or "none")
                )
            terms = bridge if told.has_answer else question
            st.html(f"<div class='r2-text'>{highlight(dataset.corpus.get(told.loser, ''), terms)}</div>")
