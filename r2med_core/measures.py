"""What a metric is: one registered record per family, and every metric table derived from the registry.

A metric's identity used to be spread over parallel string tables (pytrec_eval's names, ours, labels,
meanings, which cutoffs, which the paper published) joined by splitting names on "_": adding a family
made the paper seem to publish it, and a measure without a cutoff broke the split. Here, as in
ir_measures, a :class:`Measure` holds all of it, is registered where it is defined (:func:`register`),
and the evaluator, the labels, the published-metric lists, the tables and the MTEB names read the
registry. The values are still pytrec_eval's: a measure names the pytrec_eval measure that computes it
and never computes anything itself.

A family with cutoffs gives one metric per cutoff (``ndcg_at`` → ``ndcg_at_10``); one without
(``mrr``) is one metric named as the family. Registering a new family (success@k, R-precision) adds
it to what is evaluated and shown, and to nothing the paper published unless it says so.

This module is light (no numpy, no pytrec_eval) so that the published results and the CLI's name
checks read it without the evaluator's imports.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "CUTOFFS",
    "DEEP_CUTOFF",
    "MEASURES",
    "PAPER",
    "Measure",
    "PaperScoring",
    "all_metrics",
    "deep_metrics",
    "find",
    "metric_from_trec",
    "paper_metrics",
    "parse",
    "published_metrics",
    "register",
    "trec_measures",
]

#: The union of the benchmark's cutoffs: pytrec_eval's (1, 10, 25, 50, 100) and BEIR's (1, 3, 5, 10, 100).
CUTOFFS: tuple[int, ...] = (1, 3, 5, 10, 25, 50, 100)
#: The benchmark's first commit also retrieved the top 1000 for dense models and scored @1000 (its
#: published files are @100): ``evaluate(..., depth=1000)`` adds the deep measures at this cutoff.
DEEP_CUTOFF = 1000


@dataclass(frozen=True)
class PaperScoring:
    """How the R2MED paper scored one kind of system: with which tool, at which cutoffs."""

    #: The kind in words, as a sentence names it ("dense retrievers").
    what: str
    #: The tool that scored it ("pytrec_eval", "BEIR").
    scorer: str
    cutoffs: tuple[int, ...]


#: Per kind of system, how the paper scored it: BM25 and rerankers with pytrec_eval at 1, 10, 25, 50, 100;
#: dense retrievers through BEIR at 1, 3, 5, 10, 100. A measure says for which kinds the paper published
#: it (:attr:`Measure.published`); these say at which cutoffs.
PAPER: dict[str, PaperScoring] = {
    "dense": PaperScoring("dense retrievers", "BEIR", (1, 3, 5, 10, 100)),
    "bm25": PaperScoring("BM25", "pytrec_eval", (1, 10, 25, 50, 100)),
    "reranker": PaperScoring("rerankers", "pytrec_eval", (1, 10, 25, 50, 100)),
}


@dataclass(frozen=True)
class Measure:
    """One metric family: how pytrec_eval computes it, how we name it, and how a reader sees it."""

    #: Our name: the metric's name for a family without cutoffs (``mrr``), else the prefix (``ndcg_at``).
    name: str
    #: The pytrec_eval measure that computes it (``ndcg_cut``, ``recip_rank``, ``Rprec``).
    trec: str
    #: The paper's spelling (``nDCG``, ``MRR``): ``nDCG@10`` with a cutoff.
    label: str
    #: What it says in plain words; ``{k}`` stands for the cutoff.
    meaning: str
    #: The cutoffs it is evaluated at; empty for a measure that has none.
    cutoffs: tuple[int, ...] = ()
    #: The kinds of system (keys of :data:`PAPER`) the paper published it for.
    published: frozenset[str] = frozenset()
    #: Also scored at :data:`DEEP_CUTOFF` when a run is evaluated at depth 1000.
    deep: bool = False
    #: MTEB's key for the same number: for a cut family the prefix (``ndcg_at``, at the cutoffs both
    #: report), for one without cutoffs the whole key (our ``mrr`` is MTEB's ``mrr_at_100``); None: MTEB has none.
    mteb: str | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.trec or not self.label:
            raise ValueError(f"a measure needs a name, a pytrec_eval measure and a label: {self!r}")
        if unknown := self.published - set(PAPER):
            raise ValueError(f"{self.name}: published for unknown kinds {sorted(unknown)}")
        if self.deep and not self.cutoffs:
            raise ValueError(f"{self.name}: a measure without cutoffs cannot be scored at a deeper cutoff")

    def metric(self, k: int | None = None) -> str:
        """Our name for the value at cutoff ``k`` (``ndcg_at_10``), or the measure's own name without one."""
        return f"{self.name}_{k}" if self.cutoffs else self.name

    def metrics(self, cutoffs: tuple[int, ...] | None = None) -> tuple[str, ...]:
        """Its metric names at ``cutoffs`` (default: its own), in order."""
        if not self.cutoffs:
            return (self.name,)
        return tuple(self.metric(k) for k in (self.cutoffs if cutoffs is None else cutoffs))

    def trec_measure(self, cutoffs: tuple[int, ...] | None = None) -> str:
        """The measure string pytrec_eval takes: ``ndcg_cut.1,3,5`` or ``recip_rank``."""
        if not self.cutoffs:
            return self.trec
        return f"{self.trec}.{','.join(map(str, self.cutoffs if cutoffs is None else cutoffs))}"

    def label_at(self, k: int | None) -> str:
        """``nDCG@10``, or ``MRR`` for a measure without cutoffs."""
        return f"{self.label}@{k}" if self.cutoffs and k is not None else self.label

    def meaning_at(self, k: int | None) -> str:
        """:attr:`meaning` with its cutoff filled in."""
        return self.meaning.format(k=k) if self.cutoffs else self.meaning


#: Every registered measure by name, in display order (the order :func:`register` was called in).
MEASURES: dict[str, Measure] = {}


def register(measure: Measure) -> Measure:
    """Add a measure to the registry (once per name) and return it, so a module defines and registers
    a measure in one statement: ``SUCCESS = register(Measure("success_at", "success", …))``."""
    if measure.name in MEASURES:
        raise ValueError(f"a measure named {measure.name!r} is already registered")
    clash = {m for m in all_metrics() if m in measure.metrics()}
    if clash:
        raise ValueError(f"{measure.name}: its metric names {sorted(clash)} are another measure's")
    MEASURES[measure.name] = measure
    return measure


def _pairs() -> Iterator[tuple[Measure, int | None]]:
    for measure in MEASURES.values():
        if measure.cutoffs:
            yield from ((measure, k) for k in measure.cutoffs)
        else:
            yield measure, None


def all_metrics() -> tuple[str, ...]:
    """Every metric the evaluator reports, in display order."""
    return tuple(measure.metric(k) for measure, k in _pairs())


def deep_metrics() -> tuple[str, ...]:
    """The @1000 metrics a run evaluated at depth 1000 adds."""
    return tuple(m.metric(DEEP_CUTOFF) for m in MEASURES.values() if m.deep)


def trec_measures(*, deep: bool = False) -> set[str]:
    """The measure strings to hand pytrec_eval for every registered metric (and the deep ones)."""
    measures = {m.trec_measure() for m in MEASURES.values()}
    return measures | ({m.trec_measure((DEEP_CUTOFF,)) for m in MEASURES.values() if m.deep} if deep else set())


def metric_from_trec(key: str) -> str:
    """Our name for a key pytrec_eval returns: ``ndcg_cut_10`` → ``ndcg_at_10``, ``recip_rank`` → ``mrr``.
    KeyError for a key no registered measure produces."""
    for measure in MEASURES.values():
        if not measure.cutoffs and key == measure.trec:
            return measure.name
        head, _, k = key.rpartition("_")
        if measure.cutoffs and head == measure.trec and k.isdigit():
            return measure.metric(int(k))
    raise KeyError(f"no registered measure gives pytrec_eval's {key!r}")


def find(metric: str) -> tuple[Measure, int | None] | None:
    """The measure and cutoff of one of our metric names (``recall_at_100`` → (RECALL, 100)); None if unknown."""
    if (measure := MEASURES.get(metric)) is not None and not measure.cutoffs:
        return measure, None
    head, _, k = metric.rpartition("_")
    measure = MEASURES.get(head)
    if measure is not None and measure.cutoffs and k.isdigit():
        return measure, int(k)
    return None


def parse(text: str) -> str | None:
    """Our name for a metric in ours or the paper's spelling (``NDCG@10``, ``p@5``, ``MRR``, ``ndcg_at_10``);
    None if no registered measure reads it."""
    spelled = text.strip().lower()
    if (found := find(spelled)) is not None:
        return found[0].metric(found[1])
    for separator in ("@", "_at_"):
        head, sep, k = spelled.rpartition(separator)
        if not (sep and k.isdigit()):
            continue
        for measure in MEASURES.values():
            if measure.cutoffs and head in {measure.label.lower(), measure.name.removesuffix("_at")}:
                return measure.metric(int(k))
    return next((m.name for m in MEASURES.values() if not m.cutoffs and spelled == m.label.lower()), None)


def paper_metrics(kind: str) -> tuple[str, ...]:
    """The metrics the R2MED paper published for a kind of system (a key of :data:`PAPER`), in display
    order; empty for a kind it has no numbers for."""
    scoring = PAPER.get(kind)
    if scoring is None:
        return ()
    return tuple(m.metric(k) for m, k in _pairs() if kind in m.published and (k is None or k in scoring.cutoffs))


def published_metrics() -> tuple[str, ...]:
    """Every metric the paper published for some kind of system: the names its result files may hold."""
    any_kind = {name for kind in PAPER for name in paper_metrics(kind)}
    return tuple(name for name in all_metrics() if name in any_kind)


# --------------------------------------------------------------------------- the benchmark's measures

_BOTH = frozenset({"dense", "bm25", "reranker"})

NDCG = register(
    Measure(
        "ndcg_at",
        "ndcg_cut",
        "nDCG",
        "how good the top {k} is, 0 to 1: relevant documents ranked higher, and higher grades, count more",
        CUTOFFS,
        _BOTH,
        deep=True,
        mteb="ndcg_at",
    )
)
MAP = register(
    Measure(
        "map_at",
        "map_cut",
        "MAP",
        "mean average precision over the top {k}: precision at each relevant document found, averaged",
        CUTOFFS,
        _BOTH,
        deep=True,
        mteb="map_at",
    )
)
RECALL = register(
    Measure(
        "recall_at",
        "recall",
        "Recall",
        "the share of the relevant documents found in the top {k}",
        CUTOFFS,
        _BOTH,
        deep=True,
        mteb="recall_at",
    )
)
PRECISION = register(
    Measure(
        "precision_at",
        "P",
        "P",
        "the share of the top {k} that is relevant",
        CUTOFFS,
        _BOTH,
        deep=True,
        mteb="precision_at",
    )
)
#: pytrec_eval's uncut reciprocal rank over the top 100 a run keeps: MTEB's ``mrr_at_100``. The paper
#: published it for BM25 and rerankers (pytrec_eval), not for dense retrievers (BEIR).
MRR = register(
    Measure(
        "mrr",
        "recip_rank",
        "MRR",
        "how high the first relevant document ranks: 1 = first, 0.5 = second, 0.1 = tenth",
        published=frozenset({"bm25", "reranker"}),
        mteb="mrr_at_100",
    )
)
