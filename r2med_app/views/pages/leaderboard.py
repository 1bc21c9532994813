"""Leaderboard: the R2MED authors' published scores, the results published on R2MED after the paper
(each with its source, setting and whose evaluation it is), and the user's local runs on the same task."""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from r2med_app.views import datasets, markup, naming, notices, serving, state, work
from r2med_app.views.markup import md
from r2med_app.views.panels import runs
from r2med_app.views.panels.mteb import mteb_section, your_mteb_results
from r2med_core.analysis.paper_comparison import compare_with_paper
from r2med_core.analysis.published import (
    ATTRIBUTION,
    GAP_TOLERANCE,
    METRICS,
    PUBLISHED_TASKS,
    SETTING_KINDS,
    SYSTEM_KINDS,
    TASK_HEADERS,
    gains_over,
    leaderboard,
    post_paper_board,
    task_help,
)
from r2med_core.compute.sweep import read_grid, sweep_table
from r2med_core.evaluation import Results, metric_explained, metric_label, published_metrics_note
from r2med_core.intervals import DESCRIPTION
from r2med_core.settings import load_settings
from r2med_core.systems import published_kind

dataset = datasets.current_dataset()
st.title("Leaderboard")
st.caption(ATTRIBUTION)

c1, c2 = st.columns(2)
metric = c1.selectbox("Metric", METRICS, index=METRICS.index("ndcg_at_10"), format_func=metric_label, key="w_lb_metric")
kinds = {
    "retriever": "Retrievers (15)",
    "rewrite": "Query rewriting × LLM × retriever",
    "reranker": "Rerankers over NV-Embed-v2 top 10 and top 100",
}
kind = c2.selectbox("Settings", SETTING_KINDS, format_func=kinds.get, key="w_lb_kind")
table = leaderboard(metric, kind, points=True)
# Every table here fits a 1000 px window: the tasks under short headers (the full name is the tooltip), where
# the files are found only where it differs, and the sources' long words in a list below, not in columns.
SCORES = {
    "Avg": st.column_config.NumberColumn("Avg", format="%.2f", help="The mean over the 8 tasks."),
    **{t: st.column_config.NumberColumn(TASK_HEADERS[t], format="%.2f", help=task_help(t)) for t in PUBLISHED_TASKS},
}
origin = ["origin"] if table["origin"].nunique() > 1 else []
st.dataframe(
    table[[*origin, "Avg", *PUBLISHED_TASKS]],
    width="stretch",
    height=min(36 * (len(table) + 1) + 3, 900),
    column_config={
        **SCORES,
        "origin": st.column_config.TextColumn("origin", help="Where the setting's files are: *first commit* below."),
    },
)
st.caption(
    f"{md(metric_explained(metric))} × 100, as the paper prints it. Avg is the mean over the 8 tasks, "
    "shown only where all 8 were published. Blank cells: the authors did not publish that metric for that setting. "
    "*first commit*: the setting's files are only in the benchmark repository's first commit (HyDE with "
    "o3-mini, the paper's best figure; Search-R1 with BM25; the rerankers over the top 100, whose reranked "
    "run holds only those 100 documents)."
)
for system_kind in SYSTEM_KINDS[kind]:
    st.caption(str(published_metrics_note(system_kind)))

st.subheader("Published after the paper")
later = post_paper_board()
st.dataframe(later[["Avg", *PUBLISHED_TASKS]], width="stretch", column_config=SCORES, placeholder="")
quoted = later.index[later["evaluation"] == "benchmark's own"]
st.caption(
    "nDCG@10 × 100 as each paper prints it, transcribed with its source (below). Each is the later paper's "
    "authors' re-run, with their own code, not the benchmark's evaluation"
    + (f", except {md(', '.join(quoted))}: the R2MED paper's numbers, quoted" if len(quoted) else "")
    + ". Blank tasks: the source gives only the average."
)
with st.expander("What each row ran, and its source"):
    for model, row in later.iterrows():
        stage = f" First stage: {md(row['first stage'])}" + (
            f", top {row['depth']}." if pd.notna(row["depth"]) else "."
        )
        st.markdown(
            f"- **{md(model)}** ({md(row['evaluation'])}): {md(row['setting'])}."
            f"{stage if row['first stage'] else ''} "
            f"[{md(row['paper'])}]({row['url']}), {md(row['table'])}."
            + (f" *{md(row['note'])}*" if row["note"] else "")
        )
per_task = later.dropna(subset=list(PUBLISHED_TASKS)).index.tolist()
reference = st.selectbox(
    "Gain per task over",
    per_task,
    index=per_task.index("NV-Embed-v2"),
    key="w_lb_reference",
    help="Each row minus this one, task by task: where a model's gain comes from.",
)
gains = gains_over(reference)
st.dataframe(
    gains.style.format("{:+.2f}", na_rep="").map(
        lambda v: "" if pd.isna(v) or v == 0 else f"color: {'#1a7f37' if v > 0 else '#cf222e'}"
    ),
    width="stretch",
    column_config={t: st.column_config.Column(TASK_HEADERS[t], help=task_help(t)) for t in PUBLISHED_TASKS},
    placeholder="",
)
st.caption(f"nDCG@10 × 100 minus {md(reference)}'s, per task and on the average; green: higher, red: lower.")

mteb_section(metric)

st.subheader(f"Your runs on {md(dataset.name)}")
if dataset.name not in PUBLISHED_TASKS:
    st.info(
        f"{dataset.name} is not one of the 8 published R2MED tasks, so the paper has no number to compare with. "
        "Your local scores are listed for reference; load a real R2MED task (Hugging Face source, or a local "
        "copy) to see the gap to the paper."
    )
published_task = dataset.name in PUBLISHED_TASKS


def _interval(result: Results) -> str:
    """The local mean's 95 % bootstrap interval (r2med_core.intervals), as text."""
    interval = work.get_intervals(dataset, result, [metric]).get(metric)
    return interval.text(3) if interval else "–"


def _number(value: float | None, form: str) -> str:
    return "–" if value is None or math.isnan(value) else format(value, form)


# One column per system and one row per field (a column per field was cut at the edge from 1440 px down), in
# text: a cell wraps where a grid's column would not, so the whole table fits from 800 px up.
mine: dict[str, dict[str, str]] = {}
local_kinds: list[str] = []
prices = serving.settings().prices  # the operator's price per 1M tokens; without one, tokens only
for name in state.systems_in_play():
    computed = work.results(dataset, name)
    if computed is None:
        continue
    local = computed[1].means.get(metric, float("nan"))
    record = work.get_provenance(dataset, name, computed[0])
    column = {
        f"local {metric_label(metric)} (95% CI)": f"{_number(local, '.4f')} {_interval(computed[1])}",
        "setting": notices.fidelity_badge(dataset, name) or "benchmark's",
    }
    if published_task:
        versus = compare_with_paper(name, dataset.name, metric, local)
        column |= {
            "published": _number(versus.paper, ".4f"),
            "gap (local − published)": _number(versus.gap, "+.4f"),
            "versus the paper": versus.flag,
        }
    column |= {
        "time (s)": _number(record.wall_seconds, ".2f"),
        "cost": record.cost(prices),
        "data": record.dataset.get("revision", "")[:12] or record.dataset["fingerprint"][:12],
        "device": str(record.hardware.get("device") or "–"),
    }
    if outcomes := record.outcomes():  # an LLM reranking whose replies could not be used, counted
        column["LLM replies"] = "; ".join(outcomes)
    system_kind = published_kind(name)
    if system_kind and system_kind not in local_kinds:
        local_kinds.append(system_kind)
    mine[naming.system_label(name)] = column
if mine:
    markup.table(pd.DataFrame(mine).fillna("–"))
for system_kind in local_kinds:
    st.caption(str(published_metrics_note(system_kind)))
if published_task:
    st.caption(
        f"Local and published scores here are on the 0–1 scale; 95% CI: the local mean's {DESCRIPTION}. "
        f"A gap over {GAP_TOLERANCE} is flagged: it usually "
        "means a different model revision, tokenizer or corpus copy. "
        "Systems without a published counterpart (MiniLM, bm25s, fusions …) have no paper number."
    )

st.subheader("Your imported runs")
imported = runs.offered(dataset)
if not imported:
    st.caption(
        "None for this dataset yet: upload a TREC run or a score JSON under **Your runs** in the sidebar "
        "(or the operator puts it in the runs folder), and it is scored here like the systems above."
    )
else:
    scored = []
    for name in imported:
        computed = work.results(dataset, name)
        if computed is not None:
            run, result = computed
            scored.append(
                {
                    "run": name,
                    f"local {metric_label(metric)}": round(result.means.get(metric, float("nan")), 4),
                    "95% CI": _interval(result),
                    "queries evaluated": result.n_evaluated,
                    "queries in the run": len(run),
                }
            )
    st.dataframe(pd.DataFrame(scored), hide_index=True, width="stretch")
    st.caption(
        "Top 100 per query, scored with the benchmark's pytrec_eval settings on this dataset's judgements; "
        f"95% CI: the {DESCRIPTION}."
    )

your_mteb_results(metric)

sweep_dir = load_settings().sweep_dir
if sweep_dir is not None:
    st.subheader("Sweep results")
    grid_rows, grid_notes = read_grid(sweep_dir)
    for note in grid_notes:
        st.warning(md(note))
    if grid_rows:
        st.dataframe(sweep_table(grid_rows, metric, naming.system_label), hide_index=True, width="stretch")
        st.caption(
            f"{metric_label(metric)} of every cell of the sweep the operator ran "
            "(`python -m r2med_core sweep`, locally or on Ray), one row per task."
        )
