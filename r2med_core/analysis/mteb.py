"""MTEB's runs of R2MED: the 26 models (at the time of transcription) that the Massive Text Embedding
Benchmark ran on its eight R2MED tasks, so the Leaderboard can show every public R2MED number in one
place — and say that these are MTEB's runs, not the benchmark's evaluation.

The numbers ship inside the package (``mteb_results.json``, written by ``scripts/transcribe_mteb.py``
from a local copy of MTEB's results repository, with the commit it read), so nothing here touches the
network. Each task result keeps what a reader needs to judge it: the model's revision, the
``mteb_version`` that ran it, the ``dataset_revision`` the file records — and, where the file's git
history shows that revision was edited afterwards without a new run (the 2025 uploads' Medical-Sciences
files, 7f11654e… → 1b48911514…), the revision the run actually used. A revision that differs from the
one this app loads (``TaskInfo.revision``) is flagged.

Why a separate module from ``published``: the paper's numbers and MTEB's are different protocols on
the same data (see ``analysis.mteb_protocols``); keeping them apart keeps the paper's table the paper's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from r2med_core.analysis.mteb_names import METRIC_TO_MTEB, MTEB_TASK_NAMES
from r2med_core.analysis.published import PUBLISHED_TASKS, RETRIEVER_NAMES, normalise_metric
from r2med_core.tasks import TASKS

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "MTEB_LABEL",
    "MtebModel",
    "MtebTaskResult",
    "mteb_board",
    "mteb_gains_over",
    "mteb_models",
    "mteb_source",
    "paper_key_for_mteb",
]

#: What every MTEB number on a page carries.
MTEB_LABEL = "MTEB's run, not the benchmark's evaluation"

#: MTEB models whose paper counterpart is not named like them (the rest match a paper retriever's
#: display name, e.g. ``BAAI/bge-large-en-v1.5`` ↔ ``bge``): MTEB's BM25 baseline is the paper's BM25 row.
_PAPER_COUNTERPARTS: dict[str, str] = {"mteb/baseline-bm25s": "bm25"}


@dataclass(frozen=True)
class MtebTaskResult:
    """One MTEB result file: which file, which versions, and the metrics that map to ours (0–1)."""

    task: str
    file: str
    mteb_version: str
    dataset_revision: str
    #: The revisions the file recorded before a later commit edited them (oldest first), as
    #: ``(revision, commit that replaced it, its date)``; the run used the first.
    earlier_revisions: tuple[tuple[str, str, str], ...]
    metrics: dict[str, float]
    evaluation_time: float | None = None

    @property
    def ran_revision(self) -> str:
        """The dataset revision the run used: the file's first recorded one."""
        return self.earlier_revisions[0][0] if self.earlier_revisions else self.dataset_revision

    @property
    def revision_flag(self) -> str | None:
        """Why this result's data may not be the data the app loads, in words; None when it is."""
        loaded = TASKS[self.task].revision
        if self.earlier_revisions:
            first, commit, date = self.earlier_revisions[0]
            edited = (
                f"the file says {self.dataset_revision[:10]}…, but it was edited by hand to say so "
                f"(commit {commit[:10]}, {date[:10]}, scores unchanged): the run used {first[:10]}…"
            )
            return edited + ("" if first == loaded else f", not the {loaded[:10]}… this app loads")
        if self.dataset_revision != loaded:
            return f"dataset revision {self.dataset_revision[:10]}…, not the {loaded[:10]}… this app loads"
        return None


@dataclass(frozen=True)
class MtebModel:
    """One model MTEB ran on R2MED: its hub id, the revision its files name, and its task results."""

    model: str
    revision: str
    tasks: dict[str, MtebTaskResult]

    @property
    def mteb_versions(self) -> tuple[str, ...]:
        return tuple(sorted({r.mteb_version for r in self.tasks.values()}))

    @property
    def folder(self) -> str:
        """Where its files are in MTEB's results repository."""
        return f"results/{self.model.replace('/', '__', 1)}/{self.revision}/"


def _bad(where: str, why: str) -> ValueError:
    return ValueError(f"mteb_results.json: {where}: {why}")


@lru_cache(maxsize=1)
def _raw() -> dict[str, Any]:
    resource = files(__package__ or "r2med_core.analysis").joinpath("mteb_results.json")
    return dict(json.loads(resource.read_text(encoding="utf-8")))


@lru_cache(maxsize=1)
def mteb_models() -> tuple[MtebModel, ...]:
    """Every model in the data file, in its order (by name); each file checked as it is read."""
    known = set(METRIC_TO_MTEB)
    models = []
    for entry in _raw()["models"]:
        tasks: dict[str, MtebTaskResult] = {}
        for task, record in entry["tasks"].items():
            where = f"{entry['model']} / {task}"
            if task not in MTEB_TASK_NAMES:
                raise _bad(where, "unknown task")
            metrics = record["metrics"]
            if set(metrics) - known or not all(isinstance(v, float) and 0 <= v <= 1 for v in metrics.values()):
                raise _bad(where, "metrics must be our names with scores in [0, 1]")
            earlier = tuple(
                (e["revision"], e["replaced_in"], e["replaced_on"]) for e in record.get("earlier_dataset_revisions", ())
            )
            tasks[task] = MtebTaskResult(
                task,
                record["file"],
                record["mteb_version"],
                record["dataset_revision"],
                earlier,
                dict(metrics),
                record.get("evaluation_time"),
            )
        models.append(
            MtebModel(entry["model"], entry["revision"], {t: tasks[t] for t in PUBLISHED_TASKS if t in tasks})
        )
    return tuple(models)


def mteb_source() -> dict[str, str]:
    """Where the numbers come from: ``url``, ``commit``, ``commit_date``, ``license``, ``label``, ``attribution``."""
    raw = _raw()
    return {key: str(raw[key]) for key in ("source", "commit", "commit_date", "license", "label", "attribution")}


def paper_key_for_mteb(model: str) -> str | None:
    """The paper's retriever key for an MTEB model (``BAAI/bge-large-en-v1.5`` → ``bge``), or None."""
    if model in _PAPER_COUNTERPARTS:
        return _PAPER_COUNTERPARTS[model]
    short = model.rsplit("/", 1)[-1]
    return next((key for key, name in RETRIEVER_NAMES.items() if name == short), None)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if len(values) == len(PUBLISHED_TASKS) else math.nan


def mteb_board(metric: str = "ndcg_at_10", *, points: bool = True) -> pd.DataFrame:
    """MTEB's R2MED results as a table (index ``model``), best average first: ``Avg`` (mean of the
    8 tasks), the 8 tasks, then ``revision`` (the model's), ``mteb_version``, ``dataset revisions``
    (blank when every task used the revision this app loads, else the flags in words), ``in the paper``
    (the paper's setting key, or blank) and ``files`` (the folder in MTEB's repository). ``points``
    gives scores × 100 as the Leaderboard prints them. ValueError for a metric MTEB does not report."""
    import pandas as pd

    name = normalise_metric(metric)
    if name not in METRIC_TO_MTEB:
        raise ValueError(f"MTEB reports no {metric!r}; it reports: {', '.join(METRIC_TO_MTEB)}")
    scale = 100 if points else 1
    rows = []
    for model in mteb_models():
        values = {task: model.tasks[task].metrics[name] * scale for task in model.tasks}
        flags = [f"{r.task}: {r.revision_flag}" for r in model.tasks.values() if r.revision_flag]
        rows.append(
            {
                "model": model.model,
                "Avg": _mean(list(values.values())),
                **{task: values.get(task, math.nan) for task in PUBLISHED_TASKS},
                "revision": model.revision,
                "mteb_version": ", ".join(model.mteb_versions),
                "dataset revisions": "; ".join(flags),
                "in the paper": paper_key_for_mteb(model.model) or "",
                "files": model.folder,
            }
        )
    board = pd.DataFrame(rows).set_index("model")
    return board.sort_values("Avg", ascending=False, kind="stable")


def mteb_gains_over(reference: str, metric: str = "ndcg_at_10") -> pd.DataFrame:
    """Each MTEB model minus ``reference`` (one of them), per task and on ``Avg``, in points: where a
    model's gain comes from. ValueError for an unknown reference."""
    board = mteb_board(metric)
    columns = ["Avg", *PUBLISHED_TASKS]
    if reference not in board.index:
        raise ValueError(f"unknown MTEB model {reference!r}; expected one of {', '.join(board.index)}")
    gains = board[columns].astype("float64") - board.loc[reference, columns].astype("float64")
    return gains.drop(index=reference)
