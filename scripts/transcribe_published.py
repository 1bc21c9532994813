"""Transcribe the R2MED authors' published result files into ``r2med_core/published_results.json``.

A one-off developer script: the package must not read the upstream tree at run time, so this
flattens it once into a single compact, attributed data file that ships inside ``r2med_core``.

Source layout (the benchmark repository's ``results/`` folder)::

    base retriever/<retriever>/<task>.json
    gar/<method>/<llm>/<retriever>/<task>.json
    reranker/<reranker>/<retriever>/top_<k>/<task>.json

Each file holds ``{"test": {metric: value}}``; older files say ``ndcg_at_10``/``mrr``, newer ones
``NDCG@10``/``MRR``. Names are normalised to the evaluator's (``ndcg_at_10``, ``map_at_10``,
``recall_at_10``, ``precision_at_10``, ``mrr``) and only the evaluator's cutoffs (1, 10, 25, 50,
100) are kept; values are copied unchanged.

Usage::

    python scripts/transcribe_published.py \\
        --source "/path/to/R2MED/results" --output r2med_core/published_results.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

TASKS = (
    "Biology",
    "Bioinformatics",
    "Medical-Sciences",
    "MedXpertQA-Exam",
    "MedQA-Diag",
    "PMC-Treatment",
    "PMC-Clinical",
    "IIYi-Clinical",
)
KIND_ORDER = {"retriever": 0, "rewrite": 1, "reranker": 2}
FAMILY_ORDER = {"ndcg": 0, "map": 1, "recall": 2, "precision": 3}
#: Cutoffs our evaluator reports (PROTOCOL.md); others in the source (3, 5, 1000) are dropped.
CUTOFFS = (1, 10, 25, 50, 100)
_UPPER_FAMILIES = {"NDCG": "ndcg", "MAP": "map", "RECALL": "recall", "P": "precision"}
_LOWER = re.compile(r"(ndcg|map|recall|precision)_at_(\d+)")
_UPPER = re.compile(r"(NDCG|MAP|Recall|P)@(\d+)", re.IGNORECASE)

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
    "source": "https://github.com/R2MED/R2MED (results/)",
    "license": "MIT",
    "copyright": "Copyright (c) 2025 the R2MED authors (Lei Li, Xiao Zhou, Zheng Liu)",
    "license_text": MIT_NOTICE,
    "transcribed_by": "scripts/transcribe_published.py (metric names normalised, values unchanged)",
    "notes": [
        "Values are pytrec_eval means rounded to 5 decimals, as published.",
        "Metric names are normalised to ndcg_at_k, map_at_k, recall_at_k, precision_at_k, mrr.",
        (
            "Only the metrics the R2MED evaluator reports are kept (k in {1,10,25,50,100} and "
            "mrr). Cutoffs differ by source file: most report k in {1,3,5,10,100} without mrr, "
            "so they have k in {1,10,100} here and no mrr; the BM25 baseline, the BM25 rewrite "
            "runs and the rerankers report all of k in {1,10,25,50,100} and mrr. Dropped from "
            "the source: k=3 and k=5 (most files) and k=1000 (NV-Embed-v2, HyDE (qwq-32b) + "
            "NV-Embed-v2)."
        ),
        (
            "Reranker records rerank only the top_k first-stage documents, so their metrics at "
            "cutoffs above top_k describe a list of top_k documents."
        ),
    ],
}


def normalise_metric(name: str) -> str:
    """Map ``NDCG@10``/``P@10``/``MRR``/``ndcg_at_10`` to the evaluator's ``ndcg_at_10`` form."""
    if name.lower() == "mrr":
        return "mrr"
    if m := _LOWER.fullmatch(name):
        return f"{m[1]}_at_{int(m[2])}"
    if m := _UPPER.fullmatch(name):
        return f"{_UPPER_FAMILIES[m[1].upper()]}_at_{int(m[2])}"
    raise ValueError(f"unrecognised metric name {name!r}")


def _metric_sort_key(name: str) -> tuple[int, int]:
    if name == "mrr":
        return (len(FAMILY_ORDER), 0)
    family, _, k = name.partition("_at_")
    return (FAMILY_ORDER[family], int(k))


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


def _check_header(rel: Path, data: dict[str, Any], setting: dict[str, Any]) -> list[str]:
    """Compare the file's own fields with its path; return human-readable mismatches."""
    expected: dict[str, Any] = {"dataset_name": rel.stem}
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


def transcribe(source: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Read every result file under ``source``; return (records, warnings)."""
    records: list[dict[str, Any]] = []
    warnings: list[str] = []
    for path in sorted(source.rglob("*.json")):
        rel = path.relative_to(source)
        setting = _setting(rel)
        if rel.stem not in TASKS:
            raise ValueError(f"{rel}: unknown task {rel.stem!r}")
        data = json.loads(path.read_text(encoding="utf-8"))
        warnings += _check_header(rel, data, setting)
        metrics: dict[str, float] = {}
        for name, value in data["test"].items():
            key = normalise_metric(name)
            if key != "mrr" and int(key.rsplit("_", 1)[1]) not in CUTOFFS:
                continue
            if key in metrics:
                raise ValueError(f"{rel}: {name!r} duplicates {key!r}")
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{rel}: {name}={value!r} is not a score in [0, 1]")
            metrics[key] = float(value)
        ordered = {k: metrics[k] for k in sorted(metrics, key=_metric_sort_key)}
        records.append({**setting, "task": rel.stem, "metrics": ordered})
    records.sort(
        key=lambda r: (
            KIND_ORDER[r["kind"]],
            r.get("method") or "",
            r.get("llm") or "",
            r.get("reranker") or "",
            r.get("top_k") or 0,
            r["retriever"],
            TASKS.index(r["task"]),
        )
    )
    return records, warnings


def render(records: list[dict[str, Any]]) -> str:
    """Header indented for reading, one record per line so diffs stay small."""
    head = json.dumps({**HEADER, "records": []}, indent=2, ensure_ascii=False)
    assert head.endswith('"records": []\n}')
    lines = ",\n".join("    " + json.dumps(r, separators=(",", ":")) for r in records)
    return head[: -len("[]\n}")] + "[\n" + lines + "\n  ]\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="the upstream results/ folder")
    parser.add_argument("--output", type=Path, required=True, help="the JSON file to write")
    args = parser.parse_args(argv)

    records, warnings = transcribe(args.source)
    if not records:
        parser.error(f"no result files under {args.source}")
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    text = render(records)
    json.loads(text)  # fail before writing if the hand-assembled layout is not valid JSON
    args.output.write_text(text, encoding="utf-8")

    counts: dict[str, int] = {}
    for record in records:
        counts[record["kind"]] = counts.get(record["kind"], 0) + 1
    print(f"wrote {len(records)} records {counts} to {args.output} ({len(text):,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
