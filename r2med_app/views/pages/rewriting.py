"""Rewriting: what query rewriting does on this task (per query, per LLM), and live generation of
new rewrites with an LLM endpoint — resumable, cached, saved in the official file format.
"""

from __future__ import annotations

from dataclasses import replace

import plotly.express as px
import streamlit as st

from r2med_app.views import charts, datasets, live, naming, notices, serving, state, work
from r2med_app.views.markup import md
from r2med_core.analysis.explore import llm_spread, per_query_delta, rewrite_outcomes, shorten
from r2med_core.compute.workbench import Ready
from r2med_core.llm.client import Endpoint, LocalEndpoint, default_llm_name
from r2med_core.llm.generation import (
    GENERATION_METHODS,
    GenerationError,
    estimate_generation,
    is_shipped_set,
    new_set_name,
    rewrites_text,
)
from r2med_core.llm.prompts import PROMPT_SETS, Prompts, build_messages, load_examples
from r2med_core.systems import default_rewrite, queries_left_out, rewrite_origin, rewrite_words, rewritten_name

dataset = datasets.current_dataset()
v = state.view()
st.title("Query rewriting")
notices.demo_banner(dataset)

options = [f"{m}:{llm}" for m, llm in dataset.rewrite_options()]
systems = list(v.systems) or list(state.DEFAULT_SYSTEMS)

# ------------------------------------------------------------------ the effect of one rewrite
st.subheader("What the rewrite does, query by query")
if not options:
    st.info("This dataset has no rewrites yet. Generate some below with a live LLM.")
else:
    c1, c2 = st.columns(2)
    system = c1.selectbox("System", systems, format_func=naming.system_label, key="w_rw_system")
    start = v.rewrite if v.rewrite in options else default_rewrite(dataset)
    chosen = c2.selectbox(
        "Rewrite",
        options,
        index=options.index(start),
        format_func=lambda o: rewrite_words(o, dataset),
        key="w_rw_rewrite",
    )
    method, _, llm = chosen.partition(":")
    st.caption(f"{md(rewrite_words(chosen))}: {md(rewrite_origin(dataset, (method, llm)))}.")
    if left_out := queries_left_out(dataset, tuple(chosen.split(":", 1))):
        st.caption(
            f"{left_out} of {len(dataset.queries)} queries are not in the {md(chosen)} rewrite file: with it "
            "they are not retrieved, so not evaluated (as in the benchmark)."
        )
    base, with_rw = work.results(dataset, system), work.results(dataset, rewritten_name(system, chosen))
    if base and with_rw:
        delta = per_query_delta(base[1], with_rw[1], "ndcg_at_10")
        outcome = rewrite_outcomes(delta)
        m = st.columns(4)
        m[0].metric("nDCG@10 without", f"{base[1].means['ndcg_at_10']:.3f}")
        m[1].metric(
            "with the rewrite",
            f"{with_rw[1].means['ndcg_at_10']:.3f}",
            delta=f"{with_rw[1].means['ndcg_at_10'] - base[1].means['ndcg_at_10']:+.3f}",
        )
        m[2].metric("queries helped", outcome["helped"])
        m[3].metric("queries hurt", outcome["hurt"])
        fig = charts.delta_bars(
            dataset, delta, "Δ nDCG@10 (with − without)", ("helped", "hurt", "no change"), ("without", "with")
        )
        st.plotly_chart(fig, width="stretch", key="rewrite_effect")

    # -------------------------------------------------------------- spread across LLMs for one query
    llms = [llm for m, llm in dataset.rewrite_options() if m == method]
    st.subheader(f"One query across the available rewrite sets ({method})")
    query_ids = list(dataset.queries)
    qid = st.selectbox(
        "Query",
        query_ids,
        index=query_ids.index(v.q) if v.q in query_ids else 0,
        format_func=lambda q: f"{q} · {shorten(dataset.queries[q], 100)}",
        key="w_rw_query",
    )
    by_llm = {}
    for llm in llms:
        computed = work.results(dataset, rewritten_name(system, f"{method}:{llm}"))
        if computed:
            by_llm[rewrite_words(f"{method}:{llm}", dataset)] = computed[1]
    rows = llm_spread(by_llm, qid, base[1] if base else None)
    if rows.empty:
        st.caption("This query has no judgements.")
    else:
        fig = px.strip(
            rows,
            x="metric",
            y="value",
            color="llm",
            hover_name="llm",
            labels={"value": "score", "metric": "", "llm": "rewrite set"},
        )
        fig.update_traces(marker={"size": 12})
        st.plotly_chart(fig, width="stretch", key="llm_spread")
        st.caption(
            f"Each dot is one {method} rewrite set's passage for query {qid} run through {naming.system_label(system)} "
            "(a set written by hand says so); 'no rewrite' is the original query."
        )

# ------------------------------------------------------------------ live generation
st.subheader("Generate rewrites with an LLM")
if serving.read_only():
    st.info("Generating rewrites is off in this read-only demo.")
    st.stop()
endpoint = live.live_endpoint()
c1, c2, c3 = st.columns(3)
gen_method = c1.selectbox("Method", GENERATION_METHODS, key="w_gen_method")
source = c2.radio(
    "Model",
    [live.LIVE_MODEL, live.OFFLINE_MODEL],
    key="w_gen_source",
    help=live.OFFLINE_HELP,
)
p1, p2 = st.columns(2)
prompt_set = p1.radio(
    "Prompts",
    PROMPT_SETS,
    format_func={"official": "the benchmark's (per task)", "explorer": "R2MED Explorer's own"}.get,
    horizontal=True,
    key="w_gen_prompts",
    help="The benchmark's per-task HyDE / query2doc / LaMer prompts make new rewrites comparable with the "
    "published ones; the explorer's own wording is an alternative, not the benchmark's.",
)
sampling = p2.radio(
    "Sampling",
    ["the benchmark's", "the sidebar's temperature and max tokens"],
    horizontal=True,
    key="w_gen_sampling",
    help="The benchmark's: temperature 0.7, seed 42 and at most 10240 tokens; GPT-4o / o1 / o3 / DeepSeek-R1 "
    "class models 0.8 with top_p 0.8 and no token limit.",
)
examples: tuple[tuple[str, str], ...] = ()
if gen_method == "query2doc" and prompt_set == "official":
    uploaded = st.file_uploader(
        "query2doc few-shot examples (text, or JSON {task: text}); without a file the prompt is zero-shot",
        type=["txt", "json"],
        key="w_gen_examples",
    )
    if uploaded is not None:
        try:
            examples = load_examples(uploaded.getvalue(), uploaded.name, serving.settings().upload_max_bytes)
        except GenerationError as err:
            st.error(md(err))
prompts = Prompts(prompt_set, examples)
st.caption("Prompts: " + md(prompts.describe(gen_method, dataset.name, dataset.family)) + ".")
chosen_endpoint = endpoint if source == live.LIVE_MODEL else LocalEndpoint()
if isinstance(chosen_endpoint, Endpoint) and sampling == "the benchmark's":
    chosen_endpoint = replace(chosen_endpoint, temperature=None, top_p=None, seed=None, max_tokens=None)
default_name = new_set_name(dataset, gen_method, chosen_endpoint) if chosen_endpoint else ""
llm_name = c3.text_input(
    "Save as LLM name",
    value=default_name,
    key=f"w_gen_name_{default_name}",
    help="The benchmark's name for a reasoning model (e.g. sky-32b, qwq-32b) gives its system message and "
    "its answer extraction.",
)
if llm_name and is_shipped_set(dataset, gen_method, llm_name):
    st.warning(
        f"This dataset already has a `{gen_method}:{md(llm_name)}` rewrite set: a shipped file of that name wins "
        "over a new generation, so choose another name to see yours."
    )
all_queries = list(dataset.queries)
q1, q2 = st.columns([1, 3])
first_n = q1.number_input(
    "First N queries",
    min_value=1,
    max_value=max(1, len(all_queries)),
    value=max(1, len(all_queries)),
    step=1,
    key="w_gen_first",
    help="Try a method on a few queries before all of them (what is generated is cached: the rest comes later).",
)
picked = q2.multiselect(
    "… or these queries",
    all_queries,
    format_func=lambda q: f"{q} · {shorten(dataset.queries[q], 60)}",
    key="w_gen_queries",
    help="When queries are chosen here, only they are generated (First N is then not used).",
)
batch = [q for q in all_queries if q in set(picked)] or all_queries[: int(first_n)]
if gen_method != "lamer" and dataset.queries:
    with st.expander("The prompt sent for the first query"):
        first_qid = batch[0] if batch else all_queries[0]
        for message in build_messages(
            gen_method,
            dataset.queries[first_qid],
            dataset.family,
            task=dataset.name,
            prompts=prompts,
            llm_name=llm_name or default_name,
        ):
            st.caption(message["role"])
            st.text(message["content"])
if chosen_endpoint is None:
    st.info("Set a model (and base URL / key if needed) under **Live LLM endpoint** in the sidebar.")
else:
    sent = (
        {**chosen_endpoint.sampling(), "max_tokens": chosen_endpoint.token_budget() or "none"}
        if isinstance(chosen_endpoint, Endpoint)
        else {}
    )
    st.caption(
        f"{len(batch)} of {len(all_queries)} queries · {gen_method} · {md(chosen_endpoint.url)} · saved as "
        f"`{gen_method}:{llm_name}`"
        + (" · sampling " + ", ".join(f"{k} {v}" for k, v in sent.items()) if sent else "")
        + ". Replies are cached on disk: a stopped or failed batch resumes where it stopped, and re-running "
        "costs nothing."
    )
    workers = serving.settings().llm_concurrency  # the operator's (secrets too): 1 for llama-cpp-python, more for vLLM
    name = llm_name or default_name or default_llm_name(getattr(chosen_endpoint, "model", "llm"))
    first_stage = work.run(dataset, "bm25") if gen_method == "lamer" else None
    if gen_method == "lamer" and first_stage is None:  # its Compute button or progress is drawn
        st.stop()
    try:
        estimate = estimate_generation(
            dataset, gen_method, chosen_endpoint, llm_name=name, first_stage=first_stage, prompts=prompts,
            workers=workers, query_ids=batch,
        )  # fmt: skip
        st.caption(md(estimate.describe()[:1].upper() + estimate.describe()[1:]) + f" · {workers} at a time.")
    except GenerationError as err:
        st.caption(md(err))
    found = work.bench().generation(
        dataset, gen_method, chosen_endpoint, llm_name=name, query_ids=batch, prompts=prompts,
        first_stage=first_stage, workers=workers,
    )  # fmt: skip
    if isinstance(found, Ready):
        report = found.value
        (st.success if report.complete else st.warning)(md(report.summary()))
        if report.problem():
            st.error(md(report.problem()))
        if report.results:
            st.caption(
                f"Switch the rewrite to `{gen_method}:{name}` in the sidebar to explore it "
                "(the app picks recorded generations up automatically)."
            )
            st.download_button(
                "Download query_with_hydoc.jsonl (official format)",
                rewrites_text(report.results, dataset),
                file_name="query_with_hydoc.jsonl",
                mime="application/jsonl",
                help=f"Put it at <task>/{gen_method}/{name}/query_with_hydoc.jsonl to share it.",
            )
    work.compute_panel(found, key="w_gen_start")  # Generate; once started, the job's progress, ETA and Cancel
