"""Plotly figures several pages draw: the per-query Δ bars of two systems (Compare, Query rewriting, the
reranker's effect), built here once so every page colours gains and losses alike.
"""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from r2med_core import Dataset
from r2med_core.analysis.explore import shorten


def delta_bars(
    dataset: Dataset,
    delta: pd.DataFrame,
    y_label: str,
    words: tuple[str, str, str] = ("gain", "loss", "tie"),
    names: tuple[str, str] = ("baseline", "system"),
) -> go.Figure:
    """Per-query Δ bars, sorted, coloured by direction, with the query text on hover."""
    bars = delta.reset_index().sort_values("delta", ascending=False)
    bars["query"] = bars["query_id"].map(lambda q: shorten(dataset.queries[q], 80))
    up, down, same = words
    bars["direction"] = bars["delta"].map(lambda d: up if d > 0 else (down if d < 0 else same))
    fig = px.bar(
        bars,
        x="query_id",
        y="delta",
        color="direction",
        hover_data={"query": True, "a": ":.3f", "b": ":.3f"},
        color_discrete_map={up: "#2a9d8f", down: "#e76f51", same: "#adb5bd"},
        labels={"delta": y_label, "query_id": "query (sorted by Δ)", "a": names[0], "b": names[1]},
    )
    fig.update_xaxes(type="category", showticklabels=len(bars) <= 40)
    return fig
