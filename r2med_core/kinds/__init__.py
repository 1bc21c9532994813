"""System kinds: each kind of retrieval system is one small class in its own module, found through a
registry that ``parse_system`` consults (as ir_measures finds its measures).

Built in: ``bm25`` (BM25 engines), ``bm25q`` (query-side BM25 as Anserini's BRIGHT baselines),
``bm25s_mteb`` (``bm25s-mteb``: BM25 as MTEB's baseline calls bm25s),
``dense`` (dense presets and ``dense:<model>``), ``static`` (``static:<model>``, static embeddings such as
``static:minilm``, distilled offline), ``fusion`` (``rrf(A,B,...)``), ``imported_run``
(``run:<name>``), ``rerank`` (``SYSTEM>rerank:MODEL@K``, a cross-encoder over a first-stage system),
``llmrerank`` (``SYSTEM>llmrerank:list|point:MODEL@K``, an LLM on the operator's endpoint, computed
only after a click), ``insertrank`` (``BM25SYSTEM>insertrank:MODEL@K``, the list-wise LLM reranker
shown each passage's BM25 score) and ``oracle`` (``oracle:<retriever>``, retrieval with the
reference answer: a diagnostic). ``base`` holds the contract (``SystemKind``), the spec
(``SystemSpec``), the registry and the cached ``run_system``; ``roles`` the contract and registry of
the model roles (see below); ``r2med_core.systems`` re-exports the public names, so callers need not
know which module a kind lives in.

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
   ``holds_gil`` (True when computing is mostly Python, like tokenizing: background jobs of such kinds
   take turns on a server),
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

How to add a model role
-----------------------
A kind names the models it loads or asks in ``models`` as ``(role, model)`` pairs. A role is what
the rest of the app knows about such a model, answered by one ``roles.ModelRole`` registered under
that name; built in: ``dense`` (an encoder), ``static`` (a static-embedding table), ``reranker``
(a cross-encoder) and ``llm`` (asked on the operator's endpoint), each in the module of the kind
that loads it. A kind whose models play a new role (a learned-sparse encoder, say) defines that
role in its own module too:

1. Subclass ``roles.ModelRole``, decorate it with ``@register_role`` and set ``name`` (the role in
   your ``models()`` pairs; use ``YourRole.name`` there).
2. Implement ``refusal`` (why a visitor may not make this server run the model, or None;
   ``preset_or_allowed(model, YOUR_PRESETS, settings)`` is the usual rule: presets, and otherwise
   only what the operator allows). ``server.access`` asks it for every link and form, and refuses
   any model whose role nobody registered.
3. Override where the defaults do not fit: ``provenance_ids`` (the ids a result records, e.g. a
   preset resolved to the hub id it loads; default the name itself), ``cache_kinds`` (the cache
   kinds your model's entries make, which ``server.portable`` and ``export --kind`` then move
   between machines; a kind's own model-free entries, like a BM25 index, go in
   ``SystemKind.cache_kinds``) and ``progress_reader`` (how a background job reads your model's
   progress: e.g. ``retrieval.encoding.status`` of the corpus encoding you run with
   ``encoding.encode_corpus``).

Tests: ``tests/test_roles.py`` defines a toy sparse kind and its role in one file, the pattern for
a new role's tests (access, provenance, export and import, job progress).
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
