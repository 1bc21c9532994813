"""Leaderboard: the R2MED authors' published scores, next to the user's local runs on the same task."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from r2med_core.evaluation import published_metrics, published_metrics_note
from r2med_core.published import (
    ATTRIBUTION,
    KINDS,
    METRICS,
    PUBLISHED_TASKS,
    SYSTEM_KINDS,
    leaderboard,
    published_key_for,
)
from r2med_core.published import published_score as paper_score
from r2med_core.report import metric_label
from r2med_core.sweep import read_grid, sweep_table
from r2med_core.systems import published_kind
from views import runs, state, ui

dataset = ui.current_dataset()
st.title("Leaderboard")
st.caption(ATTRIBUTION)

c1, c2 = st.columns(2)
metric = c1.selectbox("Metric", METRICS, index=METRICS.index("ndcg_at_10"), format_func=metric_label, key="w_lb_metric")
kinds = {
    "retriever": "Retrievers (15)",
    "rewrite": "Query rewriting × LLM × retriever",
    "reranker": "Rerankers over NV-Embed-v2 top 10",
}
kind = c2.selectbox("Settings", KINDS, format_func=kinds.get, key="w_lb_kind")
table = leaderboard(metric, kind)
st.dataframe(
    table[["Avg", *PUBLISHED_TASKS]],
    width="stretch",
    height=min(36 * (len(table) + 1) + 3, 900),
    column_config={t: st.column_config.NumberColumn(t, format="%.4f") for t in [*PUBLISHED_TASKS, "Avg"]},
)
st.caption(
    "Avg is the mean over the 8 tasks, shown only where all 8 were published. Blank cells: the "
    "authors did not publish that metric for that setting."
)
for system_kind in SYSTEM_KINDS[kind]:
    st.caption(str(published_metrics_note(system_kind)))

st.subheader(f"Your runs on {ui.md(dataset.name)}")
if dataset.name not in PUBLISHED_TASKS:
    st.info(
        f"{dataset.name} is not one of the 8 published R2MED tasks, so the paper has no number to compare with. "
        "Your local scores are listed for reference; load a real R2MED task (Hugging Face source, or a local "
        "copy) to see the gap to the paper."
    )
published_task = dataset.name in PUBLISHED_TASKS
rows = []
local_kinds: list[str] = []
prices = ui.settings().prices  # the operator's price per 1M tokens; without one, tokens only
for name in state.systems_in_play():
    computed = ui.safe_results(dataset, name)
    if computed is None:
        continue
    local = computed[1].means[metric] if metric in computed[1].means else float("nan")
    record = ui.get_provenance(dataset, name, computed[0])
    row = {
        "system": ui.system_label(name),
        f"local {metric_label(metric)}": round(local, 4),
        "setting": ui.fidelity_badge(dataset, name) or "benchmark's",
        "time (s)": None if record.wall_seconds is None else round(record.wall_seconds, 2),
        "cost": record.cost(prices),
        "data": record.dataset.get("revision", "")[:12] or record.dataset["fingerprint"][:12],
        "device": record.hardware.get("device"),
    }
    system_kind = published_kind(name)
    if system_kind and system_kind not in local_kinds:
        local_kinds.append(system_kind)
    if published_task:
        key = published_key_for(name)
        paper = paper_score(key, dataset.name, metric) if key else None
        gap = None if paper is None else local - paper
        row["published"] = paper
        row["gap"] = None if gap is None else round(gap, 4)
        if key and system_kind and metric not in published_metrics(system_kind):
            row["flag"] = "the paper did not publish this metric for this kind of system"
        elif paper is None:
            row["flag"] = "no published counterpart"
        else:
            row["flag"] = "⚠ differs from the paper" if abs(gap) > 0.01 else "✓ matches"
    rows.append(row)
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
for system_kind in local_kinds:
    st.caption(str(published_metrics_note(system_kind)))
if published_task:
    st.caption(
        "A gap over 0.01 is flagged: it usually means a different model revision, tokenizer or corpus copy. "
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
        computed = ui.safe_results(dataset, name)
        if computed is not None:
            run, result = computed
            scored.append(
                {
                    "run": name,
                    f"local {metric_label(metric)}": round(result.means.get(metric, float("nan")), 4),
                    "queries evaluated": result.n_evaluated,
                    "queries in the run": len(run),
                }
            )
    st.dataframe(pd.DataFrame(scored), hide_index=True, width="stretch")
    st.caption("Top 100 per query, scored with the benchmark's pytrec_eval settings on this dataset's judgements.")

sweep_dir = ui.load_settings().sweep_dir
if sweep_dir is not None:
    st.subheader("Sweep results")
    grid_rows, grid_notes = read_grid(sweep_dir)
    for note in grid_notes:
        st.warning(ui.md(note))
    if grid_rows:
        st.dataframe(sweep_table(grid_rows, metric, ui.system_label), hide_index=True, width="stretch")
        st.caption(
            f"{metric_label(metric)} of every cell of the sweep the operator ran "
            "(`python -m r2med_core sweep`, locally or on Ray), one row per task."
        )
