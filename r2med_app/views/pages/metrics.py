"""Metrics: the official measures per system, metric@k curves, per-query distributions, downloads."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from r2med_app.views import datasets, markup, naming, notices, serving, state, work
from r2med_app.views.markup import md
from r2med_app.views.panels import diagnosis, saved_reports
from r2med_app.views.panels.pooling import section as pooling_section
from r2med_core.evaluation import ALL_METRICS, MAIN_METRICS, metric_label
from r2med_core.intervals import DESCRIPTION
from r2med_core.reporting.figures import curves_figure, means_figure, per_query_figure
from r2med_core.reporting.tables import means_by_metric, means_table, per_query_long
from r2med_core.runs import format_trec, safe_name
from r2med_core.systems import dense_instruction_notes

dataset = datasets.current_dataset()
st.title("Metrics")
notices.demo_banner(dataset)

names = state.systems_in_play()
if not names:
    st.info("Choose systems in the sidebar.")
    st.stop()
# The page below is one slot: while a newly chosen system loads, its "Getting ready" message takes the slot's
# place at once, so the previous selection's numbers never stay on screen, greyed, under the new one. Compute
# buttons, progress and errors go in the container above it.
panels = st.container()
body = st.empty()
with panels:
    computed = {name: work.results(dataset, name, slot=body) for name in names}
results = {name: c[1] for name, c in computed.items() if c is not None}
runs = {name: c[0] for name, c in computed.items() if c is not None}
if not results:
    st.stop()
with body.container():
    labels = {name: naming.system_label(name) for name in results}
    for note in dict.fromkeys(note for name in results for note in dense_instruction_notes(dataset, name)):
        st.caption(md(note))
    for name, result in results.items():  # what the numbers need said: no judged query matched, empty queries …
        for note in result.notes:
            st.caption(f"{md(labels[name])}: {md(note)}")

    means = means_table(list(results.values()), labels)
    st.subheader("Official metrics")
    shown = st.multiselect(
        "Metrics", list(ALL_METRICS), default=list(MAIN_METRICS), format_func=metric_label, key="w_metrics"
    )
    intervals = {name: work.get_intervals(dataset, result, shown) for name, result in results.items()}
    st.plotly_chart(means_figure(list(results.values()), labels, shown, intervals), width="stretch", key="metric_bars")
    # One row per metric and one column per system (mean and interval in one cell, meanings in words): the
    # whole table fits from 800 px up, where a column per metric and per interval was cut at the edge.
    markup.table(means_by_metric(list(results.values()), labels, shown, intervals))
    for name in results:
        if setting := notices.fidelity_badge(dataset, name):
            st.caption(f"{md(labels[name])}: {md(setting)}")
    st.caption(
        f"Error bars and the intervals in brackets: the {DESCRIPTION}. With a few dozen queries, means whose intervals "
        "overlap widely may not differ: the Compare page tests the difference itself."
    )
    st.download_button(
        "Download metrics (CSV)", means.to_csv(index=False), file_name=f"{dataset.name}_metrics.csv", mime="text/csv"
    )
    saved_reports.download_buttons(
        dataset,
        [(runs[name], results[name]) for name in results],
        chosen=names,
        metrics=shown or list(MAIN_METRICS),
        title="Metrics",
    )

    pooling_section(dataset, runs)

    st.subheader("Metric @ k")
    curve_fig = curves_figure(list(results.values()), labels)
    st.plotly_chart(curve_fig, width="stretch", key="metric_curves")

    st.subheader("Per-query distribution")
    metric = st.selectbox("Metric", list(MAIN_METRICS), format_func=metric_label, key="w_dist_metric")
    st.plotly_chart(per_query_figure(list(results.values()), labels, metric), width="stretch", key="metric_box")
    st.download_button(
        "Download per-query metrics (CSV)",
        per_query_long(list(results.values()), labels, None).to_csv(index=False),
        file_name=f"{dataset.name}_per_query.csv",
        mime="text/csv",
    )

    diagnosis.metrics_section(dataset, runs)

    st.subheader("Results files and runs")
    for name, result in results.items():
        cols = st.columns([3, 1, 1, 1], vertical_alignment="center")
        cols[0].markdown(f"**{labels[name]}** · `{name}`")
        payload = result.to_json()
        payload["model_name"] = safe_name(name)
        cols[1].download_button(
            "Results JSON",
            json.dumps(payload, indent=2),
            file_name=f"{safe_name(name)}.json",
            mime="application/json",
            key=f"json_{name}",
        )
        cols[2].download_button(
            "TREC run",
            format_trec(runs[name], tag=name),
            file_name=f"{safe_name(name)}.trec",
            mime="text/plain",
            key=f"trec_{name}",
        )
        record = work.get_provenance(dataset, name, runs[name])
        with cols[3].popover("Provenance", help="Where these numbers come from: data, models, code, machine."):
            # Whole values, wrapped inside the popover (a grid cut them at its right edge).
            markup.table(
                pd.DataFrame(record.summary_rows(serving.settings().prices), columns=["what", "value"]), hide_index=True
            )
            st.download_button(
                "Provenance JSON",
                json.dumps(record.to_json(), indent=2),
                file_name=f"{safe_name(name)}.provenance.json",
                mime="application/json",
                key=f"prov_{name}",
            )
