"""The reference process for BM25 speed: raw bm25s reading an R2MED-layout folder, index + retrieve.

Why a module of its own: the benchmarks compare ``python -m r2med_core eval --retriever bm25`` as a
whole process with this one, which imports nothing but bm25s, PyStemmer and json.

    python -m benchmarks.raw_bm25s /tmp/r2med-synthetic-30000-30-0
"""

from __future__ import annotations

import json
import sys

import bm25s
import Stemmer

K1, B, TOP_K = 0.9, 0.4, 100


def main(folder: str) -> None:
    with open(f"{folder}/corpus.jsonl", encoding="utf-8") as fh:
        docs = [json.loads(line)["text"] for line in fh if line.strip()]
    with open(f"{folder}/query.jsonl", encoding="utf-8") as fh:
        queries = [json.loads(line)["text"] for line in fh if line.strip()]
    stemmer = Stemmer.Stemmer("english")
    model = bm25s.BM25(k1=K1, b=B, method="lucene")
    model.index(bm25s.tokenize(docs, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    query_tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
    model.retrieve(query_tokens, k=min(TOP_K, len(docs)), show_progress=False)


if __name__ == "__main__":
    main(sys.argv[1])
