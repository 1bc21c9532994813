"""Transcribe the R2MED authors' published result files into ``r2med_core/analysis/published_results.json``.

A one-off developer script: the package must not read the upstream tree at run time, so this
flattens it once into a single compact, attributed data file that ships inside ``r2med_core``.

Three inputs: the benchmark repository's ``results/`` folder; optionally the result files that only
its first commit has (``--first-commit``: HyDE with o3-mini, the paper's best figure, Search-R1
with BM25, and the rerankers over the top 100), marked ``"origin": "first commit"``; optionally a
hand transcription of results published after the paper (``--post-paper``, a TOML file), which
has no machine-readable upstream, so it is checked here (every row names its source, setting and
evaluation; printed averages agree with their task values) and copied with its numbers unchanged.

Source layout (both result folders)::

    base retriever/<retriever>/<task>.json
    gar/<method>/<llm>/<retriever>/<task>.json
    reranker/<reranker>/<retriever>/top_<k>/<task>.json

Each file holds ``{"test": {metric: value}}``; older files say ``ndcg_at_10``/``mrr``, newer ones
``NDCG@10``/``MRR``. Names are normalised to the evaluator's (``ndcg_at_10``, ``map_at_10``,
``recall_at_10``, ``precision_at_10``, ``mrr``) and only the evaluator's cutoffs (1, 3, 5, 10, 25,
50, 100) are kept; values are copied unchanged. The first commit names its files by task but its
files' ``dataset_name`` by the older dataset names (``Stack-Biology``, ``PMCPatients`` …).

Usage::

    python scripts/transcribe_published.py \\
        --source "/path/to/R2MED/results" --first-commit "/path/to/first-commit/results" \\
        --post-paper scripts/post_paper_results.toml --output r2med_core/analysis/published_results.json
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from r2med_core import measures  # each metric family is one record there
from r2med_core.tasks import TASKS as _TASKS  # each task's facts stand once, in tasks.py

TASKS = tuple(_TASKS)
KIND_ORDER = {"retriever": 0, "rewrite": 1, "reranker": 2}
#: The metrics kept, in order: those the paper published as the measure registry records them (our
#: evaluator's cutoffs, PROTOCOL.md); the source's others (1000) are dropped.
KEPT = measures.published_metrics()
#: The first commit's ``dataset_name`` for each task (its files are named by task, as at HEAD).
FIRST_COMMIT_DATASETS = {info.name: info.first_commit_name for info in _TASKS.values()}
#: Whose evaluation a post-paper row is: the benchmark authors' own (quoted) or a later paper's re-run.
EVALUATIONS = ("benchmark's own", "authors' re-run")
#: Fields every post-paper row must end up with (from its row or its source).
POST_PAPER_FIELDS = ("model", "kind", "queries", "setting", "evaluation", "paper", "table", "url", "avg")
#: The order a post-paper row's fields are written in (what it is first, where it comes from last).
POST_PAPER_ORDER = (
    "model", "kind", "queries", "first_stage", "depth", "setting", "evaluation", "avg", "scores", "note",
    "paper", "table", "url", "figure", "code",
)  # fmt: skip

MIT_NOTICE = (
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this "
    'software and associated documentation files (the "Software"), to deal in the Software '
    "without restriction, including without limitation the rights to use, copy, modify, merge, "
    "publish, distribute, sublicense, and/or sell copies of the Software, and to permit persons "
    "to whom the Software is furnished to do so, subject to the following conditions: The above "
    "copyright notice and this permission notice shall be included in all copies or substantial "
    'portions of the Software. THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, '
    "EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS "
    "FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT "
    "HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF "
    "CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE "
    "USE OR OTHER DEALINGS IN THE SOFTWARE."
)

HEADER: dict[str, Any] = {
    "title": "R2MED: A Benchmark for Reasoning-Driven Medical Retrieval",
    "authors": "Lei Li, Xiao Zhou, Zheng Liu",
    "year": 2025,
    "attribution": (
        'Published results of "R2MED: A Benchmark for Reasoning-Driven Medical Retrieval" '
        "(Li et al., 2025), from the authors' public repository, MIT License."
    ),
    "source": "https://github.com/R2MED/R2MED (results/, and the first commit for the files only it has)",
    "license": "MIT",
    "copyright": "Copyright (c) 2025 the R2MED authors (Lei Li, Xiao Zhou, Zheng Liu)",
    "license_text": MIT_NOTICE,
    "transcribed_by": "scripts/transcribe_published.py (metric names normalised, values unchanged)",
    "notes": [
        "Values are pytrec_eval means rounded to 5 decimals, as published.",
        "Metric names are normalised to ndcg_at_k, map_at_k, recall_at_k, precision_at_k, mrr.",
        (
            "Only the metrics the R2MED evaluator reports are kept (k in {1,3,5,10,25,50,100} "
            "and mrr). Cutoffs differ by source file: most (the dense retrievers and their "
            "rewrites, scored through BEIR) report k in {1,3,5,10,100} without mrr; the BM25 "
            "baseline, the BM25 rewrite runs and the rerankers report k in {1,10,25,50,100} and "
            "mrr. Dropped from the source: k=1000 (NV-Embed-v2, HyDE (qwq-32b) + NV-Embed-v2)."
        ),
        (
            "Reranker records rerank only the top_k first-stage documents, so their metrics at "
            "cutoffs above top_k describe a list of top_k documents."
        ),
        (
            'Records with "origin": "first commit" exist only in the benchmark repository\'s '
            "first commit (HyDE with o3-mini, Search-R1 (qwen-3b-ins) with BM25, the rerankers "
            "over the top 100); the files both have hold identical numbers."
        ),
        (
            "post_paper rows are results on R2MED published after the paper, transcribed by hand "
            "from the source each row names (nDCG@10 x 100, as printed); they are not the "
            "benchmark's own evaluation unless their evaluation field says so."
        ),
    ],
}


def normalise_metric(name: str) -> str:
    """Map ``NDCG@10``/``P@10``/``MRR``/``ndcg_at_10`` to the evaluator's ``ndcg_at_10`` form (the measure
    registry reads both spellings)."""
    key = measures.parse(name)
    if key is None:
        raise ValueError(f"unrecognised metric name {name!r}")
    return key


def _metric_sort_key(name: str) -> int:
    """The registry's display order: family (nDCG, MAP, Recall, P, then MRR), then cutoff."""
    return KEPT.index(name)


def _setting(rel: Path) -> dict[str, Any]:
    """Setting fields from a path relative to the source root; raises on an unknown layout."""
    parts = rel.parts[:-1]
    if parts[0] == "base retriever" and len(parts) == 2:
        return {"kind": "retriever", "retriever": parts[1]}
    if parts[0] == "gar" and len(parts) == 4:
        return {"kind": "rewrite", "method": parts[1], "llm": parts[2], "retriever": parts[3]}
    if parts[0] == "reranker" and len(parts) == 4 and re.fullmatch(r"top_\d+", parts[3]):
        return {
            "kind": "reranker",
            "reranker": parts[1],
            "retriever": parts[2],
            "top_k": int(parts[3].removeprefix("top_")),
        }
    raise ValueError(f"unexpected layout: {rel}")


def _check_header(rel: Path, data: dict[str, Any], setting: dict[str, Any], dataset_name: str) -> list[str]:
    """Compare the file's own fields with its path; return human-readable mismatches."""
    expected: dict[str, Any] = {"dataset_name": dataset_name}
    if setting["kind"] == "retriever":
        expected["model_name"] = setting["retriever"]
    elif setting["kind"] == "rewrite":
        expected |= {
            "gar_method": setting["method"],
            "gar_llm": setting["llm"],
            "retriever_name": setting["retriever"],
        }
    else:
        expected |= {
            "reranker_name": setting["reranker"],
            "retriever_name": setting["retriever"],
            "topk": setting["top_k"],
        }
    return [
        f"{rel}: {key}={data.get(key)!r}, path says {value!r}"
        for key, value in expected.items()
        if key in data and data[key] != value
    ]


def transcribe(
    source: Path, origin: str | None = None, dataset_names: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Read every result file under ``source``; return (records, warnings).

    ``origin`` is written into every record (``"first commit"``); ``dataset_names`` maps a task to
    the ``dataset_name`` its files carry when that differs from the file name.
    """
    records: list[dict[str, Any]] = []
    warnings: list[str] = []
    for path in sorted(source.rglob("*.json")):
        rel = path.relative_to(source)
        setting = _setting(rel)
        if rel.stem not in TASKS:
            raise ValueError(f"{rel}: unknown task {rel.stem!r}")
        data = json.loads(path.read_text(encoding="utf-8"))
        warnings += _check_header(rel, data, setting, (dataset_names or {}).get(rel.stem, rel.stem))
        metrics: dict[str, float] = {}
        for name, value in data["test"].items():
            key = normalise_metric(name)
            if key not in KEPT:
                continue
            if key in metrics:
                raise ValueError(f"{rel}: {name!r} duplicates {key!r}")
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{rel}: {name}={value!r} is not a score in [0, 1]")
            metrics[key] = float(value)
        ordered = {k: metrics[k] for k in sorted(metrics, key=_metric_sort_key)}
        records.append({**setting, "task": rel.stem, **({"origin": origin} if origin else {}), "metrics": ordered})
    return records, warnings


def _record_sort_key(record: dict[str, Any]) -> tuple[Any, ...]:
    return (
        KIND_ORDER[record["kind"]],
        record.get("method") or "",
        record.get("llm") or "",
        record.get("reranker") or "",
        record.get("top_k") or 0,
        record["retriever"],
        TASKS.index(record["task"]),
    )


def merge(head: list[dict[str, Any]], first_commit: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """HEAD's records and the first commit's extra ones, sorted; a setting × task in both is an
    error (the first-commit folder should hold only what HEAD lacks)."""
    seen = {(tuple(sorted((k, v) for k, v in r.items() if k != "metrics")), r["task"]) for r in head}
    for record in first_commit:
        plain = {k: v for k, v in record.items() if k not in ("metrics", "origin")}
        if (tuple(sorted(plain.items())), record["task"]) in seen:
            raise ValueError(f"the first commit's {record} is also in results/: keep only the extra files")
    return sorted([*head, *first_commit], key=_record_sort_key)


def post_paper(path: Path) -> list[dict[str, Any]]:
    """Rows of the hand transcription, each merged with its source's fields and checked: every row
    names its paper, table, URL, setting and evaluation; scores are the 8 tasks in order, each in
    [0, 100]; a printed average further from its task values' mean than their rounding allows must
    carry a ``note`` saying so (it catches a mistyped value, and keeps a source's own slip visible)."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    sources = {source["id"]: source for source in data["source"]}
    rows: list[dict[str, Any]] = []
    for number, row in enumerate(data["row"], 1):
        where = f"{path.name}: row {number} ({row.get('model', '?')})"
        if row.get("source") not in sources:
            raise ValueError(f"{where}: unknown source {row.get('source')!r}")
        source = {k: v for k, v in sources[row["source"]].items() if k != "id"}
        merged = source | {k: v for k, v in row.items() if k != "source"}
        missing = [name for name in POST_PAPER_FIELDS if merged.get(name) in (None, "")]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
        if merged["evaluation"] not in EVALUATIONS:
            raise ValueError(f"{where}: evaluation must be one of {EVALUATIONS}")
        if merged["kind"] == "reranker" and not merged.get("first_stage"):
            raise ValueError(f"{where}: a reranker row names its first stage")
        if "scores" in merged:
            scores = merged["scores"]
            if len(scores) != len(TASKS) or not all(0 <= v <= 100 for v in scores):
                raise ValueError(f"{where}: scores must be {len(TASKS)} values in [0, 100], in task order")
            mean = sum(scores) / len(scores)
            if not math.isclose(mean, merged["avg"], abs_tol=0.01 + 1e-9) and not merged.get("note"):
                raise ValueError(f"{where}: the mean of its scores is {mean:.3f}, its avg {merged['avg']}: a typo?")
            merged["scores"] = dict(zip(TASKS, scores, strict=True))
        unknown = set(merged) - set(POST_PAPER_ORDER)
        if unknown:
            raise ValueError(f"{where}: unknown fields {', '.join(sorted(unknown))}")
        rows.append({name: merged[name] for name in POST_PAPER_ORDER if name in merged})
    labels = [row["model"] for row in rows]
    if len(set(labels)) != len(labels):
        raise ValueError(f"{path.name}: two rows share a model name")
    return rows


def _one_per_line(items: list[dict[str, Any]]) -> str:
    if not items:
        return "[]"
    lines = ",\n".join("    " + json.dumps(i, separators=(",", ":"), ensure_ascii=False) for i in items)
    return "[\n" + lines + "\n  ]"


def render(records: list[dict[str, Any]], later: list[dict[str, Any]]) -> str:
    """Header indented for reading, one record (and one post-paper row) per line so diffs stay small."""
    head = json.dumps(HEADER, indent=2, ensure_ascii=False)
    assert head.endswith("\n}")
    return (
        head[: -len("\n}")]
        + f',\n  "post_paper": {_one_per_line(later)},\n  "records": {_one_per_line(records)}\n}}\n'
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="the upstream results/ folder")
    parser.add_argument("--first-commit", type=Path, help="the result files only the first commit has")
    parser.add_argument("--post-paper", type=Path, help="the hand transcription of later results (TOML)")
    parser.add_argument("--output", type=Path, required=True, help="the JSON file to write")
    args = parser.parse_args(argv)

    records, warnings = transcribe(args.source)
    if not records:
        parser.error(f"no result files under {args.source}")
    if args.first_commit:
        extra, more = transcribe(args.first_commit, "first commit", FIRST_COMMIT_DATASETS)
        records, warnings = merge(records, extra), warnings + more
    else:
        records.sort(key=_record_sort_key)
    later = post_paper(args.post_paper) if args.post_paper else []
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    text = render(records, later)
    json.loads(text)  # fail before writing if the hand-assembled layout is not valid JSON
    args.output.write_text(text, encoding="utf-8")

    counts: dict[str, int] = {}
    for record in records:
        counts[record["kind"]] = counts.get(record["kind"], 0) + 1
    print(
        f"wrote {len(records)} records {counts} and {len(later)} post-paper rows to {args.output} "
        f"({len(text):,} bytes)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
