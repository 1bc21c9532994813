"""95 % bootstrap intervals: they cover the true mean about 95 % of the time, narrow with more
queries, are seeded, and a paired difference uses the pairing (the score pages rely on all four)."""

from __future__ import annotations

import numpy as np
import pytest

from r2med_core import evaluate, load_demo, run_system
from r2med_core.evaluation import paired_test
from r2med_core.intervals import difference_interval, mean_interval
from r2med_core.runs import Run


def test_the_interval_covers_the_true_mean_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(7)
    true_mean, hits, draws = 0.3, 0, 200
    for _ in range(draws):
        values = (rng.random(100) < true_mean).astype(float)  # 100 queries, found or not
        interval = mean_interval(values, n_resamples=2000, seed=int(rng.integers(1 << 30)))
        assert interval is not None and interval.contains(values.mean())
        hits += interval.contains(true_mean)
    assert 0.88 <= hits / draws <= 0.995


def test_more_queries_give_a_narrower_interval_and_the_seed_fixes_it() -> None:
    values = np.random.default_rng(1).random(30)
    small, large = mean_interval(values), mean_interval(np.tile(values, 4))
    assert small is not None and large is not None
    assert large.high - large.low < 0.6 * (small.high - small.low)
    assert mean_interval(values) == small  # the same interval on every visit
    assert mean_interval(values, seed=5) != small


def test_constant_values_and_too_few_queries() -> None:
    assert mean_interval([0.0] * 20) is not None
    interval = mean_interval([0.25] * 20)
    assert interval is not None and (interval.low, interval.high) == (0.25, 0.25)
    assert mean_interval([0.5]) is None
    assert mean_interval([0.5, float("nan")]) is None  # NaN is not a query's score


def test_a_paired_difference_uses_the_pairing() -> None:
    """Queries differ far more from each other than the two systems do: the paired interval of the
    difference excludes 0 while the two systems' own intervals overlap."""
    rng = np.random.default_rng(3)
    a = rng.random(40)
    b = np.clip(a + 0.03 + rng.normal(0, 0.01, 40), 0, 1)
    ia, ib, diff = mean_interval(a), mean_interval(b), difference_interval(a, b)
    assert ia is not None and ib is not None and diff is not None
    assert ia.high > ib.low  # marginal intervals overlap
    assert diff.low > 0 and diff.contains(float(np.mean(b - a)))
    assert difference_interval(a, a) is not None and difference_interval(a, a).text(signed=True) == "[+0.00, +0.00]"
    with pytest.raises(ValueError):
        difference_interval(a, b[:-1])


def test_results_and_paired_tests_carry_their_intervals(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("R2MED_CACHE_DIR", str(tmp_path))
    dataset = load_demo("clinical-evidence")
    run = run_system(dataset, "bm25")
    reversed_run = Run(  # the same documents, the order turned upside down (scores by position)
        "reversed",
        {qid: [(doc, float(i)) for i, (doc, _) in enumerate(ranking)] for qid, ranking in run.rankings.items()},
    )
    worse = evaluate(reversed_run, dataset.qrels)
    bm25 = evaluate(run, dataset.qrels)
    intervals = bm25.intervals(["ndcg_at_10", "mrr"])
    for metric, interval in intervals.items():
        assert interval is not None and interval.low <= bm25.means[metric] <= interval.high
    test = paired_test(bm25, worse)
    assert test.delta < 0
    assert test.delta_interval is not None and test.delta_interval.contains(test.delta)


def test_metrics_and_compare_pages_show_each_means_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_app import _means, open_app, significance

    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")  # the pages may compute MiniLM themselves
    at = open_app("metrics", task="clinical-evidence", systems=["bm25", "minilm"])
    table = _means(at)  # one row per metric, one column per system: "mean [low, high]"
    assert list(table.index[:2]) == ["nDCG@10", "MAP@10"] and len(table.columns) == 3  # meaning and 2 systems
    for cell in table.loc["nDCG@10"].iloc[1:]:
        value, text = cell.split(" ", 1)
        low, high = map(float, text.strip("[]").split(", "))
        assert low - 0.005 <= float(value) <= high + 0.005 and low < high
    assert any("95% bootstrap confidence interval" in c.value for c in at.caption)
    bars = at.get("plotly_chart")[0]
    assert '"error_y"' in bars.proto.spec  # the bars carry their intervals

    at = open_app("compare", task="clinical-evidence", systems=["bm25", "minilm"])
    row = significance(at).iloc[0]
    low, high = map(float, row["Δ 95% CI"].strip("[]").split(", "))
    assert low - 0.0005 <= float(row["Δ"]) <= high + 0.0005
    for side in ("baseline", "system"):  # each mean with its interval, in one cell
        value, interval = row[f"nDCG@10 {side} [95% CI]"].split(" ", 1)
        low, high = map(float, interval.strip("[]").split(", "))
        assert low - 0.005 <= float(value) <= high + 0.005
    assert any("paired bootstrap confidence interval of the difference" in c.value for c in at.caption)
