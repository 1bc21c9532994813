"""``<bm25 system>>insertrank:<model>@<k>``: an InsertRank-style list-wise LLM reranker (Seetharaman
et al., arXiv 2506.14086, WSDM 2026: 51.1 average nDCG@10 on R2MED with DeepSeek-R1), which shows
the model each passage's BM25 score beside its text.

It is the list-wise reranker of ``llmrerank:list`` (see ``kinds.llm_rerank``) with one change, the
prompt (``llm_rerank.insertrank_messages``: the benchmark's RerankerGPT prompt, each passage followed
by its first-stage BM25 score, and a sentence saying what the scores are), so everything else is
inherited: the operator's endpoint and key, the Compute click before any request, the estimate, the
reply cache, the metering and the stored run. Its replies and runs are cached under their own prompt
version (``INSERTRANK_VERSION``), never mixed with ``llmrerank:list``'s. The first stage must be a
BM25 system (``bm25``, ``bm25s``, ``bm25-okapi``, ``bm25q``, with or without a rewrite), as the
scores are shown to the model as BM25 scores. Not the benchmark's setting, and labelled so.
"""

from __future__ import annotations

import re

from r2med_core.kinds.base import Parse, SpecError, SystemSpec, register
from r2med_core.kinds.llm_rerank import LLMRerankKind, endpoint_model, outermost
from r2med_core.llm import llm_rerank as lr

MARKER = ">insertrank:"
#: The kinds whose scores are BM25 scores (what the prompt calls them).
BM25_KINDS = ("bm25", "bm25q")
DIFFERENCE = "InsertRank-style list-wise LLM reranker (arXiv 2506.14086): each passage shown with its BM25 score"

_REST = re.compile(r"(?P<model>.+)@(?P<k>[1-9][0-9]*)")


@register
class InsertRankKind(LLMRerankKind):
    name = "insertrank"
    grammar = (
        "BM25SYSTEM>insertrank:MODEL@K (an LLM reranks the top K list-wise, shown each passage's BM25 score: "
        "InsertRank-style, arXiv 2506.14086, not the benchmark's)"
    )
    priority = 8  # before the other rerankers, which would read '…>insertrank:…' as part of their model name

    def parse(self, text: str, parse: Parse) -> SystemSpec | None:
        wrapped = outermost(text, MARKER)
        if wrapped is None:
            return None
        found = _REST.fullmatch(wrapped[1])
        if found is None:
            raise SpecError(f"{text!r}: an InsertRank-style reranking is BM25SYSTEM>insertrank:MODEL@K, K at least 1")
        model = endpoint_model(text, found["model"])
        base = parse(wrapped[0])
        if base.kind not in BM25_KINDS:
            raise SpecError(
                f"{text!r}: InsertRank shows the model BM25 scores, so the first stage must be a BM25 system "
                "(bm25, bm25s, bm25-okapi or bm25q, optionally +METHOD:LLM)"
            )
        return SystemSpec(self.name, model, members=(base,), params=(("k", int(found["k"])),))

    def format(self, spec: SystemSpec) -> str:
        return f"{spec.members[0]}{MARKER}{spec.name}@{spec.param('k')}"

    def label(self, spec: SystemSpec) -> str:
        return f"{spec.members[0].label} → {lr.insertrank_label(spec.name, spec.param('k'))}"

    def method(self, spec: SystemSpec) -> str:
        return "insertrank"

    def differences(self, spec: SystemSpec, dataset_name: str | None) -> list[str]:
        return [*super().differences(spec, dataset_name), DIFFERENCE]
