"""Results that travel both ways between this app and MTEB: a local run written as an MTEB result file
and predictions file, and an MTEB result file someone made with ``mteb run`` read back as a leaderboard
row of its own (its predictions file is a run the importer already reads, to browse per query).

The result file has mteb's ``TaskResult`` shape (``dataset_revision``, ``task_name``, ``mteb_version``,
``evaluation_time``, ``scores.test[0]`` with ``main_score``, ``hf_subset`` "default" and ``languages``),
so ``mteb.TaskResult.from_disk`` reads it, and the metric keys are MTEB's true names for our numbers
(``analysis.mteb_names``: our ``mrr`` — pytrec_eval's reciprocal rank over the run's depth — is
``mrr_at_100``, never ``mrr_at_10``). ``mteb_version`` is null: mteb did not make the numbers; what did
(this app's evaluator, its version, the system and its provenance) is in an ``r2med_explorer`` block
beside, which mteb ignores. The predictions file is what mteb's ``save_predictions`` writes:
``{"mteb_model_meta": {...}, "default": {"test": {qid: {docid: score}}}}``.

A file read back is untrusted: every field is checked and a bad one is refused with a ``DataError``
naming the file and the field (wrong types, numbers that are not finite scores in [0, 1], text that is
not valid Unicode, nesting too deep or integers too long for the JSON reader).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r2med_core.analysis.mteb_names import MAIN_SCORE, METRIC_TO_MTEB, MTEB_SPLIT, MTEB_SUBSET, MTEB_TASK_NAMES
from r2med_core.analysis.mteb_names import task_from_mteb as _task_from_mteb
from r2med_core.data import DataError, Dataset, Problem
from r2med_core.evaluation import Results
from r2med_core.imported_runs import is_mteb_result
from r2med_core.runs import Run

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "EXPORT_LABEL",
    "MtebResultFile",
    "is_mteb_result",
    "mteb_predictions",
    "mteb_result",
    "mteb_result_board",
    "read_mteb_result",
    "write_mteb_files",
]

#: What an imported MTEB result row says about itself.
EXPORT_LABEL = "an MTEB result file: its numbers were scored by whoever made it, not checked here"
_LANGUAGES = ["eng-Latn"]
_METRIC_KEY = re.compile(r"(ndcg|map|recall|precision|mrr)_at_(\d{1,4})")


def mteb_task_name(dataset: Dataset) -> str:
    """MTEB's task name for an R2MED task; any other dataset keeps its own name (MTEB has no such task)."""
    return MTEB_TASK_NAMES.get(dataset.name, dataset.name)


def _mteb_key(metric: str, depth: int) -> str:
    """MTEB's name for one of our metrics: the same ``family_at_k``, and ``mrr`` over the run's depth."""
    return f"mrr_at_{depth}" if metric == "mrr" else METRIC_TO_MTEB.get(metric, metric)


def mteb_result(
    results: Results, dataset: Dataset, system: str, *, depth: int = 100, provenance: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The result file's content for a local evaluation of ``system`` (scored to ``depth``)."""
    from r2med_core.reporting.provenance import project_version

    scores: dict[str, Any] = {_mteb_key(m, depth): float(v) for m, v in results.means.items() if math.isfinite(v)}
    scores |= {"main_score": float(results.means[MAIN_SCORE]), "hf_subset": MTEB_SUBSET, "languages": _LANGUAGES}
    return {
        "dataset_revision": dataset.revision or f"fingerprint:{dataset.fingerprint}",
        "task_name": mteb_task_name(dataset),
        "mteb_version": None,
        "scores": {MTEB_SPLIT: [scores]},
        "evaluation_time": float(results.seconds),
        "kg_co2_emissions": None,
        "r2med_explorer": {
            "made_by": "R2MED Explorer, not mteb: the benchmark's pytrec_eval evaluation of a local run",
            "version": project_version()["version"],
            "system": system,
            "dataset": dataset.name,
            "queries_evaluated": results.n_evaluated,
            "depth": depth,
            "mrr": f"our mrr (reciprocal rank over the top {depth}) is written as mrr_at_{depth}",
            **({"provenance": provenance} if provenance else {}),
        },
    }


def mteb_predictions(run: Run, system: str, revision: str | None = None) -> dict[str, Any]:
    """The predictions file's content: every query's ``{doc id: score}``, under mteb's wrapper."""
    rankings = {qid: {doc: float(score) for doc, score in ranking} for qid, ranking in run.rankings.items()}
    return {"mteb_model_meta": {"model_name": system, "revision": revision}, MTEB_SUBSET: {MTEB_SPLIT: rankings}}


def write_mteb_files(
    run: Run,
    results: Results,
    dataset: Dataset,
    system: str,
    folder: Path,
    *,
    depth: int = 100,
    provenance: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """Write ``<TaskName>.json`` and ``<TaskName>_predictions.json`` into ``folder`` (atomically); their paths."""
    from r2med_core.cache import atomic_write_text

    task = mteb_task_name(dataset)
    folder.mkdir(parents=True, exist_ok=True)
    result_path, predictions_path = folder / f"{task}.json", folder / f"{task}_predictions.json"
    content = mteb_result(results, dataset, system, depth=depth, provenance=provenance)
    atomic_write_text(result_path, json.dumps(content, indent=2, ensure_ascii=False))
    atomic_write_text(predictions_path, json.dumps(mteb_predictions(run, system), ensure_ascii=False))
    return result_path, predictions_path


# --------------------------------------------------------------------------- reading one back


@dataclass(frozen=True)
class MtebResultFile:
    """One MTEB result file, checked: which task (``task`` our name, None if not R2MED's), which data and
    mteb version, the main score and the metrics that map to ours (our names, 0–1)."""

    label: str
    task_name: str
    task: str | None
    dataset_revision: str
    mteb_version: str | None
    main_score: float
    metrics: dict[str, float]
    evaluation_time: float | None
    made_here: bool


def _text(value: Any, label: str, field: str, problems: list[Problem], *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        problems.append(Problem(label, None, f"{field}: expected a non-empty string, got {type(value).__name__}"))
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        problems.append(Problem(label, None, f"{field}: not valid Unicode text (a lone surrogate)"))
        return None
    if len(value) > 200:
        problems.append(Problem(label, None, f"{field}: longer than 200 characters"))
        return None
    return value


def _score(value: Any, label: str, field: str, problems: list[Problem]) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        problems.append(Problem(label, None, f"{field}: expected a number, got {type(value).__name__}"))
        return None
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        problems.append(Problem(label, None, f"{field}: {number!r} is not a score in [0, 1]"))
        return None
    return number


def _parse(data: bytes, label: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise DataError([Problem(label, None, f"not UTF-8 text (byte {err.start})")]) from None
    except json.JSONDecodeError as err:
        raise DataError([Problem(label, err.lineno, f"malformed JSON: {err.msg} (column {err.colno})")]) from None
    except (ValueError, RecursionError) as err:  # nesting too deep, integers of thousands of digits
        raise DataError([Problem(label, None, f"unreadable JSON: {type(err).__name__}")]) from None


def read_mteb_result(data: bytes, label: str) -> MtebResultFile:
    """Read and check an MTEB result file (bytes; ``label`` names it in messages); DataError naming the
    field for anything that is not what mteb writes."""
    obj = _parse(data, label)
    if not isinstance(obj, dict):
        raise DataError([Problem(label, None, "expected a JSON object (an MTEB result file)")])
    problems: list[Problem] = []
    task_name = _text(obj.get("task_name"), label, "task_name", problems)
    revision = _text(obj.get("dataset_revision"), label, "dataset_revision", problems)
    version = _text(obj.get("mteb_version"), label, "mteb_version", problems, optional=True)
    seconds = obj.get("evaluation_time")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))):
        problems.append(Problem(label, None, f"evaluation_time: expected a number, got {type(seconds).__name__}"))
        seconds = None
    elif seconds is not None and not (math.isfinite(float(seconds)) and seconds >= 0):
        problems.append(Problem(label, None, "evaluation_time: not a finite number of seconds"))
        seconds = None
    scores = obj.get("scores")
    split = scores.get(MTEB_SPLIT) if isinstance(scores, dict) else None
    if not isinstance(split, list) or not split or not all(isinstance(s, dict) for s in split):
        problems.append(Problem(label, None, f"scores.{MTEB_SPLIT}: expected a list of objects, one per subset"))
        raise DataError(problems)
    subsets = [s for s in split if s.get("hf_subset") == MTEB_SUBSET]
    if len(subsets) != 1:
        where = f"scores.{MTEB_SPLIT}[].hf_subset"
        problems.append(Problem(label, None, f"{where}: expected exactly one {MTEB_SUBSET!r} subset"))
        raise DataError(problems)
    found = subsets[0]
    at = f"scores.{MTEB_SPLIT}[{split.index(found)}]"
    main = _score(found.get("main_score"), label, f"{at}.main_score", problems)
    metrics: dict[str, float] = {}
    for key, value in found.items():
        match = _METRIC_KEY.fullmatch(key) if isinstance(key, str) else None
        if match is None:
            continue  # mteb's other numbers (nauc_*, hit_rate_*, accuracy …) have no counterpart here
        score = _score(value, label, f"{at}.{key}", problems)
        if score is not None and key in _FROM_MTEB:
            metrics[_FROM_MTEB[key]] = score
    if not metrics and not problems:
        problems.append(Problem(label, None, f"{at}: none of the metrics this app reports (ndcg_at_10 …)"))
    if problems:
        raise DataError(problems[:20])
    assert task_name is not None and revision is not None and main is not None
    made_here = isinstance(obj.get("r2med_explorer"), dict)
    return MtebResultFile(
        label, task_name, _task_from_mteb(task_name), revision, version, main, metrics,
        None if seconds is None else float(seconds), made_here,
    )  # fmt: skip


#: MTEB's key → our metric, for the keys a result file may hold: the shared cutoffs, our extra ones
#: under the same pattern, and ``mrr_at_100`` → ``mrr``.
_FROM_MTEB: dict[str, str] = {
    **{_mteb_key(m, 100): m for m in METRIC_TO_MTEB},
    **{f"{f}_at_{k}": f"{f}_at_{k}" for f in ("ndcg", "map", "recall", "precision") for k in (25, 50)},
}


def mteb_result_board(files: list[MtebResultFile], metric: str = "ndcg_at_10") -> pd.DataFrame:
    """Imported result files as leaderboard rows (index: the file's label): ``task``, ``metric`` (× 100;
    NaN if the file has no such metric), ``mteb_version``, ``dataset revision``, ``data`` (whether that
    revision is the one this app loads for the task, in words) and ``made by``."""
    import pandas as pd

    from r2med_core.tasks import TASKS

    rows = []
    for item in files:
        loaded = TASKS[item.task].revision if item.task else None
        if item.task is None:
            data = f"{item.task_name} is not one of R2MED's MTEB tasks"
        elif item.dataset_revision == loaded:
            data = "the revision this app loads"
        else:
            data = f"⚠ not the revision this app loads ({loaded[:10]}…)" if loaded else ""
        rows.append(
            {
                "file": item.label,
                "task": item.task or item.task_name,
                metric: 100 * item.metrics[metric] if metric in item.metrics else math.nan,
                "mteb_version": item.mteb_version or "",
                "dataset revision": item.dataset_revision,
                "data": data,
                "made by": "says: R2MED Explorer's export" if item.made_here else "its maker (not checked here)",
            }
        )
    return pd.DataFrame(rows).set_index("file") if rows else pd.DataFrame()
