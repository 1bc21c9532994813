"""``bm25q``: query-side BM25 (BM25Q) as Anserini and Pyserini run it for their BRIGHT baselines
(Ge et al., "Lighting the Way for BRIGHT", arXiv 2509.02558; Anserini's
``QuerySideBm25QueryGenerator``, ``SearchCollection -bm25.querySide``), the strongest lexical
baseline they report on long queries; ``+METHOD:LLM`` retrieves with a precomputed rewrite as
``bm25`` does.

Why a kind of its own although R2MED's BM25 already weights the query: the benchmark's code (as
BRIGHT's, which the paper traced) passes the query through gensim's ``LuceneBM25Model`` too, so both
give each distinct query term ``idf · qtf / (qtf + k1·(1 − b + b·|q|/avgdl))`` and score a document
by the dot product with its Lucene BM25 weights (k1 = 0.9, b = 0.4). They differ in ``|q|``: gensim
counts the query tokens the corpus vocabulary holds, Anserini every analysed query token
(``tokens.size()``), so a long query full of words no document has is damped more. That is what
this kind computes, on the same cached index and the benchmark's analyzer (the weighting lives in
``retrieval.bm25``); what it does not reproduce of Anserini (one-byte length norms, ``N`` and
``avgdl`` over non-empty documents) is listed there. Not the benchmark's setting, and labelled so.
"""

from __future__ import annotations

from r2med_core.kinds.base import Parse, SystemSpec, register, split_rewrite
from r2med_core.kinds.bm25 import BM25Kind

NAME = "bm25q"
LABEL = "BM25Q (query-side BM25 as Anserini/Pyserini's BRIGHT baselines, arXiv 2509.02558; not the benchmark's)"
DIFFERENCE = (
    "query-side BM25 as Anserini computes it (|q| counts every analysed query token; the benchmark's gensim "
    "weighting counts only those in the corpus vocabulary)"
)


@register
class BM25QKind(BM25Kind):
    name = "bm25q"
    grammar = "bm25q (query-side BM25 as Anserini's BRIGHT baselines), optionally followed by +METHOD:LLM"
    priority = 90
    query_length = "all"

    def parse(self, text: str, parse: Parse) -> SystemSpec | None:
        core, rewrite = split_rewrite(text)
        return SystemSpec(self.name, NAME, rewrite) if core == NAME else None

    def index_alias(self, spec: SystemSpec) -> str:
        return "bm25"  # the benchmark's index: same tokens, same document weights

    def label(self, spec: SystemSpec) -> str:
        return LABEL

    def differences(self, spec: SystemSpec, dataset_name: str | None) -> list[str]:
        return [DIFFERENCE]
