"""The reference process for BM25 speed: raw bm25s reading an R2MED-layout folder, index + retrieve.

Why a module of its own: the benchmarks compare ``python -m r2med_core eval --retriever bm25`` as a
whole process with this one, which imports nothing but bm25s, PyStemmer and json. With ``--save DIR``
it also saves its index there; with ``--load DIR`` it reads only the queries, loads that saved index
and retrieves: what a second bm25s run costs, next to our warm rerun.

    python -m benchmarks.raw_bm25s /tmp/r2med-synthetic-30000-30-0 [--save DIR | --load DIR]
"""

from __future__ import annotations

import json
import sys

import bm25s
import Stemmer

K1, B, TOP_K = 0.9, 0.4, 100


def _texts(path: str) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in fh if line.strip()]


def main(folder: str, mode: str | None = None, index_dir: str | None = None) -> None:
    queries = _texts(f"{folder}/query.jsonl")
    stemmer = Stemmer.Stemmer("english")
    if mode == "--load":
        model = bm25s.BM25.load(index_dir)
    else:
        docs = _texts(f"{folder}/corpus.jsonl")
        model = bm25s.BM25(k1=K1, b=B, method="lucene")
        model.index(bm25s.tokenize(docs, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
        if mode == "--save":
            model.save(index_dir)
    query_tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
    model.retrieve(query_tokens, k=min(TOP_K, model.scores["num_docs"]), show_progress=False)


if __name__ == "__main__":
    main(*sys.argv[1:4])
