"""The R2MED authors' published results, so the app can show the paper's leaderboard and put the
paper's number next to a local run, and the results others published on R2MED after the paper.

The numbers ship inside the package (``published_results.json``, written once by
``scripts/transcribe_published.py`` from the benchmark repository's ``results/`` folder, the files
only its first commit has, and a hand transcription of later papers) so nothing here touches the
network or files outside the package. Metric names are the ones our evaluator reports
(``ndcg_at_10``, ``map_at_10``, ``recall_at_10``, ``precision_at_10``, ``mrr``); the upstream files
mix ``ndcg_at_10`` and ``NDCG@10`` styles.

Not every setting has every metric: the dense retrievers and their rewrites report cutoffs
1/3/5/10/100 and no ``mrr``; the BM25 baseline, the BM25 rewrite runs and the rerankers report
1/10/25/50/100 and ``mrr``. A metric that was not published is NaN in the frames and ``None`` from
:func:`published_score`.

Papers print scores × 100 (nDCG@10 41.35); :func:`leaderboard` gives them that way with
``points=True``, and the post-paper rows are kept as printed.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, fields
from functools import lru_cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any, Literal

from r2med_core import measures
from r2med_core.tasks import RETRIEVER_NAMES, TASKS

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "ATTRIBUTION",
    "EVALUATIONS",
    "GAP_TOLERANCE",
    "METHOD_NAMES",
    "METRICS",
    "PUBLISHED_TASKS",
    "RERANKER_NAMES",
    "RETRIEVER_NAMES",
    "SETTING_KINDS",
    "SYSTEM_KINDS",
    "TASK_HEADERS",
    "PostPaperResult",
    "Setting",
    "gains_over",
    "leaderboard",
    "load_published",
    "normalise_metric",
    "paper_gap",
    "post_paper_board",
    "post_paper_results",
    "published_key_for",
    "published_score",
    "published_settings",
    "task_help",
]

SettingKind = Literal["retriever", "rewrite", "reranker"]

#: The kinds of published setting (not of system: that is ``r2med_core.kinds``): a first-stage retriever
#: alone, a query rewrite (GAR) + retriever, or a reranker over a retriever's top ``top_k``.
SETTING_KINDS: tuple[str, ...] = ("retriever", "rewrite", "reranker")

#: The kinds of system (as ``evaluation.published_metrics`` names them) each setting kind holds:
#: their published metric sets differ (BM25 and rerankers through pytrec_eval, dense through BEIR).
SYSTEM_KINDS: dict[str, tuple[str, ...]] = {
    "retriever": ("bm25", "dense"),
    "rewrite": ("bm25", "dense"),
    "reranker": ("reranker",),
}

#: The eight R2MED tasks, in the paper's order (``tasks.TASKS``, where each task's facts stand).
PUBLISHED_TASKS: tuple[str, ...] = tuple(TASKS)

#: Every metric name the data file may hold: those the paper published for some kind of system, as the
#: measure registry says (a measure registered without a ``published`` kind is never looked for here).
METRICS: tuple[str, ...] = measures.published_metrics()

#: Each task's column header in a table of all eight beside the settings' names (``TaskInfo.header``).
TASK_HEADERS: dict[str, str] = {name: info.header for name, info in TASKS.items()}


def task_help(task: str) -> str:
    """A task column's tooltip: "PMC-Treatment: PubMed Central case reports, 13 queries" (the header is short)."""
    info = TASKS[task]
    return f"{task}: {info.source}, {info.n_queries} queries, {info.n_documents:,} documents."


ATTRIBUTION: str = (
    'Published results from "R2MED: A Benchmark for Reasoning-Driven Medical Retrieval" '
    "(Li et al., 2025), from the authors' public repository (https://github.com/R2MED/R2MED), "
    "MIT License."
)

#: Display names for the query-rewriting (GAR) methods.
METHOD_NAMES: dict[str, str] = {
    "hyde": "HyDE",
    "query2doc": "Query2Doc",
    "lamer": "LameR",
    "search-o1": "Search-o1",
    "search-r1": "Search-R1",
}

#: Display names for the rerankers.
RERANKER_NAMES: dict[str, str] = {
    "bge-reranker": "bge-reranker",
    "monobert": "monoBERT",
    "rankllama": "RankLLaMA",
}

#: Where a published setting's files are: the repository's ``results/`` folder, or only its first
#: commit (HyDE with o3-mini, the paper's best figure; Search-R1 (qwen-3b-ins) with BM25; the
#: rerankers over the top 100).
ORIGINS: tuple[str, ...] = ("repository", "first commit")

#: Whose evaluation a post-paper row is: the R2MED authors' own number (quoted by a later paper), or
#: a run by a later paper's authors with their own code, which the benchmark did not check.
EVALUATIONS: tuple[str, ...] = ("benchmark's own", "authors' re-run")

#: A local score further than this from the paper's (0–1 scale) is flagged as differing: a gap that
#: size usually means a different model revision, tokenizer or corpus copy.
GAP_TOLERANCE: float = 0.01

_SETTING_COLUMNS = ["key", "label", "kind", "retriever", "method", "llm", "reranker", "top_k", "origin"]


@dataclass(frozen=True)
class Setting:
    """One published configuration; hashable so it can key caches and URLs.

    ``key`` mirrors the upstream folder layout (``bm25``, ``hyde/gpt4/bm25``,
    ``bge-reranker/nv/top_10``); ``label`` is for people (``HyDE (gpt4) + BM25``).
    """

    kind: SettingKind
    retriever: str
    method: str | None = None
    llm: str | None = None
    reranker: str | None = None
    top_k: int | None = None

    def __post_init__(self) -> None:
        has = (self.method is not None, self.llm is not None, self.reranker is not None)
        expected = {
            "retriever": (False, False, False),
            "rewrite": (True, True, False),
            "reranker": (False, False, True),
        }
        if self.kind not in expected:
            raise ValueError(f"unknown kind {self.kind!r}; expected one of {SETTING_KINDS}")
        if has != expected[self.kind] or (self.top_k is not None) != (self.kind == "reranker"):
            raise ValueError(f"inconsistent fields for a {self.kind!r} setting: {self!r}")

    @property
    def key(self) -> str:
        """Stable id, as the upstream results folder spells the setting."""
        if self.kind == "rewrite":
            return f"{self.method}/{self.llm}/{self.retriever}"
        if self.kind == "reranker":
            return f"{self.reranker}/{self.retriever}/top_{self.top_k}"
        return self.retriever

    @property
    def label(self) -> str:
        """Human-readable name for tables and charts."""
        retriever = RETRIEVER_NAMES.get(self.retriever, self.retriever)
        if self.kind == "rewrite":
            method = METHOD_NAMES.get(str(self.method), str(self.method))
            return f"{method} ({self.llm}) + {retriever}"
        if self.kind == "reranker":
            reranker = RERANKER_NAMES.get(str(self.reranker), str(self.reranker))
            return f"{reranker}@{self.top_k} over {retriever}"
        return retriever

    @classmethod
    def from_key(cls, key: str) -> Setting:
        """Parse a ``key`` back into a setting (raises ValueError if malformed)."""
        parts = key.split("/")
        if len(parts) == 1 and parts[0]:
            return cls("retriever", parts[0])
        if len(parts) == 3 and (m := re.fullmatch(r"top_(\d+)", parts[2])):
            return cls("reranker", parts[1], reranker=parts[0], top_k=int(m[1]))
        if len(parts) == 3 and all(parts):
            return cls("rewrite", parts[2], method=parts[0], llm=parts[1])
        raise ValueError(f"malformed setting key {key!r}")


def normalise_metric(name: str) -> str:
    """Map ``NDCG@10`` / ``P@10`` / ``MRR`` / ``ndcg_at_10`` to our name, so callers may use
    the paper's spelling; ValueError (listing the valid names) if it is not a published metric.
    """
    candidate = measures.parse(name)
    if candidate in METRICS:
        return str(candidate)
    raise ValueError(f"unknown metric {name!r}; expected one of: {', '.join(METRICS)}")


@lru_cache(maxsize=1)
def _raw() -> dict[str, Any]:
    """The parsed data file; read through importlib.resources so it works once installed."""
    resource = files(__package__ or "r2med_core.analysis").joinpath("published_results.json")
    data = json.loads(resource.read_text(encoding="utf-8"))
    for record in data["records"]:
        unknown = set(record["metrics"]) - set(METRICS)
        if unknown or record["task"] not in PUBLISHED_TASKS or record.get("origin", ORIGINS[0]) not in ORIGINS:
            raise ValueError(f"published_results.json: bad record {record!r}")
    return data


@lru_cache(maxsize=1)
def _frame() -> pd.DataFrame:
    rows = []
    for record in _raw()["records"]:
        setting = Setting(
            kind=record["kind"],
            retriever=record["retriever"],
            method=record.get("method"),
            llm=record.get("llm"),
            reranker=record.get("reranker"),
            top_k=record.get("top_k"),
        )
        rows.append(
            {
                "key": setting.key,
                "label": setting.label,
                "kind": setting.kind,
                "retriever": setting.retriever,
                "method": setting.method,
                "llm": setting.llm,
                "reranker": setting.reranker,
                "top_k": setting.top_k,
                "origin": record.get("origin", ORIGINS[0]),
                "task": record["task"],
                **{metric: record["metrics"].get(metric, math.nan) for metric in METRICS},
            }
        )
    import pandas as pd  # imported with the first table, not with the names fidelity and the CLI need

    frame = pd.DataFrame(rows, columns=[*_SETTING_COLUMNS, "task", *METRICS])
    frame["top_k"] = frame["top_k"].astype("Int64")
    frame[list(METRICS)] = frame[list(METRICS)].astype("float64")
    return frame


@lru_cache(maxsize=1)
def _lookup() -> tuple[dict[tuple[str, str], dict[str, float]], dict[str, str]]:
    """(key, task) -> metrics, and lower-cased label/key -> key, for fast single lookups."""
    scores: dict[tuple[str, str], dict[str, float]] = {}
    names: dict[str, str] = {}
    for setting in published_settings():
        names[setting.key.lower()] = setting.key
        names[" ".join(setting.label.lower().split())] = setting.key
    for record in _raw()["records"]:
        scores[(_record_key(record), record["task"])] = record["metrics"]
    return scores, names


def _record_key(record: dict[str, Any]) -> str:
    if record["kind"] == "rewrite":
        return f"{record['method']}/{record['llm']}/{record['retriever']}"
    if record["kind"] == "reranker":
        return f"{record['reranker']}/{record['retriever']}/top_{record['top_k']}"
    return str(record["retriever"])


def load_published() -> pd.DataFrame:
    """All published numbers in WIDE form: one row per setting × task.

    Columns: ``key``, ``label``, ``kind``, ``retriever``, ``method``, ``llm``, ``reranker``,
    ``top_k`` (nullable Int64), ``origin`` (one of :data:`ORIGINS`), ``task``, then one float column
    per name in :data:`METRICS`
    (NaN where the authors did not publish that metric). Returns a copy, so callers may mutate it.
    """
    return _frame().copy()


def published_settings() -> tuple[Setting, ...]:
    """Every published setting, in data-file order (for pickers and presets)."""
    frame = _frame().drop_duplicates("key")
    return tuple(Setting.from_key(key) for key in frame["key"])


def _with_avg(table: pd.DataFrame) -> pd.DataFrame:
    """Add ``Avg`` = mean over the 8 task columns, NaN unless all 8 are present, so a setting
    evaluated on fewer tasks is never ranked on an easier subset."""
    tasks = table[list(PUBLISHED_TASKS)]
    out = table.copy()
    out["Avg"] = tasks.mean(axis=1).where(tasks.notna().all(axis=1))
    return out


def leaderboard(metric: str = "ndcg_at_10", kind: str | None = None, *, points: bool = False) -> pd.DataFrame:
    """The paper's leaderboard for one metric: settings as rows (index = label), columns
    ``key``, ``kind``, ``origin``, the 8 tasks in :data:`PUBLISHED_TASKS` order, and ``Avg``.

    ``Avg`` is the mean over the 8 tasks, computed only where all 8 are present (else NaN).
    Rows are sorted by ``Avg`` descending (NaN last). Settings that never published ``metric``
    (e.g. ``mrr`` for most dense retrievers) are left out. ``metric`` accepts the paper's
    spelling too (``NDCG@10``); ``kind`` filters to one of :data:`SETTING_KINDS`. ``points`` gives the
    scores × 100, as the paper prints them (its average is the mean of those: HyDE (o3-mini) +
    NV-Embed-v2 is 41.35). Raises ValueError for an unknown metric or kind.
    """
    name = normalise_metric(metric)
    if kind is not None and kind not in SETTING_KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {SETTING_KINDS} or None")
    frame = _frame()
    if kind is not None:
        frame = frame[frame["kind"] == kind]
    order = list(dict.fromkeys(frame["label"]))
    wide = frame.pivot(index="label", columns="task", values=name)
    wide = wide.reindex(index=order, columns=list(PUBLISHED_TASKS))
    wide = wide.dropna(how="all") * (100 if points else 1)
    meta = frame.drop_duplicates("label").set_index("label")[["key", "kind", "origin"]]
    table = _with_avg(meta.join(wide, how="inner")[["key", "kind", "origin", *PUBLISHED_TASKS]])
    table = table.sort_values("Avg", ascending=False, na_position="last", kind="stable")
    table.index.name = "setting"
    table.columns.name = None
    return table


def published_score(setting: Setting | str, task: str, metric: str) -> float | None:
    """The paper's number for one setting on one task, to compare with a local run.

    ``setting`` is a :class:`Setting`, its ``key`` (``hyde/gpt4/bm25``) or its ``label``
    (``HyDE (gpt4) + BM25``, case-insensitive). Returns None when the authors published no such
    setting or not this metric for it; raises ValueError for an unknown task or metric name.
    """
    name = normalise_metric(metric)
    if task not in PUBLISHED_TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {PUBLISHED_TASKS}")
    scores, names = _lookup()
    if isinstance(setting, Setting):
        key: str | None = setting.key
    else:
        key = names.get(" ".join(setting.lower().split()))
    metrics = scores.get((key, task)) if key is not None else None
    if metrics is None:
        return None
    value = metrics.get(name)
    return None if value is None else float(value)


#: Local system names (see ``systems.py``) whose paper counterpart is a published retriever: the
#: dense presets share the paper's names and configuration (``medcpt-dual`` and MiniLM have no
#: counterpart), and the old preset names are still accepted in URLs.
_LOCAL_TO_PUBLISHED: dict[str, str] = {
    **{name: name for name in RETRIEVER_NAMES if name != "voyage"},  # voyage-3: no preset here
    "bge-large": "bge",
    "e5-mistral": "e5",
    "sfr-mistral": "sfr",
}


def published_key_for(system: str) -> str | None:
    """The published setting key matching a local system name, e.g. ``bm25+hyde:gpt4`` →
    ``hyde/gpt4/bm25``; None when the paper has no such setting (MiniLM, fusion, bm25s …)."""
    base, _, rewrite = system.partition("+")
    retriever = _LOCAL_TO_PUBLISHED.get(base)
    if retriever is None:
        return None
    if not rewrite:
        return retriever
    method, _, llm = rewrite.partition(":")
    return f"{method}/{llm}/{retriever}"


def paper_gap(local: float, paper: float | None, *, metric_published: bool) -> tuple[float | None, str]:
    """The gap ``local − paper`` and the flag the Leaderboard shows next to a local run.

    ``metric_published`` is False when the paper published no such metric for this kind of system
    (see ``evaluation.published_metrics``); a gap over :data:`GAP_TOLERANCE` is flagged as differing.
    """
    gap = None if paper is None or math.isnan(local) else local - paper
    if not metric_published:
        return gap, "the paper did not publish this metric for this kind of system"
    if paper is None:
        return None, "no published counterpart"
    if gap is None:
        return None, "not computed locally"
    return gap, "⚠ differs from the paper" if abs(gap) > GAP_TOLERANCE else "✓ matches"


@dataclass(frozen=True)
class PostPaperResult:
    """One result on R2MED published after the paper, as its source printed it (nDCG@10 × 100).

    ``scores`` are the 8 tasks in :data:`PUBLISHED_TASKS` order, or None where the source gives only
    the average. ``evaluation`` is one of :data:`EVALUATIONS`; ``setting`` says in words what ran
    (original queries or a rewrite; for a reranker its first stage and depth). ``note`` records a
    slip in the source (an average that is not the mean of its task values).
    """

    model: str
    kind: str
    queries: str
    setting: str
    evaluation: str
    avg: float
    paper: str
    table: str
    url: str
    scores: tuple[float, ...] | None = None
    first_stage: str | None = None
    depth: int | None = None
    note: str | None = None
    figure: str | None = None
    code: str | None = None

    def __post_init__(self) -> None:
        if self.evaluation not in EVALUATIONS:
            raise ValueError(f"{self.model}: evaluation must be one of {EVALUATIONS}")
        if not self.url.startswith("https://") or not self.paper or not self.table or not self.setting:
            raise ValueError(f"{self.model}: a post-paper result names its paper, table, URL and setting")
        if self.kind == "reranker" and not self.first_stage:
            raise ValueError(f"{self.model}: a reranker names its first stage")
        if self.scores is not None and len(self.scores) != len(PUBLISHED_TASKS):
            raise ValueError(f"{self.model}: scores must cover the {len(PUBLISHED_TASKS)} tasks")


@lru_cache(maxsize=1)
def post_paper_results() -> tuple[PostPaperResult, ...]:
    """Every post-paper result, in the data file's order (grouped by source, as each printed them)."""
    known = {f.name for f in fields(PostPaperResult)}
    results = []
    for row in _raw()["post_paper"]:
        if set(row) - known:
            raise ValueError(f"published_results.json: unknown post_paper fields in {row!r}")
        scores = row.get("scores")
        values = None if scores is None else tuple(float(scores[task]) for task in PUBLISHED_TASKS)
        results.append(PostPaperResult(**{**row, "scores": values}))
    return tuple(results)


def post_paper_board() -> pd.DataFrame:
    """The post-paper results as a table (index ``model``), best printed average first: ``Avg``,
    the 8 tasks (NaN where the source gives only the average), then ``evaluation``, ``queries``,
    ``first stage``, ``depth``, ``setting``, ``paper``, ``table``, ``url`` and ``note``."""
    import pandas as pd

    rows = [
        {
            "model": result.model,
            "Avg": result.avg,
            **dict(zip(PUBLISHED_TASKS, result.scores or (math.nan,) * len(PUBLISHED_TASKS), strict=True)),
            "evaluation": result.evaluation,
            "queries": result.queries,
            "first stage": result.first_stage,
            "depth": result.depth,
            "setting": result.setting,
            "paper": result.paper,
            "table": result.table,
            "url": result.url,
            "note": result.note,
        }
        for result in post_paper_results()
    ]
    board = pd.DataFrame(rows).set_index("model")
    board["depth"] = board["depth"].astype("Int64")
    text = ["evaluation", "queries", "first stage", "setting", "paper", "table", "url", "note"]
    board[text] = board[text].astype("object").where(board[text].notna(), "")  # a blank cell, never "None"
    return board.sort_values("Avg", ascending=False, kind="stable")


def gains_over(reference: str) -> pd.DataFrame:
    """Each post-paper result minus ``reference`` (a model in :func:`post_paper_board`), per task and
    on ``Avg``, in points: where a model's gain comes from. Rows without per-task scores keep only
    the ``Avg`` difference. ValueError if ``reference`` is unknown or has no per-task scores."""
    board = post_paper_board()
    columns = ["Avg", *PUBLISHED_TASKS]
    if reference not in board.index:
        raise ValueError(f"unknown post-paper result {reference!r}; expected one of {', '.join(board.index)}")
    base = board.loc[reference, columns].astype("float64")
    if base[list(PUBLISHED_TASKS)].isna().any():
        raise ValueError(f"{reference} has no per-task scores to compare with")
    gains = board[columns].astype("float64") - base
    return gains.drop(index=reference)
