"""System kinds: each kind of retrieval system is one small class in its own module, found through a
registry that ``parse_system`` consults (as ir_measures finds its measures).

Built in: ``bm25`` (BM25 engines), ``bm25q`` (query-side BM25 as Anserini's BRIGHT baselines),
``dense`` (dense presets and ``dense:<model>``), ``fusion`` (``rrf(A,B,...)``), ``imported_run``
(``run:<name>``), ``rerank`` (``SYSTEM>rerank:MODEL@K``, a cross-encoder over a first-stage system),
``llmrerank`` (``SYSTEM>llmrerank:list|point:MODEL@K``, an LLM on the operator's endpoint, computed
only after a click), ``insertrank`` (``BM25SYSTEM>insertrank:MODEL@K``, the list-wise LLM reranker
shown each passage's BM25 score) and ``oracle`` (``oracle:<retriever>``, retrieval with the
reference answer: a diagnostic). ``base`` holds the contract (``SystemKind``), the spec
(``SystemSpec``), the registry and the cached ``run_system``; ``r2med_core.systems`` re-exports the
public names, so callers need not know which module a kind lives in.

How to add a kind
-----------------
1. Add one module here, e.g. ``kinds/mykind.py``; every module of this package is imported when
   the package is, so nothing else needs editing.
2. Subclass ``base.SystemKind`` and decorate it with ``@register``. Set ``name`` (the spec's
   ``kind``), ``grammar`` (shown when a name matches no kind) and ``priority`` (parse order: a kind
   that wraps or combines systems, whose name contains another system's, must come before the plain
   retrievers at 90-95, which reject any ``+`` suffix they do not understand).
3. Implement ``parse`` (return None when the text is not yours; parse inner systems with the
   ``parse`` argument, which bounds nesting), ``format`` (the canonical string: ``str(parse(s))``
   must give ``s`` back, as it names the run file, the URL and the cache entry), ``label`` and
   ``compute`` (the Run of the top k per query; ``run_system`` caches it on disk keyed by the name,
   k, corpus, queries and your ``key_parts``: put there anything else that changes the run).
4. Override what differs from the defaults: ``searches_text``/``search`` for typed queries,
   ``models`` (what a link must be allowed to load), ``published_kind``, ``differences`` (fidelity to
   the benchmark), ``estimate_seconds``, ``link_refusal``, ``check`` (fail fast on a dataset that
   cannot run it), ``stores_run = False`` when your run is cheap to rebuild from cached parts,
   ``asks_llm`` (True when computing sends paid LLM requests: the app then waits for a click),
   ``cost_notes`` (requests and tokens shown before that click) and ``explanations`` (per-document
   reasons the explorer shows, e.g. a point-wise LLM judge's).

A kind that wraps a base system (the LLM reranker's ``SYSTEM>llmrerank:list:MODEL@K``, or the
cross-encoder's ``SYSTEM>rerank:…``) keeps the base in ``members=(base,)`` and its settings in ``params``;
the defaults then pass rewrites, models, fidelity and the refusal of a link on to the base, and its
``compute`` calls ``run_system(dataset, base, …)`` so the first stage is cached once for every
wrapper. A kind that needs the dataset's reference answers (the answer oracle) reads them from
``Dataset.query_meta[qid]["answer"]`` and raises ``SpecError`` in ``check`` when the data has none;
its key must then hold a digest of the answers (``key_parts``), as the answers change its run.
Tests: ``tests/test_kinds.py`` registers a dummy kind, the pattern for a new kind's tests.
"""

from __future__ import annotations

import importlib
import pkgutil

from r2med_core.kinds.base import (
    SpecError,
    SystemKind,
    SystemSpec,
    kind_named,
    parse_system,
    register,
    registered_kinds,
)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base" and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["SpecError", "SystemKind", "SystemSpec", "kind_named", "parse_system", "register", "registered_kinds"]
