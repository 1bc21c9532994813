"""Tables that summarise several systems' results (for charts and CSV downloads)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from r2med_core import measures
from r2med_core.evaluation import PairedTest, Results, metric_label, metric_meaning
from r2med_core.intervals import Interval

#: Metric families plotted against k.
CURVE_METRICS: tuple[str, ...] = ("ndcg_at", "recall_at", "precision_at", "map_at")


def test_cells(test: PairedTest) -> dict[str, str]:
    """A paired test against the baseline as the cells the Compare page and the saved report both show:
    Δ, its interval, the p-values (Holm-corrected too when several systems were tested), wins/ties/losses."""
    cells = {
        "Δ": f"{test.delta:+.4f}",
        "Δ 95% CI": test.delta_interval.text(3, signed=True) if test.delta_interval else "–",
        "randomization p": f"{test.randomization_pvalue:.4g}",
        "t-test p": f"{test.t_pvalue:.4g}",
    }
    if test.randomization_pvalue_holm is not None and test.t_pvalue_holm is not None:
        cells["randomization p (Holm)"] = f"{test.randomization_pvalue_holm:.4g}"
        cells["t-test p (Holm)"] = f"{test.t_pvalue_holm:.4g}"
    cells["wins / ties / losses"] = f"{test.wins} / {test.ties} / {test.losses}"
    return cells


def means_table(results: list[Results], labels: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per system, one column per official metric."""
    labels = labels or {}
    metrics = measures.all_metrics()
    rows = [{"system": labels.get(r.run_name, r.run_name), **{m: r.means[m] for m in metrics}} for r in results]
    return pd.DataFrame(rows, columns=["system", *metrics])


def means_by_metric(
    results: Sequence[Results],
    labels: Mapping[str, str],
    metrics: Sequence[str],
    intervals: Mapping[str, Mapping[str, Interval | None]],
) -> pd.DataFrame:
    """One row per metric (its name and, in words, what it says), one column per system holding its mean
    with its 95 % interval, "0.2121 [0.14, 0.31]": the table reads across systems and grows downwards with
    more metrics, so it fits a narrow window where one column per metric and per interval did not."""
    rows = []
    for metric in metrics:
        row = {"metric": metric_label(metric), "what it says": metric_meaning(metric)}
        for result in results:
            interval = intervals.get(result.run_name, {}).get(metric)
            mean = result.means.get(metric)
            value = "–" if mean is None else f"{mean:.4f}"
            row[labels.get(result.run_name, result.run_name)] = f"{value} {interval.text()}" if interval else value
        rows.append(row)
    return pd.DataFrame(rows).set_index("metric")


def curves_table(results: list[Results], labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Long table (system, metric, k, value) of every metric family at k = 1, 10, 25, 50, 100."""
    labels = labels or {}
    rows = [
        {
            "system": labels.get(r.run_name, r.run_name),
            "metric": measure.label,
            "k": k,
            "value": r.means[measure.metric(k)],
        }
        for r in results
        for measure in (measures.MEASURES[name] for name in CURVE_METRICS)
        for k in measure.cutoffs
    ]
    return pd.DataFrame(rows)


def per_query_long(
    results: list[Results], labels: dict[str, str] | None = None, metric: str | None = None
) -> pd.DataFrame:
    """Per-query metrics of every system stacked (one metric, or all of them when ``metric`` is None)."""
    labels = labels or {}
    frames = []
    for r in results:
        frame = r.per_query[[metric] if metric else list(measures.all_metrics())].copy()
        frame.insert(0, "system", labels.get(r.run_name, r.run_name))
        frames.append(frame.reset_index())
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
