"""Transcribe MTEB's R2MED results into ``r2med_core/analysis/mteb_results.json``.

A one-off developer script, like ``transcribe_published.py``: the package must not read MTEB's results
repository at run time, so this flattens its R2MED files once into a compact, attributed data file
that ships inside ``r2med_core``.

Input: a local git copy (bare or not) of https://github.com/embeddings-benchmark/results (CC0). It
reads, at the given commit (default HEAD), every ``results/<org>__<model>/<revision>/R2MED<Task>Retrieval.json``
(26 models × 8 tasks at the time of writing), and keeps per file: ``mteb_version``,
``dataset_revision``, ``evaluation_time``, ``date``, ``main_score`` and the metrics that map to ours
(``r2med_core.analysis.mteb_names``: our names, values unchanged). It also walks the git history of
each file for an earlier ``dataset_revision`` changed without a new run (the 2025 uploads' Medical-Sciences
files were edited by hand from 7f11654e… to 1b48911514…, scores untouched): the run used the older
one, so the data file keeps it.

Usage::

    python scripts/transcribe_mteb.py --repo /path/to/results.git --output r2med_core/analysis/mteb_results.json
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from r2med_core.analysis.mteb_names import MAIN_SCORE, METRIC_FROM_MTEB, MTEB_SPLIT, task_from_mteb

_PATH = re.compile(r"results/(?P<folder>[^/]+)/(?P<revision>[^/]+)/(?P<task>R2MED\w+Retrieval)\.json")

HEADER: dict[str, Any] = {
    "title": "MTEB's R2MED results",
    "label": "MTEB's run, not the benchmark's evaluation",
    "attribution": (
        "Results of the Massive Text Embedding Benchmark's runs of its eight R2MED tasks, from its public "
        "results repository (CC0 1.0)."
    ),
    "source": "https://github.com/embeddings-benchmark/results",
    "license": "CC0-1.0",
    "transcribed_by": "scripts/transcribe_mteb.py (metric names mapped to ours, values unchanged)",
    "notes": [
        "Values are MTEB's means, rounded as MTEB writes them (5 decimals; mrr 6).",
        "Only the metrics both report are kept: ndcg/map/recall/precision at 1, 3, 5, 10, 100, and MTEB's "
        "mrr_at_100 under our name mrr (pytrec_eval's reciprocal rank over the top 100).",
        "earlier_dataset_revisions: a dataset_revision the file held before a later commit changed it "
        "without changing its scores; the run used the first of them.",
    ],
}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _earlier_revisions(repo: Path, commit: str, path: str) -> list[dict[str, str]]:
    """Every dataset_revision a file held before, oldest first, with the commit that replaced it."""
    log = _git(repo, "log", "--format=COMMIT %H %cI", "-p", "-G", '"dataset_revision"', commit, "--", path)
    found: list[dict[str, str]] = []
    current: tuple[str, str] = ("", "")
    for line in log.splitlines():
        if line.startswith("COMMIT "):
            _, sha, date = line.split(" ", 2)
            current = (sha, date)
        elif m := re.fullmatch(r'-\s*"dataset_revision": "([^"]*)",?', line):
            found.append({"revision": m[1], "replaced_in": current[0], "replaced_on": current[1]})
    return found[::-1]


def _task_record(repo: Path, commit: str, path: str, data: dict[str, Any]) -> dict[str, Any]:
    scores = data["scores"][MTEB_SPLIT]
    if len(scores) != 1 or scores[0].get("hf_subset") != "default":
        raise ValueError(f"{path}: expected one 'default' subset under scores.{MTEB_SPLIT}")
    values = scores[0]
    metrics: dict[str, float] = {}
    for key, ours in METRIC_FROM_MTEB.items():
        value = values.get(key)
        if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= 1:
            raise ValueError(f"{path}: scores.{MTEB_SPLIT}[0].{key} = {value!r} is not a score in [0, 1]")
        metrics[ours] = float(value)
    if values.get("main_score") != values.get(MAIN_SCORE):
        raise ValueError(f"{path}: main_score is not {MAIN_SCORE}")
    record: dict[str, Any] = {
        "file": path,
        "mteb_version": data["mteb_version"],
        "dataset_revision": data["dataset_revision"],
    }
    earlier = _earlier_revisions(repo, commit, path)
    if earlier:
        record["earlier_dataset_revisions"] = earlier
    for optional in ("evaluation_time", "date"):
        if isinstance(data.get(optional), (int, float)):
            record[optional] = round(float(data[optional]), 3)
    record["metrics"] = metrics
    return record


def transcribe(repo: Path, commit: str) -> dict[str, Any]:
    """Read every R2MED result file at ``commit``; return the data file's content."""
    sha = _git(repo, "rev-parse", commit).strip()
    date = _git(repo, "show", "-s", "--format=%cI", sha).strip()
    models: dict[tuple[str, str], dict[str, Any]] = {}
    for path in _git(repo, "ls-tree", "-r", "--name-only", sha, "results/").splitlines():
        m = _PATH.fullmatch(path)
        if not m:
            continue
        task = task_from_mteb(m["task"])
        if task is None:
            raise ValueError(f"{path}: unknown R2MED task {m['task']!r}")
        data = json.loads(_git(repo, "show", f"{sha}:{path}"))
        if data.get("task_name") != m["task"]:
            raise ValueError(f"{path}: task_name {data.get('task_name')!r} differs from the file name")
        model = m["folder"].replace("__", "/", 1)
        entry = models.setdefault((model, m["revision"]), {"model": model, "revision": m["revision"], "tasks": {}})
        entry["tasks"][task] = _task_record(repo, sha, path, data)
    return {
        **HEADER,
        "commit": sha,
        "commit_date": date,
        "models": sorted(models.values(), key=lambda e: e["model"].lower()),
    }


def render(content: dict[str, Any]) -> str:
    """Header indented for reading, one model per line so diffs stay small."""
    head = {k: v for k, v in content.items() if k != "models"}
    text = json.dumps(head, indent=2, ensure_ascii=False)
    lines = ",\n".join("    " + json.dumps(m, separators=(",", ":"), ensure_ascii=False) for m in content["models"])
    return text[: -len("\n}")] + f',\n  "models": [\n{lines}\n  ]\n}}\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="a local git copy of embeddings-benchmark/results")
    parser.add_argument("--commit", default="HEAD", help="the commit to read (default HEAD)")
    parser.add_argument("--output", type=Path, required=True, help="the JSON file to write")
    args = parser.parse_args(argv)
    content = transcribe(args.repo, args.commit)
    if not content["models"]:
        parser.error(f"no R2MED result files under {args.repo}")
    text = render(content)
    json.loads(text)
    args.output.write_text(text, encoding="utf-8")
    files = sum(len(m["tasks"]) for m in content["models"])
    print(f"wrote {len(content['models'])} models, {files} files (commit {content['commit'][:12]}) to {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
