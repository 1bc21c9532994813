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

_SOLUTION = re.compile(r"<\|begin_of_solution\|>(.*?)(?:<\|end_of_solution\|>|\Z)", flags=re.S)


def is_reasoning_llm(llm: str) -> bool:
    return llm in REASONING_LLMS


def extract_answer(hy_doc: str, llm: str) -> str:
    """The part of a reasoning model's output the benchmark keeps (the whole text if no marker)."""
    if llm in _THINK_MODELS and "</think>" in hy_doc:
        return hy_doc.split("</think>", 1)[1].strip()
    if llm in _FINAL_RESPONSE_MODELS and "Final Response" in hy_doc:
        return hy_doc.split("Final Response", 1)[1].lstrip(":# \n").strip()
    if llm in _ANSWER_TAG_MODELS:
        match = re.search(r"<answer>(.*?)</answer>", hy_doc, flags=re.S)
        if match:
            return match.group(1).strip()
    if llm in _SOLUTION_TAG_MODELS:
        match = _SOLUTION.search(hy_doc)
        if match:
            return match.group(1).strip()
    return hy_doc


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
