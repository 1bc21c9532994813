"""95 % bootstrap confidence intervals for means over queries, and for paired differences.

R2MED's tasks have 77–150 queries (the demo's 12), so "0.43 against 0.41" is often noise: every
mean the score pages show carries an interval that says how far it could move with another draw of
queries. The intervals are scipy's ``bootstrap`` (the well-kept implementation): queries are
resampled with replacement, seeded so a page shows the same interval on every visit, with the BCa
method (bias-corrected and accelerated, better than the plain percentile on small, skewed samples
such as nDCG's many zeros). Where BCa is undefined (every query scores the same, so the jackknife
has no spread) the interval is the single value itself, since no resample can move it.

A difference between two systems is resampled **paired**: the same queries for both, so the
interval is of the per-query differences' mean, as the paired tests in :mod:`r2med_core.evaluation`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

#: The confidence level, the resamples and the seed every interval in the app uses.
LEVEL = 0.95
N_RESAMPLES = 10_000
SEED = 0
#: How the intervals are described next to them (pages, reports).
DESCRIPTION = (
    f"{LEVEL:.0%} bootstrap confidence interval (BCa, {N_RESAMPLES:,} resamples of the queries, seed {SEED})"
)
PAIRED_DESCRIPTION = (
    f"{LEVEL:.0%} paired bootstrap confidence interval of the difference (BCa, {N_RESAMPLES:,} resamples of the "
    f"queries both systems were evaluated on, seed {SEED})"
)


@dataclass(frozen=True)
class Interval:
    """A confidence interval [low, high] at ``level``."""

    low: float
    high: float
    level: float = LEVEL

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def text(self, digits: int = 2, *, signed: bool = False) -> str:
        """``[0.39, 0.47]`` (``signed``: ``[-0.03, +0.08]``, for differences)."""
        spec = f"{'+' if signed else ''}.{digits}f"
        return f"[{self.low:{spec}}, {self.high:{spec}}]"


def _bootstrap(
    samples: tuple[np.ndarray, ...],
    statistic: Callable[..., np.ndarray],
    *,
    paired: bool,
    level: float,
    n_resamples: int,
    seed: int,
) -> Interval:
    from scipy import stats  # ~1 s to import, and only the score pages need it

    point = float(statistic(*samples, axis=-1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BCa's "cannot be calculated" on constant data: handled below
        result = stats.bootstrap(
            samples,
            statistic,
            paired=paired,
            vectorized=True,
            n_resamples=n_resamples,
            confidence_level=level,
            method="BCa",
            random_state=np.random.default_rng(seed),
        )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if np.isnan(low) or np.isnan(high):  # no spread to resample: the value itself
        low = high = point
    return Interval(low, high, level)


def _mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(values, axis=axis)


def _mean_difference(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(b - a, axis=axis)


def mean_interval(
    values: Iterable[float], *, level: float = LEVEL, n_resamples: int = N_RESAMPLES, seed: int = SEED
) -> Interval | None:
    """The interval of the mean of per-query ``values`` (NaN left out); None under two values."""
    array = np.asarray(list(values), dtype=np.float64)
    array = array[~np.isnan(array)]
    if len(array) < 2:
        return None
    return _bootstrap((array,), _mean, paired=False, level=level, n_resamples=n_resamples, seed=seed)


def difference_interval(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    level: float = LEVEL,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> Interval | None:
    """The interval of mean(b − a) over paired per-query values (same queries, same order)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError("paired values need the same queries on both sides")
    if len(x) < 2:
        return None
    return _bootstrap((x, y), _mean_difference, paired=True, level=level, n_resamples=n_resamples, seed=seed)
