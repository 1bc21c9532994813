"""Compare systems: per-query nDCG@10 deltas, win/tie/loss, paired significance tests, and the
queries with the largest gains and losses (each a link into the explorer).
"""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from r2med_app.views import charts, datasets, markup, naming, notices, state, work
from r2med_app.views.markup import md
from r2med_app.views.panels import saved_reports
from r2med_core.analysis.explore import per_query_delta, shorten, verdict
from r2med_core.evaluation import (
    ALL_METRICS,
    MAIN_METRICS,
    Results,
    compare,
    metric_explained,
    metric_label,
    randomization_words,
)
from r2med_core.intervals import DESCRIPTION, PAIRED_DESCRIPTION
from r2med_core.reporting.figures import equal_axes
from r2med_core.reporting.tables import test_cells

dataset = datasets.current_dataset()
v = state.view()
st.title("Compare systems")
notices.demo_banner(dataset)
saved_reports.reopen_section(dataset)

options = state.systems_in_play()
if not options:
    st.info("No systems are in play: choose some under **Systems in play** in the sidebar to compare them.")
    st.stop()
# Until the user chooses, compare every system in play (their rewrites too), the first as the baseline.
defaults = options
c1, c2 = st.columns([3, 1])
c1.multiselect(
    "Systems (the first is the baseline)",
    options,
    format_func=naming.system_label,
    key=state.bound("compare", options, defaults),
    on_change=state.store("compare"),
)
metric = c2.selectbox(
    "Metric", ALL_METRICS, index=ALL_METRICS.index("ndcg_at_10"), format_func=metric_label, key="w_compare_metric"
)
name = metric_label(metric)
st.caption(md(metric_explained(metric)))
chosen = st.session_state["w_compare"]
if len(chosen) < 2:
    st.info(
        "Pick at least two systems above: the first is the baseline, each other system is tested against it. "
        "Switch HyDE on in the sidebar to compare each system with its rewrite."
    )
    st.stop()


def _interval_text(result: Results) -> str:
    interval = work.get_intervals(dataset, result, [metric])[metric]
    return interval.text() if interval else "–"


# The page below is one slot, as on Metrics: a newly chosen system's "Getting ready" takes the old comparison's
# place at once; Compute buttons, progress and errors go in the container above it.
panels = st.container()
body = st.empty()
with panels:
    computed = [c for c in (work.results(dataset, name, slot=body) for name in chosen) if c is not None]
if len(computed) < 2:
    st.stop()
with body.container():
    results = [c[1] for c in computed]  # the systems not computed yet show a Compute button above
    baseline, others = results[0], results[1:]
    tests = compare(baseline, others, metric)

    st.subheader("Paired significance")
    for test, other in zip(tests, others):
        st.markdown(f"**{md(naming.system_label(other.run_name))}**: {md(verdict(test, name))}.")
    for result in results:  # what the numbers need said (an LLM reranking whose replies were unusable …)
        for note in result.notes:
            st.caption(f"{md(naming.system_label(result.run_name))}: {md(note)}")

    rows = []
    for test, other in zip(tests, others):
        # One HTML table that wraps: the tests, then each mean with its interval in one cell, so it reads
        # whole from 800 px on (a grid hid its last columns behind a scroll bar even at 1440 px).
        rows.append(
            {"system": naming.system_label(other.run_name)}
            | test_cells(test)
            | {
                f"{name} baseline [95% CI]": f"{test.mean_a:.4f} {_interval_text(baseline)}",
                f"{name} system [95% CI]": f"{test.mean_b:.4f} {_interval_text(other)}",
            }
        )
    markup.table(pd.DataFrame(rows).set_index("system"))
    st.caption(
        f"Baseline: {naming.system_label(baseline.run_name)}. Two-sided paired t-test and "
        f"{randomization_words(tests)}, over the queries both systems were evaluated on"
        + ("; Holm correction across the comparisons." if len(others) > 1 else ".")
        + " The verdict uses the randomization test at p < 0.05. "
        f"Δ 95% CI: the {PAIRED_DESCRIPTION}; an interval that excludes 0 agrees with a significant test. "
        f"The means' CIs: each system's {DESCRIPTION}."
    )

    st.subheader("Save this comparison")
    saved_reports.download_buttons(
        dataset,
        computed,
        chosen=chosen,
        metrics=[metric, *MAIN_METRICS],
        title="Comparison",
        baseline_tests=tests,
        extra_settings={"baseline": naming.system_label(baseline.run_name), "compared on": name},
    )

    for test, other in zip(tests, others):
        st.subheader(f"{md(naming.system_label(other.run_name))} vs {md(naming.system_label(baseline.run_name))}")
        delta = per_query_delta(baseline, other, metric)
        w = st.columns(3)
        w[0].metric("Wins", test.wins)
        w[1].metric("Ties", test.ties)
        w[2].metric("Losses", test.losses)
        left, right = st.columns(2)
        with left:
            scatter = px.scatter(
                delta.reset_index(),
                x="a",
                y="b",
                hover_name="query_id",
                labels={"a": f"{name} · baseline", "b": f"{name} · system"},
            )
            axes = equal_axes(pd.concat([delta["a"], delta["b"]]))  # y = x at 45°: same range, same scale
            span = axes["xaxis"]["range"]
            scatter.add_trace(
                go.Scatter(
                    x=span,
                    y=span,
                    mode="lines",
                    line={"dash": "dot", "color": "grey"},
                    showlegend=False,
                    hoverinfo="skip",
                )
            )
            scatter.update_layout(**axes)
            st.plotly_chart(scatter, width="stretch", key=f"scatter_{other.run_name}")
        with right:
            fig = charts.delta_bars(dataset, delta, f"Δ {name}")
            st.plotly_chart(fig, width="stretch", key=f"bars_{other.run_name}")
        for title, part in (
            ("Largest gains", delta[delta["delta"] > 0].head(5)),
            ("Largest losses", delta[delta["delta"] < 0].sort_values("delta").head(5)),
        ):
            st.markdown(f"**{title}**")
            if part.empty:
                st.caption("none")
                continue
            part = part.reset_index()
            part["query"] = part["query_id"].map(lambda q: shorten(dataset.queries[q], 120))
            part["open"] = part["query_id"].map(lambda q, name=other.run_name: state.explorer_link(q, name))
            st.dataframe(
                part[["query_id", "query", "a", "b", "delta", "open"]],
                hide_index=True,
                width="stretch",
                column_config={
                    "open": st.column_config.LinkColumn("explorer", display_text="open ↗"),
                    "a": st.column_config.NumberColumn("baseline", format="%.4f"),
                    "b": st.column_config.NumberColumn("system", format="%.4f"),
                    "delta": st.column_config.NumberColumn("Δ", format="%+.4f"),
                },
            )
