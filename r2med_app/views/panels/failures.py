"""Failures in plain words (page part): the Overview's landing section, which starts from where the
chosen system fails, and the explorer's verdict above a failed question. The sentences are built by
``r2med_core.analysis.verdicts``; this only finds the runs (never computing without a click) and renders.
"""

from __future__ import annotations

import streamlit as st

from r2med_app.views import datasets, naming, routes, state, ui
from r2med_app.views.markup import md
from r2med_app.views.panels import diagnosis
from r2med_core.analysis.diagnosis import Diagnosis
from r2med_core.analysis.explore import contrast, highlight, query_terms, shorten
from r2med_core.analysis.verdicts import Verdict, next_failure, rewrite_summary, summary, verdict, worst_failures
from r2med_core.data import Dataset
from r2med_core.evaluation import Results
from r2med_core.kinds.oracle import reference_answers
from r2med_core.runs import Run
from r2med_core.systems import SpecError, default_rewrite, parse_system, rewrite_words, rewritten_name

#: How many failure cards the landing shows.
CARDS = 3


def short_label(system: str) -> str:
    """A system's name for a sentence: its label without the parenthesised note ("BM25")."""
    return naming.system_label(system).split(" (", 1)[0]


def _oracle(dataset: Dataset) -> tuple[Run | None, str]:
    """The oracle's run (when computed) and the retriever it uses, for "given the answer, BM25 finds …"."""
    name = diagnosis.chosen_oracle()
    answered = bool(reference_answers(dataset))  # without answers the oracle cannot run
    computed = ui.safe_results(dataset, name) if answered and ui.is_ready(dataset, name) else None
    try:
        members = parse_system(name).members
    except SpecError:
        members = ()
    retriever = members[0].label.split(" (", 1)[0] if members else "the retriever"
    return (computed[0] if computed else None), retriever


def _rewrite(dataset: Dataset, system: str) -> tuple[tuple[Run, Results] | None, str, tuple[str, str] | None]:
    """The run and results of ``system`` on the rewrite switched on (else the one views start from,
    ``systems.default_rewrite``) when ready now, its name in words ("HyDE (smollm2-135m)") and its
    ``(method, llm)``; nothing is computed here."""
    chosen = state.view().rewrite or default_rewrite(dataset)
    if not chosen:
        return None, "", None
    try:
        name = rewritten_name(system, chosen)
    except SpecError:
        return None, "", None
    method, _, llm = chosen.partition(":")
    words = rewrite_words(chosen, dataset)
    if name == system or not ui.is_ready(dataset, name):
        return None, words, (method, llm)
    return ui.safe_results(dataset, name), words, (method, llm)


def _verdict(dataset: Dataset, system: str, run: Run, found: Diagnosis, qid: str) -> Verdict | None:
    item = next((q for q in found.queries if q.query_id == qid), None)
    if item is None:
        return None
    oracle_run, oracle_words = _oracle(dataset)
    rewritten, rewrite_words, rewrite = _rewrite(dataset, system)
    return verdict(
        dataset,
        item,
        run,
        system_label=short_label(system),
        oracle_run=oracle_run,
        oracle_label=oracle_words,
        rewrite_run=rewritten[0] if rewritten else None,
        rewrite_label=rewrite_words,
        depth=found.depth,
        rewrite=rewrite,
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
    computed = ui.safe_results(dataset, system)
    if computed is None:
        return
    run = computed[0]
    found = diagnosis.get_diagnosis(dataset, system, run)
    if found is None:
        return
    words = summary(found, short_label(system), _oracle(dataset)[1])
    st.markdown(f"#### {md(words.headline)}")
    for line in words.class_lines:
        st.markdown(f"- {md(line)}")
    rewritten, rewrite_words, rewrite = _rewrite(dataset, system)
    if rewritten is not None and rewrite is not None:
        told = rewrite_summary(dataset, found, computed[1], rewritten[1], rewritten[0], rewrite, rewrite_words)
        st.markdown(f"- {md(told)}")
    if not words.n_failed:
        st.success("No failures to look at on this task: every judged question has a relevant document in the top 10.")
        return
    cards = worst_failures(found, CARDS)
    columns = st.columns(len(cards))
    for column, item in zip(columns, cards):
        told = _verdict(dataset, system, run, found, item.query_id)
        with column.container(border=True):
            st.markdown(f"**Question {md(item.query_id)}** · {md(item.failure_class)}")
            st.caption(md(shorten(dataset.queries[item.query_id], 220)))
            if told is not None:
                st.markdown(md(told.text))
            if st.button("Open this question", key=f"w_card_{item.query_id}", type="primary", width="stretch"):
                _open(dataset, item.query_id, system)
    st.caption(
        f"A diagnostic, not the benchmark's score: a question fails when none of its relevant documents is in the "
        f"top {found.depth}; the reason is told by retrieving with the question's reference answer "
        f"({md(naming.system_label(diagnosis.chosen_oracle()))})."
    )


def verdict_box(dataset: Dataset, system: str, run: Run, qid: str, picker_key: str) -> None:
    """The explorer's sentence above a question (what was missed, why, what a rewrite changed) and a
    button to the next failed question (``picker_key``: the explorer's query picker, moved with it)."""
    found = diagnosis.get_diagnosis(dataset, system, run)
    told = _verdict(dataset, system, run, found, qid) if found is not None else None
    if found is None or told is None:
        return
    text, button = st.container(key="r2-stack-verdict").columns([5, 1.2], vertical_alignment="center")
    if told.failed:
        text.warning(md(told.text), icon=":material/search_off:")  # not an app error
    else:
        text.markdown(f":green[:material/task_alt:] {md(told.text)}")
    failed = [q.query_id for q in found.queries if q.failed]
    following = next_failure(failed, qid)

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
            ranked = f"rank {told.winner_rank} in {md(short_label(system))}"
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
