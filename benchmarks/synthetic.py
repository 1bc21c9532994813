"""Synthetic tasks of R2MED's real sizes, written in the R2MED layout, for the scale benchmarks.

Why: the real tasks (10k–61k documents, 357,080 in all) cannot be downloaded on an offline machine,
and their sizes, not their contents, drive the app's and the engines' speed and memory.

    python -m benchmarks.synthetic --docs 60000 --queries 118 --out /tmp/synthetic-60k
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.bench_bm25 import make_corpus

#: Real R2MED: 357,080 documents and 876 queries over the 8 tasks.
ALL_DOCS, ALL_QUERIES = 357_080, 876


def write_task(folder: str | Path, n_docs: int, n_queries: int, seed: int = 0, gold_per_query: int = 3) -> Path:
    """Write corpus.jsonl, query.jsonl and qrels.jsonl (a few grade-1 gold documents per query)."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    docs, queries = make_corpus(n_docs, n_queries, seed, query_words=(40, 200))
    rng = np.random.default_rng(seed + 1)
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as out:
        for i, text in enumerate(docs):
            out.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")
    with (root / "query.jsonl").open("w", encoding="utf-8") as out:
        for i, text in enumerate(queries):
            out.write(json.dumps({"id": f"q{i}", "text": text}) + "\n")
    with (root / "qrels.jsonl").open("w", encoding="utf-8") as out:
        for i in range(n_queries):
            for doc in rng.choice(n_docs, size=min(gold_per_query, n_docs), replace=False):
                out.write(json.dumps({"q_id": f"q{i}", "p_id": f"d{int(doc)}", "score": 1}) + "\n")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=60_000)
    parser.add_argument("--queries", type=int, default=118)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    print(write_task(args.out, args.docs, args.queries, args.seed))


if __name__ == "__main__":
    main()
