"""The score charts, built once for the Metrics page and for the saved report.

Every figure carries its own colours and template. Inside the app process plotly's default template
is Streamlit's, whose series colours are placeholders (``#000001``, ``#000002``…) that only
Streamlit's frontend replaces: a figure built with it and written to an HTML report draws every
series black. So the builders never rely on the default template: each system gets a colour from
:data:`PALETTE`, in the order the systems are given, the same colour in every chart.

System labels and query ids are escaped for plotly, which reads a subset of HTML in text
(``<b>``, ``<a href>``): a dataset's or a visitor's string shows as written.

Axes whose shape carries a meaning are set here for every chart that has one: a score against the
same score (``equal_axes``: y = x at 45°) and a count (``count_axis``: whole numbers from 0; plotly's
own choice for one query was 0 to 1 in tenths).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from r2med_core.analysis.explore import axis_range
from r2med_core.evaluation import Results, metric_label
from r2med_core.intervals import Interval
from r2med_core.measures import CUTOFFS
from r2med_core.reporting.tables import curves_table

#: The template every figure is built with (white background, readable outside the app).
TEMPLATE = "plotly_white"
#: Series colours, one per system in order; plotly's qualitative palette written out, then D3's.
PALETTE: tuple[str, ...] = (
    "#636EFA",
    "#EF553B",
    "#00CC96",
    "#AB63FA",
    "#FFA15A",
    "#19D3F3",
    "#FF6692",
    "#B6E880",
    "#FF97FF",
    "#FECB52",
    "#1F77B4",
    "#FF7F0E",
    "#2CA02C",
    "#D62728",
    "#9467BD",
    "#8C564B",
    "#E377C2",
    "#7F7F7F",
    "#BCBD22",
    "#17BECF",
)


def plot_text(text: str) -> str:
    """A string as plotly should show it: escaped, so ``<b>`` in a name is shown, not obeyed."""
    return html.escape(text, quote=False)


def _labels(results: Sequence[Results], labels: Mapping[str, str] | None) -> dict[str, str]:
    labels = labels or {}
    return {r.run_name: plot_text(labels.get(r.run_name, r.run_name)) for r in results}


def _colours(shown: Mapping[str, str]) -> dict[str, str]:
    """Shown label → colour, in the systems' order (the palette repeats past its length)."""
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(dict.fromkeys(shown.values()))}


def means_figure(
    results: Sequence[Results],
    labels: Mapping[str, str] | None,
    metrics: Sequence[str],
    intervals: Mapping[str, Mapping[str, Interval | None]] | None = None,
) -> go.Figure:
    """Grouped bars: each metric's mean, one bar per system; with ``intervals`` (run name → metric →
    interval, :meth:`r2med_core.evaluation.Results.intervals`) each bar carries its interval as error bars."""
    shown = _labels(results, labels)
    rows = []
    for r in results:
        for m in metrics:
            value = r.means[m]
            interval = (intervals or {}).get(r.run_name, {}).get(m)
            low, high = (interval.low, interval.high) if interval else (value, value)
            row = {"system": shown[r.run_name], "metric": metric_label(m), "value": value}
            rows.append(row | {"above": high - value, "below": value - low})
    table = pd.DataFrame(rows, columns=["system", "metric", "value", "above", "below"])
    bars = {"error_y": "above", "error_y_minus": "below"} if intervals else {}
    return px.bar(
        table,
        x="metric",
        y="value",
        color="system",
        barmode="group",
        range_y=[0, 1],
        template=TEMPLATE,
        color_discrete_map=_colours(shown),
        **bars,
    )


def curves_figure(results: Sequence[Results], labels: Mapping[str, str] | None) -> go.Figure:
    """Metric@k: one panel per metric family, k on a log axis, one line per system."""
    shown = _labels(results, labels)
    fig = px.line(
        curves_table(list(results), shown),
        x="k",
        y="value",
        color="system",
        facet_col="metric",
        markers=True,
        facet_col_spacing=0.05,
        log_x=True,
        template=TEMPLATE,
        color_discrete_map=_colours(shown),
    )
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=")[-1]))
    fig.update_yaxes(matches=None, showticklabels=True, rangemode="tozero")
    fig.update_xaxes(tickvals=list(CUTOFFS), ticktext=[str(k) for k in CUTOFFS])
    return fig


def per_query_figure(results: Sequence[Results], labels: Mapping[str, str] | None, metric: str) -> go.Figure:
    """Each system's per-query values of one metric: a box with every query as a point (hover: its id)."""
    shown = _labels(results, labels)
    table = pd.concat(
        [
            pd.DataFrame(
                {
                    "system": shown[r.run_name],
                    "query": [plot_text(str(q)) for q in r.per_query.index],
                    "value": r.per_query[metric].to_numpy(),
                }
            )
            for r in results
        ],
        ignore_index=True,
    )
    fig = px.box(
        table,
        x="system",
        y="value",
        color="system",
        points="all",
        hover_name="query",
        labels={"value": metric_label(metric)},
        template=TEMPLATE,
        color_discrete_map=_colours(shown),
    )
    fig.update_yaxes(range=[-0.03, 1.03])
    return fig


# --------------------------------------------------------------------------- axes with a meaning


def equal_axes(values: Sequence[float] | pd.Series) -> dict[str, dict[str, object]]:
    """Layout for a scatter of one measure against itself (a system's score against the baseline's), so its
    y = x line runs at 45°: both axes over the same range (fitted to ``values``), one unit as long on
    both; the plot area shrinks to a square rather than stretching one axis to the figure's shape."""
    span = axis_range(pd.Series(values, dtype=float))
    return {
        "xaxis": {"range": span, "constrain": "domain"},
        "yaxis": {"range": span, "scaleanchor": "x", "scaleratio": 1, "constrain": "domain"},
    }


def count_axis(top: int) -> dict[str, object]:
    """Layout for an axis that counts things (queries, labels): whole numbers only, from 0 to ``top``
    (at least 1), ticks every 1, 2 or 5 times a power of ten, at most about ten of them."""
    top = max(1, int(top))
    step = 1
    while top / step > 10:
        step = _next_step(step)
    return {"range": [0, top], "tick0": 0, "dtick": step, "tickformat": "d", "rangemode": "tozero"}


def _next_step(step: int) -> int:
    """The 1-2-5 sequence: 1, 2, 5, 10, 20, 50 …"""
    return step * 5 // 2 if str(step)[0] == "2" else step * 2
