"""The LLM judge in the app: "Why is this relevant?" under a gold document (explorer; told from the
data, offline, when no live LLM is set), and LLM relevance proposals with the judge's agreement with
the qrels (annotations page).

Nothing here contacts an LLM without a click, and nothing comes from the URL: the endpoint is the
sidebar's (``live.live_llm``, which applies the operator's key rule), or, for the proposals and the
agreement, the offline demo model the operator picks (as on the Rewriting page; labelled demo quality,
never a benchmark setting). Replies are untrusted text, shown escaped. Long batches run as background
jobs (progress, Cancel); graded pairs are cached, so pressing the button again resumes.
"""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from r2med_app.views import live, naming, serving, state, work
from r2med_app.views.markup import md
from r2med_core import Dataset
from r2med_core.analysis.explore import relevance_from_data
from r2med_core.compute.workbench import Ready
from r2med_core.judging.annotations import AnnotationStore
from r2med_core.judging.llm_judge import (
    DEFAULT_THRESHOLD,
    EXPLAIN_PROMPT_VERSION,
    JUDGE_PROMPT_NAME,
    JUDGE_PROMPT_VERSION,
    BridgeExplanation,
    cached_explanation,
    estimate,
    explain_relevance,
    judge_model,
    judged_sample,
    proposer_name,
    recorded_agreements,
    unjudged_pairs,
)
from r2med_core.llm.batch import BatchReport
from r2med_core.llm.client import AnyEndpoint, LocalEndpoint
from r2med_core.llm.generation import GenerationError
from r2med_core.runs import Run

NO_ENDPOINT = "Set a model (and base URL / key if needed) under **Live LLM endpoint** in the sidebar."
DEPTHS = [3, 5, 10]


# --------------------------------------------------------------------------- explorer: why relevant


def _show_explanation(found: BridgeExplanation) -> None:
    if found.text:
        st.markdown(md(found.text))
        st.caption(
            f"Named by {md(found.model)} · an LLM's reply, not checked by anyone · prompt "
            f"{md(EXPLAIN_PROMPT_VERSION)}" + (" · from the cache" if found.from_cache else "")
        )
    elif found.error:
        st.error(f"No explanation: {md(found.error)}")


def _show_from_data(dataset: Dataset, query_id: str, doc_id: str) -> None:
    st.markdown("\n".join(f"- {md(line)}" for line in relevance_from_data(dataset, query_id, doc_id)))
    st.caption(
        "From the data, without an LLM: the reference answer and the words linking it to this document."
        + ("" if serving.read_only() else " For a model's reading, set a model under Live LLM endpoint in the sidebar.")
    )


def why_relevant(dataset: Dataset, query_id: str, doc_id: str, within: str) -> None:
    """The "Why is this relevant?" button of one gold document, and its answer once asked for.

    Without a live LLM the answer is told from the data (works offline, on the demo too); with one, the
    LLM is asked. An explanation asked for earlier with the same model is shown from the cache without
    a request.
    """
    endpoint = live.live_endpoint()
    query, passage = dataset.queries[query_id], dataset.corpus[doc_id]
    earlier = cached_explanation(endpoint, query, passage) if endpoint is not None else None
    key = state.widget_key("why", state.scope(within, doc_id))
    clicked = st.button(
        "Why is this relevant?",
        key=key,
        help=(
            "Asks the sidebar's live LLM to name the reasoning step linking the query to this document "
            "(one or two sentences; cached per model)."
            if endpoint is not None
            else "Tells it from the data: the reference answer and the words linking it to this document "
            "(no LLM; set one under Live LLM endpoint in the sidebar for a model's reading)."
        ),
    )
    if endpoint is None:
        opened = f"{key}_opened"  # stays shown on the reruns after the click, as a cached LLM reply does
        if clicked or st.session_state.get(opened):
            st.session_state[opened] = True
            _show_from_data(dataset, query_id, doc_id)
        return
    if clicked and earlier is None:
        with st.spinner(f"Asking {endpoint.model} …"):
            earlier = explain_relevance(endpoint, query, passage)
    if earlier is not None:
        _show_explanation(earlier)


# --------------------------------------------------------------------------- annotations: proposals


def _judge_choice() -> AnyEndpoint | None:
    """The sidebar's live endpoint, or the offline demo model when the operator picks it (said so
    where it is picked); None, with the reason shown, when neither can judge."""
    source = st.radio(
        "Judge model",
        [live.LIVE_MODEL, live.OFFLINE_MODEL],
        horizontal=True,
        key="w_judge_source",
        help=live.OFFLINE_HELP,
    )
    if source == live.LIVE_MODEL:
        endpoint = live.live_endpoint()
        if endpoint is None:
            st.info(NO_ENDPOINT)
        return endpoint
    local = LocalEndpoint()
    try:
        local.location()
    except GenerationError as err:
        st.error(md(err))
        return None
    st.caption(
        "The offline demo model runs on this server's CPU (no key, no cost, seconds a pair): it shows how "
        "judging works without a server. A 135M model rarely gives a usable score and its grades are demo "
        "quality: not a benchmark setting, and no kappa to report."
    )
    return local


def _report_lines(judged: BatchReport) -> None:
    (st.success if judged.complete else st.warning)(md(judged.summary()))
    if judged.problem():
        st.error(md(judged.problem()))


def panel(dataset: Dataset, store: AnnotationStore) -> None:
    """LLM relevance proposals for unjudged top-k documents, and the judge's agreement with the qrels."""
    st.subheader("LLM relevance proposals")
    st.caption(
        f"An LLM grades retrieved documents the qrels do not judge, 0-3, with an {md(JUDGE_PROMPT_NAME)} "
        f"(version {md(JUDGE_PROMPT_VERSION)}): it weighs how well the document matches the query's intent (M) "
        "and how trustworthy it is (T), then gives a final score. Documents graded at or above the threshold "
        "enter the review queue above as proposals *proposed by* the model; none counts as a judgement until a "
        "person accepts it. Not part of the benchmark."
    )
    if serving.read_only():
        st.info("The LLM judge is off in this read-only demo.")
        return
    endpoint = _judge_choice()
    if endpoint is None:
        return
    in_play = state.systems_in_play()
    ready = [name for name in in_play if work.ready(dataset, name)]
    if not ready:
        st.caption("Choose systems in the sidebar (and compute them) to judge what they retrieve.")
        return
    c1, c2, c3 = st.columns([3, 1, 1])
    chosen = c1.multiselect(
        "Systems whose top documents are judged",
        ready,
        default=ready,
        format_func=naming.system_label,
        key="w_judge_sys",
    )
    depth = c2.select_slider("Top", DEPTHS, value=10, key="w_judge_depth")
    threshold = c3.selectbox(
        "Propose from grade", [1, 2, 3], index=[1, 2, 3].index(DEFAULT_THRESHOLD), key="w_judge_threshold"
    )
    runs = [run for name in chosen if (run := work.run(dataset, name)) is not None]
    if len(in_play) > len(ready):
        st.caption(f"{len(in_play) - len(ready)} system(s) in play are not computed yet and are not offered.")
    pairs = unjudged_pairs(dataset, runs, depth)
    if not pairs:
        st.caption("Every document in these top lists is judged already: nothing to propose.")
    else:
        cost = estimate(dataset, pairs, endpoint)
        st.caption(
            f"{md(cost.describe())} to {md(endpoint.url)} · model {md(judge_model(endpoint))}. Proposals "
            f"are recorded as “{md(proposer_name(endpoint))}”."
        )
        found = work.bench().proposals(dataset, store, endpoint, pairs, threshold, cost)
        if isinstance(found, Ready):
            judged, proposed = found.value
            _report_lines(judged)
            st.caption(
                f"{proposed.added} new proposal(s) in the review queue; {proposed.already_proposed} proposed "
                f"before; {proposed.below_threshold} graded below {threshold}."
            )
        work.compute_panel(found, key="w_judge_start")
    _agreement(dataset, endpoint, runs, threshold)


def _kappa(value: object) -> str:
    """A kappa as shown; anything that is not a finite number (NaN, a damaged record) is "undefined"."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "undefined"
    return f"{number:.2f}" if math.isfinite(number) else "undefined"


def _agreement(dataset: Dataset, endpoint: AnyEndpoint, runs: list[Run], threshold: int) -> None:
    st.markdown("**How far to trust the judge: agreement with the qrels on this task**")
    has_zero = any(grade <= 0 for grades in dataset.qrels.values() for grade in grades.values())
    a1, a2, a3 = st.columns([1, 1, 3])
    size = a1.number_input("Judged pairs to sample", 5, 1000, value=40, step=5, key="w_judge_sample")
    seed = a2.number_input("Sample seed", 0, 10_000, value=0, key="w_judge_seed", help="Another seed, another sample.")
    assumed = a3.checkbox(
        "Add as many retrieved but unjudged documents, counted non-relevant",
        value=not has_zero and bool(runs),
        disabled=not runs,
        key="w_judge_assumed",
        help="This task's qrels list only relevant documents, so on judged pairs alone kappa is undefined. "
        "The added documents come from the first chosen system's top list and count as grade 0, as the "
        "evaluation counts them; some may be relevant, so the agreement is then a lower bound.",
    )
    negatives = runs[0] if assumed and runs else None
    sample = judged_sample(dataset, int(size), seed=int(seed), assumed_negatives=negatives, k=10)
    if not sample:
        st.caption("This task has no judged pairs in its corpus to compare with.")
        return
    cost = estimate(dataset, sample, endpoint)
    st.caption(md(cost.describe()) + f" · the same sample for seed {int(seed)} every time, so a rerun costs nothing.")
    found = work.bench().agreement(dataset, endpoint, sample, threshold, cost)
    if isinstance(found, Ready):
        judged, measured = found.value
        _report_lines(judged)
        m = st.columns(3)
        m[0].metric(
            f"Cohen's kappa (relevant = grade ≥ {threshold})",
            _kappa(measured.kappa),
            help="Relevant or not, judge against qrels: 1 = full agreement, 0 = chance.",
        )
        m[1].metric("Cohen's kappa on grades", _kappa(measured.graded_kappa))
        m[2].metric("Same relevant / not", f"{measured.agreed} of {measured.pairs}")
        confusion = measured.confusion.copy()
        confusion.index = [
            f"qrels {g}" + (" (assumed)" if g == 0 and measured.assumed else "") for g in confusion.index
        ]
        confusion.columns = [f"LLM {g}" for g in confusion.columns]
        st.dataframe(confusion.rename_axis("qrels grade").reset_index(), hide_index=True)
        if math.isnan(measured.kappa):
            st.caption(
                "Kappa is undefined when one side uses a single class (every pair relevant, or every pair "
                "not): the confusion matrix still shows where the judge's grades fall."
            )
        if measured.assumed:
            st.caption(f"{measured.assumed} of the {measured.pairs} pairs are unjudged documents counted grade 0.")
    work.compute_panel(found, key="w_judge_agree")
    _recorded()


def _recorded() -> None:
    rows = [
        {
            "task": str(found.get("task")),
            "model": str(found.get("model")),
            "prompt": str(found.get("prompt")),
            "pairs": found.get("pairs"),
            "assumed grade 0": found.get("assumed"),
            "relevant from": found.get("threshold"),
            "Cohen's kappa": _kappa(found.get("kappa")),
            "kappa on grades": _kappa(found.get("graded_kappa")),
        }
        for found in recorded_agreements()
    ]
    if rows:
        st.caption("Agreement measured so far, per task and model:")
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
