"""Query rewriting (GAR): how an LLM's hypothetical document enters retrieval, by R2MED's rules.

BM25 gets one query string per query; dense models get either one string or the mean of two
embeddings. Reasoning models' outputs are cut to their final answer first, as the benchmark does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: LLMs whose outputs carry reasoning before the answer, and how the answer is marked (as the benchmark).
_THINK_MODELS = ("r1-qwen-32b", "r1-llama-70b", "r1-llama-8b", "qwq-32b", "qwen3-32b", "qwen3-8b")
_FINAL_RESPONSE_MODELS = ("huatuo-o1-70b", "huatuo-o1-8b")
_ANSWER_TAG_MODELS = ("qwen-3b-ins", "qwen-7b-ins")
_SOLUTION_TAG_MODELS = ("sky-32b",)
#: Every LLM whose output is cut to its final answer before retrieval.
REASONING_LLMS: tuple[str, ...] = _THINK_MODELS + _FINAL_RESPONSE_MODELS + _ANSWER_TAG_MODELS + _SOLUTION_TAG_MODELS

#: Bump when ``extract_answer`` changes: runs on reasoning models' rewrites are then not reused.
ANSWER_RULES_VERSION = 2  # 2: huatuo keeps ":"/"#" after its marker; sky needs both solution markers

_FINAL_RESPONSE = re.compile(r"Final Response\s*(.*)", flags=re.S)
_SOLUTION = re.compile(r"<\|begin_of_solution\|>\s*([\s\S]*?)\s*<\|end_of_solution\|>")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", flags=re.S)
#: The answer's pattern for each LLM whose answer is marked by a pattern (the </think> ones split).
_MARKED: dict[str, re.Pattern[str]] = {
    **dict.fromkeys(_FINAL_RESPONSE_MODELS, _FINAL_RESPONSE),
    **dict.fromkeys(_ANSWER_TAG_MODELS, _ANSWER_TAG),
    **dict.fromkeys(_SOLUTION_TAG_MODELS, _SOLUTION),
}


def is_reasoning_llm(llm: str) -> bool:
    return llm in REASONING_LLMS


def extract_answer(hy_doc: str, llm: str) -> str:
    """The part of a reasoning model's output the benchmark keeps (its base.py): the text after the
    first ``</think>``; after "Final Response" (whitespace stripped only: a ":" or "#" stays); inside the
    first ``<answer>…</answer>``; inside ``<|begin_of_solution|>…<|end_of_solution|>`` — each stripped,
    and the whole text, as it is, when the marker (for sky-32b either marker) is missing."""
    if llm in _THINK_MODELS and "</think>" in hy_doc:
        return hy_doc.split("</think>", 1)[1].strip()
    pattern = _MARKED.get(llm)
    match = pattern.search(hy_doc) if pattern is not None else None
    return match.group(1).strip() if match else hy_doc


@dataclass(frozen=True)
class DenseQuery:
    """What a dense model encodes for one query: one text, or two whose embeddings are averaged."""

    texts: tuple[str, ...]


def bm25_query(method: str, llm: str, query: str, hy_doc: str) -> str:
    """The BM25 query string for a rewritten query (official combination rules)."""
    if is_reasoning_llm(llm):
        return extract_answer(hy_doc, llm)
    if method == "query2doc":
        return query * 2 + " " + hy_doc
    if method == "lamer":
        return query + " " + hy_doc
    return hy_doc  # hyde, search-o1, search-r1: the hypothetical document alone


def dense_query(method: str, llm: str, query: str, hy_doc: str) -> DenseQuery:
    """The dense query for a rewritten query: query2doc joins with [SEP]; others average two embeddings."""
    if is_reasoning_llm(llm):
        return DenseQuery((query, extract_answer(hy_doc, llm)))
    if method == "query2doc":
        return DenseQuery((query + "[SEP]" + hy_doc,))
    return DenseQuery((query, hy_doc))
