"""Evaluation exactly as the R2MED benchmark does it, plus paired comparisons between systems.

All metric values come from pytrec_eval with the benchmark's measures (each one a record in
:mod:`r2med_core.measures`, which every metric table here reads); we only rename keys
(``ndcg_cut_10`` → ``ndcg_at_10``) and average over the queries pytrec_eval returns — the ones
present in both the run and the qrels — as the benchmark does. The benchmark scored BM25 and
rerankers at k = 1, 10, 25, 50, 100 + MRR and dense retrievers (through BEIR) at k = 1, 3, 5, 10,
100 without MRR; every system here gets the union, and :func:`published_metrics` says which of
them the paper published for a kind of system. A value at a shared cutoff is the same either way.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pytrec_eval

from r2med_core import measures
from r2med_core.intervals import Interval, difference_interval, mean_interval
from r2med_core.measures import CUTOFFS as CUTOFFS  # re-exported: the evaluator's cutoffs
from r2med_core.measures import DEEP_CUTOFF
from r2med_core.runs import Run, llm_outcomes

if TYPE_CHECKING:
    import pandas as pd

#: The metrics the CLI prints and the app shows first.
MAIN_METRICS: tuple[str, ...] = ("ndcg_at_10", "map_at_10", "recall_at_10", "recall_at_100", "precision_at_10", "mrr")


def __getattr__(name: str) -> Sequence[str]:
    """``ALL_METRICS`` (every metric the evaluator reports, in display order) and ``DEEP_METRICS`` (the
    @1000 ones ``evaluate`` adds at depth 1000), read from the registry when asked for, so a measure
    registered later is in them (:mod:`r2med_core.measures`). Typed ``Sequence``: mypy 2.4 cannot write its
    cache for a module ``__getattr__`` returning ``tuple[str, ...]`` inside an import cycle."""
    if name == "ALL_METRICS":
        return measures.all_metrics()
    if name == "DEEP_METRICS":
        return measures.deep_metrics()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _measure(metric: str) -> tuple[measures.Measure, int | None]:
    found = measures.find(metric)
    if found is None:
        raise KeyError(f"unknown metric {metric!r}: no registered measure names it (r2med_core.measures)")
    return found


def metric_label(metric: str) -> str:
    """``ndcg_at_10`` → ``nDCG@10``, ``mrr`` → ``MRR`` (the paper's spelling, for charts and pickers);
    a name no measure reads is shown as it is."""
    found = measures.find(metric)
    return metric if found is None else found[0].label_at(found[1])


def metric_meaning(metric: str) -> str:
    """``recall_at_100`` → "the share of the relevant documents found in the top 100" (plain words)."""
    measure, k = _measure(metric)
    return measure.meaning_at(k)


def metric_explained(metric: str) -> str:
    """The metric's name with its meaning, as a page shows it the first time: "MRR (how high …)"."""
    return f"{metric_label(metric)} ({metric_meaning(metric)})"


def published_metrics(kind: str) -> tuple[str, ...]:
    """The metrics the R2MED paper published for a kind of system ("dense", "bm25", "reranker");
    empty for kinds it has no numbers for (fusion, imported runs). A rewrite keeps its retriever's kind."""
    return measures.paper_metrics(kind)


def published_metrics_note(kind: str) -> str | None:
    """One sentence for the user next to a comparison with the paper: which metrics it published."""
    scoring = measures.PAPER.get(kind)
    if scoring is None:
        return None
    registered = measures.MEASURES.values()
    cut = [m.label for m in registered if m.cutoffs and kind in m.published]
    uncut = [m.label for m in registered if not m.cutoffs and kind in m.published]
    elsewhere = [m.label for m in registered if not m.cutoffs and m.published and kind not in m.published]
    return (
        f"For {scoring.what} the paper published {_listed(cut)} at {', '.join(map(str, scoring.cutoffs))}"
        f"{f' and {_listed(uncut)}' if uncut else ''}{f' (no {_listed(elsewhere)})' if elsewhere else ''}, "
        f"scored through {scoring.scorer}; the other metrics shown are computed the same way but were not published."
    )


def _listed(words: list[str]) -> str:
    """``["a", "b", "c"]`` → "a, b and c"."""
    return " and ".join([", ".join(words[:-1]), words[-1]]) if len(words) > 1 else "".join(words)


def metric_name(pytrec_key: str) -> str:
    """``ndcg_cut_10`` → ``ndcg_at_10``, ``P_10`` → ``precision_at_10``, ``recip_rank`` → ``mrr``."""
    return measures.metric_from_trec(pytrec_key)


@dataclass(frozen=True, eq=False)
class Results:
    """Mean metrics and the per-query table of one run on one dataset.

    ``_per_query`` is the table, or pytrec_eval's rows until someone reads :attr:`per_query`: the
    table is built on first use, so ``eval`` on the command line (means only) never imports
    pandas (about half a second).
    """

    dataset_name: str
    run_name: str
    means: dict[str, float]
    _per_query: pd.DataFrame | _Rows
    n_evaluated: int
    n_skipped: int
    seconds: float
    #: Things that change how to read the numbers (no query matched the judgements, queries that
    #: retrieved nothing …): the CLI prints them as ``note:`` lines and the app shows them.
    notes: tuple[str, ...] = ()

    @property
    def per_query(self) -> pd.DataFrame:
        """One row per evaluated query (index ``query_id``), one column per metric."""
        table = self._per_query
        if isinstance(table, _Rows):
            table = table.frame()
            object.__setattr__(self, "_per_query", table)
        return table

    def intervals(self, metrics: Iterable[str]) -> dict[str, Interval | None]:
        """Each metric's 95 % bootstrap interval over the evaluated queries (:mod:`r2med_core.intervals`)."""
        table = self.per_query
        return {m: mean_interval(table[m].to_numpy()) if m in table else None for m in metrics}

    def to_json(self, digits: int = 5) -> dict[str, Any]:
        """The benchmark's results file: dataset_name, model_name, evaluation_time, test."""
        return {
            "dataset_name": self.dataset_name,
            "model_name": self.run_name,
            "evaluation_time": f"{self.seconds / 60:.2f} minutes",
            "test": {name: round(value, digits) for name, value in sorted(self.means.items())},
        }


def is_results(obj: Any) -> bool:
    """The shape of a results file (``eval`` writes it, the benchmark publishes it): a ``test`` object of
    metric means beside plain fields. ``{"test": {"ndcg_at_10": 0.3}}`` also reads as score JSON for a
    query called "test", so run readers ask this first: a results file holds no ranking."""
    if not isinstance(obj, dict) or not isinstance(test := obj.get("test"), dict):
        return False
    means = all(isinstance(v, int | float) and not isinstance(v, bool) for v in test.values())
    return means and not any(isinstance(v, dict) for k, v in obj.items() if k != "test")


def evaluate(
    run: Run,
    qrels: dict[str, dict[str, int]],
    *,
    dataset_name: str = "",
    depth: int = 100,
    seconds: float | None = None,
) -> Results:
    """Score ``run`` (cut to ``depth``, as the benchmark's top-100 runs) against graded ``qrels``.

    ``depth=1000`` also scores nDCG/MAP/Recall/P@1000, as the benchmark's first commit did for dense
    models (``DEEP_METRICS``; not in its published files).
    Queries without judgements, or absent from the run, are left out of the means (``n_skipped``).
    ``seconds`` is the retrieval time to report; by default the evaluation's own time.
    """
    started = time.perf_counter()
    deep = depth >= DEEP_CUTOFF
    metrics = [*measures.all_metrics(), *(measures.deep_metrics() if deep else ())]
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures.trec_measures(deep=deep))
    scores = evaluator.evaluate(run.truncated(depth).as_score_dict())
    rename = {key: metric_name(key) for key in dict.fromkeys(key for values in scores.values() for key in values)}
    rows = {qid: {rename[key]: value for key, value in values.items()} for qid, values in scores.items()}
    per_query = _Rows(rows, tuple(metrics))
    means = {name: per_query.mean(name) if rows else 0.0 for name in metrics}
    judged = {qid for qid, grades in qrels.items() if grades}
    elapsed = time.perf_counter() - started if seconds is None else seconds
    notes = _notes(run, judged)
    return Results(
        dataset_name=dataset_name,
        run_name=run.name,
        means=means,
        _per_query=per_query,
        n_evaluated=len(rows),
        n_skipped=len(judged - set(rows)) + len(set(run.rankings) - judged),
        seconds=elapsed,
        notes=notes,
    )


@dataclass(frozen=True)
class _Rows:
    """pytrec_eval's per-query scores, renamed: query id -> metric -> value."""

    rows: dict[str, dict[str, float]]
    metrics: tuple[str, ...]

    def mean(self, metric: str) -> float:
        """The mean over queries as pandas computes ``frame[metric].mean()`` (NaN skipped, same sum)."""
        values = np.fromiter((row.get(metric, np.nan) for row in self.rows.values()), dtype=np.float64)
        present = ~np.isnan(values)
        count = int(present.sum())
        return float(np.where(present, values, 0.0).sum() / count) if count else float("nan")

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        table = pd.DataFrame.from_dict(self.rows, orient="index")
        if table.empty:
            table = pd.DataFrame(columns=list(self.metrics))
        table = table.reindex(columns=list(self.metrics))
        table.index.name = "query_id"
        return table


def _notes(run: Run, judged: set[str]) -> tuple[str, ...]:
    """Why the numbers may not mean what they seem: a run of another dataset, empty rankings, an LLM
    reranking whose replies could not be used (``runs.llm_outcomes``: the first-stage order was kept)."""
    notes: list[str] = []
    if run.rankings and judged and not judged & set(run.rankings):
        notes.append(
            f"none of the run's {len(run.rankings)} query ids matches a judged query, so every metric is 0: "
            "check that the run was made on this dataset"
        )
    empty = sum(1 for qid, ranking in run.rankings.items() if not ranking and qid in judged)
    if empty:
        notes.append(
            f"{empty} judged quer{'y' if empty == 1 else 'ies'} had no searchable terms and retrieved nothing: "
            "scored 0 on every metric and counted in the averages"
        )
    notes += llm_outcomes(run.usage)  # an LLM reranker whose replies were unusable, counted by it
    return tuple(notes)


# --------------------------------------------------------------------------- comparisons


@dataclass(frozen=True)
class PairedTest:
    """System B against baseline A on one metric over the queries both were evaluated on."""

    baseline: str
    system: str
    metric: str
    mean_a: float
    mean_b: float
    wins: int
    ties: int
    losses: int
    t_pvalue: float
    randomization_pvalue: float
    t_pvalue_holm: float | None = None
    randomization_pvalue_holm: float | None = None
    #: The paired bootstrap interval of :attr:`delta` (None under two shared queries).
    delta_interval: Interval | None = None
    #: The queries both systems were evaluated on (what the tests pair).
    n_queries: int = 0
    #: The sign assignments the randomization test's null distribution holds, as scipy ran it: all
    #: ``2 ** n_queries`` of them when that is no more than the resamples asked for (the exact test),
    #: else that many random ones; 0 when no test was run (under two queries, or no query differs).
    sign_assignments: int = 0

    @property
    def delta(self) -> float:
        return self.mean_b - self.mean_a

    @property
    def exact(self) -> bool:
        """The randomization test enumerated every sign assignment (its p-value is exact)."""
        return self.sign_assignments > 0 and self.sign_assignments == 2**self.n_queries

    @property
    def randomization_text(self) -> str:
        """Which randomization test was run, as a caption names it."""
        if not self.sign_assignments:
            return "no randomization test where the systems score alike on every query (or share under two): p = 1"
        if self.exact:
            return (
                f"two-sided exact paired randomization test (all {self.sign_assignments:,} sign assignments of "
                f"{self.n_queries} queries)"
            )
        return (
            f"two-sided paired randomization test ({self.sign_assignments:,} random sign flips of "
            f"{self.n_queries:,} queries, seed fixed)"
        )


def randomization_words(tests: Iterable[PairedTest]) -> str:
    """The randomization test(s) ``tests`` ran, each kind named once, for a caption: the exact test
    over a few queries, a sampled one over many (scipy decides, by the resamples asked for)."""
    kinds = list(dict.fromkeys(test.randomization_text for test in tests))
    return "; ".join(kinds) if kinds else "no randomization test"


def paired_test(
    a: Results, b: Results, metric: str = "ndcg_at_10", *, n_resamples: int = 10_000, seed: int = 0
) -> PairedTest:
    """Paired t-test, a two-sided paired randomization (sign-flip) test via scipy, and the paired
    bootstrap interval of the difference (:func:`r2med_core.intervals.difference_interval`)."""
    import pandas as pd

    joined = pd.concat([a.per_query[metric], b.per_query[metric]], axis=1, join="inner").dropna()
    x, y = joined.iloc[:, 0].to_numpy(float), joined.iloc[:, 1].to_numpy(float)
    diff = y - x
    wins, losses = int((diff > 0).sum()), int((diff < 0).sum())
    assignments = 0
    if len(diff) < 2 or np.allclose(diff, 0):
        t_p = rand_p = 1.0
    else:
        from scipy import stats  # ~1 s to import, and only comparisons need it

        t_p = float(stats.ttest_rel(y, x).pvalue)
        result = stats.permutation_test(
            (x, y),
            lambda u, v, axis: np.mean(v - u, axis=axis),
            vectorized=True,  # all resamples in a few array operations; the same p-values as one by one
            permutation_type="samples",
            n_resamples=n_resamples,
            alternative="two-sided",
            random_state=np.random.default_rng(seed),
        )
        rand_p = float(result.pvalue)
        assignments = len(result.null_distribution)  # 2 ** n when scipy enumerated them all (exact)
    return PairedTest(
        baseline=a.run_name,
        system=b.run_name,
        metric=metric,
        mean_a=float(x.mean()) if len(x) else 0.0,
        mean_b=float(y.mean()) if len(y) else 0.0,
        wins=wins,
        ties=len(diff) - wins - losses,
        losses=losses,
        t_pvalue=1.0 if np.isnan(t_p) else t_p,
        randomization_pvalue=rand_p,
        delta_interval=difference_interval(x, y, seed=seed),
        n_queries=len(diff),
        sign_assignments=assignments,
    )


def holm(pvalues: list[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (step-down, monotone, capped at 1)."""
    order = np.argsort(pvalues)
    m = len(pvalues)
    adjusted = np.empty(m)
    running = 0.0
    for position, index in enumerate(order):
        running = max(running, min(1.0, (m - position) * pvalues[index]))
        adjusted[index] = running
    return adjusted.tolist()


def compare(baseline: Results, others: list[Results], metric: str = "ndcg_at_10", **kwargs: Any) -> list[PairedTest]:
    """Test each system against the baseline; with more than one, add Holm-corrected p-values."""
    tests = [paired_test(baseline, other, metric, **kwargs) for other in others]
    if len(tests) < 2:
        return tests
    t_adj = holm([t.t_pvalue for t in tests])
    r_adj = holm([t.randomization_pvalue for t in tests])
    return [
        PairedTest(**{**t.__dict__, "t_pvalue_holm": ta, "randomization_pvalue_holm": ra})
        for t, ta, ra in zip(tests, t_adj, r_adj)
    ]
