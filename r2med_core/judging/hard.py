"""Hard items: the documents that took annotators longest *and* on which they disagreed.

A reviewer's time is best spent where judging was hard, and the guideline is best sharpened there too.
Two signals of a hard (query, document), each weak alone — a long read may be a long document, a
disagreement a slip — are multiplied: per document graded by two or more people (each person's latest
judgement, model proposals left out), the median time they spent on it (``Annotation.time_ms``, which
the Judging page records for keys and for a Save) times the share of pairs of them that disagreed, an
*unsure* (``annotations.UNSURE``) agreeing with nobody. Documents all agreed on score 0 and documents
nobody timed cannot be ranked: neither is listed.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from r2med_core.judging.adjudication import Unit, latest_ratings
from r2med_core.judging.annotations import Annotation, is_unsure, rating_of

#: How many hard items a page lists.
SHOWN = 20


@dataclass(frozen=True)
class HardItem:
    """One (query, document) with each person's latest judgement on it, the median seconds they spent
    on it (among those timed) and the share of pairs of them who gave the same grade."""

    unit: Unit
    judgements: tuple[Annotation, ...]
    seconds: float
    agreement: float

    @property
    def score(self) -> float:
        """Median seconds × the share of pairs who disagreed: higher is harder."""
        return self.seconds * (1 - self.agreement)

    @property
    def said(self) -> tuple[str, ...]:
        """What each person said, in the order judged (``annotations.rating_of``: ``grade_<n>``, ``unsure``)."""
        return tuple(rating_of(a) for a in self.judgements)


def _agreement(judgements: Iterable[Annotation]) -> float:
    """The share of pairs of judgements with the same grade; an unsure agrees with nothing."""
    pairs = list(itertools.combinations(judgements, 2))
    same = sum(not is_unsure(a) and rating_of(a) == rating_of(b) for a, b in pairs)
    return same / len(pairs)


def hard_items(labels: Iterable[Annotation], *, task: str | None = None, limit: int = SHOWN) -> list[HardItem]:
    """The hardest documents among ``labels`` (optionally one task's), hardest first (then the longest
    read), at most ``limit``: those graded by two or more people, timed, and not all agreed on."""
    items = []
    for (unit, vocabulary), rated in latest_ratings(a for a in labels if not a.by_model).items():
        if vocabulary != "grade" or unit[3] is None or len(rated) < 2 or (task is not None and unit[1] != task):
            continue
        judged = tuple(sorted(rated.values(), key=lambda a: (a.created_at, a.id or 0)))
        times = [a.time_ms for a in judged if a.time_ms is not None]
        if not times:
            continue
        item = HardItem(unit, judged, statistics.median(times) / 1000, _agreement(judged))
        if item.score > 0:
            items.append(item)
    return sorted(items, key=lambda i: (-i.score, -i.seconds, i.unit[1:]))[:limit]
