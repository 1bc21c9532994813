"""Systems: one small spec names a retrieval system, and ``run_system`` turns it into a Run.

The spec's canonical string (``bm25``, ``bm25s``, ``bm25-okapi``, ``minilm``, ``dense:<model>``,
``rrf(bm25,minilm)``, any of them with ``+hyde:<llm>``) is the one name used by the CLI, the URL,
run files and every cache key — so the same system is never computed twice under two names.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .cache import cached, fingerprint
from .data import Dataset
from .imported_runs import RUN_PREFIX, is_run_name, load_run, run_digest
from .progress import Progress, report
from .retrieval.bm25 import BM25Retriever
from .retrieval.dense import PRESETS, DenseModel, DenseRetriever, canonical_preset, instruction_note, resolve_model
from .retrieval.fusion import reciprocal_rank_fusion
from .retrieval.tokenize import ANALYZER_VERSION
from .rewrite import bm25_query, dense_query
from .runs import Ranking, Run
from .tasks import REWRITE_METHODS, task_instructions

#: Bump when retrieval code changes what a cached run would contain.
RUN_FORMAT_VERSION = 2

BM25_ENGINES: dict[str, str] = {"bm25": "official", "bm25s": "bm25s", "bm25-okapi": "okapi"}
BM25_LABELS: dict[str, str] = {
    "bm25": "BM25 (R2MED official)",
    "bm25s": "BM25 (bm25s default tokenizer)",
    "bm25-okapi": "BM25 Okapi (rank_bm25)",
}


class SpecError(ValueError):
    """A system name that cannot be parsed; the message says what is accepted."""


@dataclass(frozen=True)
class SystemSpec:
    """A retrieval system: ``kind`` is "bm25", "dense", "fusion" or "run" (an imported run file)."""

    kind: str
    name: str = ""  # bm25 engine alias (bm25|bm25s|bm25-okapi) or dense preset / model id
    rewrite: tuple[str, str] | None = None  # (method, llm) of a precomputed rewrite
    members: tuple[SystemSpec, ...] = ()

    def __str__(self) -> str:
        if self.kind == "fusion":
            base = "rrf(" + ",".join(str(m) for m in self.members) + ")"
        elif self.kind == "dense":
            base = self.name if self.name in PRESETS else f"dense:{self.name}"
        elif self.kind == "run":
            base = RUN_PREFIX + self.name
        else:
            base = self.name
        return base + (f"+{self.rewrite[0]}:{self.rewrite[1]}" if self.rewrite else "")

    @property
    def label(self) -> str:
        """A human name for charts and tables."""
        if self.kind == "fusion":
            base = "RRF(" + " + ".join(m.label for m in self.members) + ")"
        elif self.kind == "dense":
            base = PRESETS[self.name].label if self.name in PRESETS else self.name
        elif self.kind == "run":
            base = f"Run {self.name} (imported)"
        else:
            base = BM25_LABELS[self.name]
        return base + (f" + {self.rewrite[0]} ({self.rewrite[1]})" if self.rewrite else "")

    def with_rewrite(self, rewrite: tuple[str, str] | None) -> SystemSpec:
        """The same system with a (different) rewrite; fusion passes it to every member."""
        if self.kind == "fusion":
            return SystemSpec("fusion", members=tuple(m.with_rewrite(rewrite) for m in self.members))
        if self.kind == "run":
            return self  # a run file is fixed: there is no variant of it on a rewrite
        return SystemSpec(self.kind, self.name, rewrite, ())

    @property
    def searches_text(self) -> bool:
        """False for imported runs (and fusions of them): they rank only the dataset's own queries."""
        if self.kind == "fusion":
            return all(m.searches_text for m in self.members)
        return self.kind != "run"

    @property
    def base(self) -> SystemSpec:
        return self.with_rewrite(None)


def published_kind(spec: SystemSpec | str) -> str | None:
    """The kind whose published metric set applies to a system ("bm25" or "dense"; a rewrite keeps its
    retriever's kind), None for fusions and names that are not systems, which it has no numbers for."""
    try:
        spec = parse_system(spec) if isinstance(spec, str) else spec
    except SpecError:
        return None
    return spec.kind if spec.kind in ("bm25", "dense") else None


def rewritten_name(system: str, rewrite: str) -> str:
    """The canonical name of ``system`` run on the ``"METHOD:LLM"`` rewrite (``""``: the system itself)."""
    if not rewrite:
        return str(parse_system(system))
    method, _, llm = rewrite.partition(":")
    return str(parse_system(system).with_rewrite((method, llm)))


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += (char == "(") - (char == ")")
        current += char
    parts.append(current)
    return [p.strip() for p in parts]


#: How deeply ``rrf(...)`` may nest (``rrf(rrf(a,b),c)`` is 2): names come from URLs too.
MAX_FUSION_DEPTH = 3


def _nesting(text: str) -> int:
    deepest = depth = 0
    for char in text:
        depth += (char == "(") - (char == ")")
        deepest = max(deepest, depth)
    return deepest


def parse_system(text: str) -> SystemSpec:
    """Parse a system name; raises ``SpecError`` with the accepted forms."""
    text = text.strip()
    if _nesting(text) > MAX_FUSION_DEPTH:
        raise SpecError(f"rrf(...) may nest at most {MAX_FUSION_DEPTH} levels deep")
    if text.startswith("rrf(") and text.endswith(")"):
        members = tuple(parse_system(part) for part in _split_top_level(text[4:-1]))
        if len(members) < 2:
            raise SpecError("rrf(...) needs at least two systems, e.g. rrf(bm25,minilm)")
        return SystemSpec("fusion", members=members)
    if text.startswith(RUN_PREFIX):
        name = text[len(RUN_PREFIX) :]
        if "+" in name:
            raise SpecError(f"{text!r}: an imported run is fixed; it cannot be combined with a rewrite")
        if not is_run_name(name):
            raise SpecError(
                f"{text!r}: a run name is letters, digits, '.', '_' and '-' (at most 64), as listed under Your runs"
            )
        return SystemSpec("run", name)
    rewrite = None
    if "+" in text:
        text, _, suffix = text.rpartition("+")
        method, _, llm = suffix.partition(":")
        if method not in REWRITE_METHODS or not llm:
            raise SpecError(f"rewrite {suffix!r} must be METHOD:LLM with METHOD one of {', '.join(REWRITE_METHODS)}")
        rewrite = (method, llm)
    if text in BM25_ENGINES:
        return SystemSpec("bm25", text, rewrite)
    if text.startswith("dense:") and len(text) > 6:
        return SystemSpec("dense", text[6:], rewrite)
    if canonical_preset(text):
        return SystemSpec("dense", str(canonical_preset(text)), rewrite)
    raise SpecError(
        f"unknown system {text!r}: use bm25, bm25s, bm25-okapi, a dense preset "
        f"({', '.join(PRESETS)}), dense:<model id or path>, run:<name> (an imported run) or rrf(A,B,...), "
        "optionally followed by +METHOD:LLM (e.g. bm25+hyde:gpt4)"
    )


# --------------------------------------------------------------------------- retrievers


def bm25_index_key(dataset: Dataset, alias: str) -> dict[str, Any]:
    """The disk-cache key of a corpus's BM25 index (so callers can ask whether it is built)."""
    return {
        "corpus": dataset.fingerprint,
        "params": BM25Retriever(engine=BM25_ENGINES[alias]).params,
        "analyzer": ANALYZER_VERSION,
        "version": RUN_FORMAT_VERSION,
    }


def bm25_retriever(dataset: Dataset, alias: str, progress: Progress | None = None) -> BM25Retriever:
    """The BM25 index of a corpus, from the disk cache when it was built before."""
    retriever = BM25Retriever(engine=BM25_ENGINES[alias])
    key = bm25_index_key(dataset, alias)

    def build(folder: Path) -> None:
        retriever.index(list(dataset.corpus), list(dataset.corpus.values()), progress)
        retriever.save(folder)

    return cached("bm25", key, build, BM25Retriever.load)


def _dense_model(dataset: Dataset, model_name: str) -> DenseModel:
    """The model as it runs on this dataset: prompts filled with the benchmark's instructions for an
    R2MED task, or this app's generic instruction elsewhere (see ``dense_instruction_notes``)."""
    return resolve_model(model_name).with_instruction(task_instructions(dataset.name))


def dense_instruction_notes(dataset: Dataset, system: SystemSpec | str) -> list[str]:
    """For each instruction model in ``system``, a note when it runs with this app's generic instruction
    (the dataset is not an R2MED task), for the UI to show next to its numbers."""
    try:
        spec = parse_system(system) if isinstance(system, str) else system
    except SpecError:
        return []
    members = spec.members if spec.kind == "fusion" else (spec,)
    notes = [note for m in members if m.kind == "dense" and (note := instruction_note(dataset.name, m.name))]
    return list(dict.fromkeys(notes))


def dense_retriever(dataset: Dataset, model_name: str, progress: Progress | None = None) -> DenseRetriever:
    """A dense retriever with its corpus index loaded (encoded once, then cached on disk)."""
    retriever = DenseRetriever(_dense_model(dataset, model_name))
    retriever.index_corpus(list(dataset.corpus), list(dataset.corpus.values()), dataset.fingerprint, progress)
    return retriever


# --------------------------------------------------------------------------- queries


def rewritten_texts(dataset: Dataset, rewrite: tuple[str, str]) -> dict[str, str]:
    """The precomputed hypothetical documents of a rewrite; a clear error if the dataset lacks it."""
    if rewrite not in dataset.rewrites:
        available = ", ".join(f"{m}:{llm}" for m, llm in dataset.rewrite_options()) or "none"
        raise SpecError(f"{dataset.name} has no precomputed {rewrite[0]}:{rewrite[1]} rewrite (available: {available})")
    return dataset.rewrites[rewrite]


def retrieved_queries(dataset: Dataset, rewrite: tuple[str, str] | None) -> dict[str, str]:
    """The queries a system retrieves for, with the query text it uses.

    Without a rewrite: every query, as in the query file. With one, as the benchmark: only the
    queries the rewrite file holds (the others are not retrieved, so not evaluated), with the
    file's own ``text`` field as the query text.
    """
    if rewrite is None:
        return dict(dataset.queries)
    hy_docs = rewritten_texts(dataset, rewrite)
    texts = dataset.rewrite_queries.get(rewrite, {})
    return {qid: texts.get(qid, text) for qid, text in dataset.queries.items() if qid in hy_docs}


def queries_left_out(dataset: Dataset, rewrite: tuple[str, str] | None) -> int:
    """How many queries a rewrite leaves out (absent from its file: not retrieved, as in the benchmark)."""
    if rewrite is None or rewrite not in dataset.rewrites:
        return 0
    return len(dataset.queries) - len(retrieved_queries(dataset, rewrite))


def bm25_queries(dataset: Dataset, rewrite: tuple[str, str] | None) -> dict[str, str]:
    """Query strings for BM25, for the queries ``retrieved_queries`` names (official combination rules)."""
    queries = retrieved_queries(dataset, rewrite)
    if rewrite is None:
        return queries
    hy_docs = rewritten_texts(dataset, rewrite)
    return {qid: bm25_query(rewrite[0], rewrite[1], text, hy_docs[qid]) for qid, text in queries.items()}


def dense_query_vectors(
    retriever: DenseRetriever, dataset: Dataset, rewrite: tuple[str, str] | None, progress: Progress | None = None
) -> np.ndarray:
    """Query embeddings as the benchmark makes them; with a rewrite, query2doc encodes one joined text
    and the others average the query's and the generated text's embeddings (the instruction on the
    query half only, or on both for Instructor, NV-Embed and GritLM); cosine follows at search."""
    qids = list(dataset.queries)
    if rewrite is None:
        return retriever.encode([dataset.queries[q] for q in qids], "query", progress)
    hy_docs = rewritten_texts(dataset, rewrite)
    plans = [
        dense_query(rewrite[0], rewrite[1], dataset.queries[q], hy_docs[q]).texts
        if q in hy_docs
        else (dataset.queries[q],)
        for q in qids
    ]
    return retriever.encode_queries(plans, progress)


# --------------------------------------------------------------------------- running


def _run_key(dataset: Dataset, spec: SystemSpec, k: int) -> dict[str, Any]:
    key: dict[str, Any] = {
        "system": str(spec),
        "k": k,
        "corpus": dataset.fingerprint,
        "queries": fingerprint(dataset.queries),
        "version": RUN_FORMAT_VERSION,
        "analyzer": ANALYZER_VERSION,
    }
    if spec.rewrite:
        key["rewrite"] = fingerprint(
            dataset.rewrites.get(spec.rewrite, {}), dataset.rewrite_queries.get(spec.rewrite, {})
        )
    if spec.kind == "dense":
        # The model exactly as it runs (instruction filled in), so a changed prompt never reuses a run.
        key["model"] = DenseRetriever(_dense_model(dataset, spec.name)).cache_key(dataset.fingerprint)
    if spec.kind == "fusion":
        key["members"] = [_run_key(dataset, m, k) for m in spec.members]
    if spec.kind == "run":
        key["run"] = _imported(run_digest, dataset, spec.name)
    return key


def _imported(function: Any, dataset: Dataset, name: str) -> Any:
    """Look an imported run up by name; an unknown name is a SpecError like any unknown system."""
    try:
        return function(dataset, name)
    except KeyError as err:
        raise SpecError(err.args[0]) from None


def _compute(dataset: Dataset, spec: SystemSpec, k: int, progress: Progress | None) -> Run:
    started = time.perf_counter()
    if spec.kind == "fusion":
        runs = []
        for i, member in enumerate(spec.members):
            step = _scaled(progress, i / len(spec.members), (i + 1) / len(spec.members))
            runs.append(run_system(dataset, member, k=max(k, 100), progress=step))
        fused = reciprocal_rank_fusion(runs, str(spec), depth=k)
        return Run(fused.name, fused.rankings, time.perf_counter() - started)
    queries = retrieved_queries(dataset, spec.rewrite)
    qids = list(queries)
    if spec.kind == "bm25":
        retriever = bm25_retriever(dataset, spec.name, _scaled(progress, 0.0, 0.8))
        texts = bm25_queries(dataset, spec.rewrite)
        rankings = retriever.search([texts[q] for q in qids], k)
        # No query term in the corpus: the engine pads with zero-score documents in corpus order
        # (as the official run does), which on a small corpus "finds" everything; retrieve nothing.
        rankings = [ranking if ranking and ranking[0][1] > 0 else [] for ranking in rankings]
    else:
        dense = dense_retriever(dataset, spec.name, _scaled(progress, 0.0, 0.9))
        # with a rewrite, only the queries it holds, with its query text (the benchmark's rule)
        retrieved = replace(dataset, queries=queries) if spec.rewrite else dataset
        vectors = dense_query_vectors(dense, retrieved, spec.rewrite, _scaled(progress, 0.9, 1.0))
        rankings = dense.search_vectors(vectors, k, query_ids=qids)  # ignore_identical_ids, as BEIR
        hy_docs = dataset.rewrites.get(spec.rewrite, {}) if spec.rewrite else {}
        blank = [not queries[q].strip() and not hy_docs.get(q, "").strip() for q in qids]
        rankings = [[] if empty else ranking for ranking, empty in zip(rankings, blank)]
    report(progress, 1.0, f"{spec.label}: done")
    return Run(str(spec), dict(zip(qids, rankings)), time.perf_counter() - started)


def _scaled(progress: Progress | None, low: float, high: float) -> Progress | None:
    """A callback mapping [0, 1] to [low, high] of the parent's bar."""
    if progress is None:
        return None
    return lambda fraction, message: progress(low + (high - low) * fraction, message)


def run_system(dataset: Dataset, spec: SystemSpec | str, k: int = 100, progress: Progress | None = None) -> Run:
    """Retrieve the top ``k`` for every query; cached on disk by dataset, system and k."""
    spec = parse_system(spec) if isinstance(spec, str) else spec
    if spec.kind == "run":
        imported = _imported(load_run, dataset, spec.name).run
        report(progress, 1.0, f"{spec.label}: loaded")
        return Run(str(spec), {q: r[:k] for q, r in imported.rankings.items()}, imported.seconds)

    if spec.rewrite:
        rewritten_texts(dataset, spec.rewrite)  # fail fast with a clear message
    result: dict[str, Run] = {}

    def build(folder: Path) -> None:
        run = _compute(dataset, spec, k, progress)
        payload = {"name": run.name, "seconds": run.seconds, "rankings": run.rankings}
        (folder / "run.json").write_text(json.dumps(payload), encoding="utf-8")
        result["run"] = run

    def load(folder: Path) -> Run:
        if "run" in result:
            return result["run"]
        payload = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        rankings = {qid: [(doc, float(score)) for doc, score in r] for qid, r in payload["rankings"].items()}
        return Run(payload["name"], rankings, payload["seconds"])

    return cached("runs", _run_key(dataset, spec, k), build, load)


# --------------------------------------------------------------------------- free-text queries

_LOADED: OrderedDict[tuple[str, str], Any] = OrderedDict()
_LOADED_MAX = 8


def _loaded_retriever(dataset: Dataset, spec: SystemSpec, progress: Progress | None) -> Any:
    """A retriever kept in memory for repeated free-text searches (its index comes from the disk cache)."""
    key = (dataset.fingerprint, str(spec.base))
    if key not in _LOADED:
        if spec.kind == "bm25":
            _LOADED[key] = bm25_retriever(dataset, spec.name, progress)
        else:
            _LOADED[key] = dense_retriever(dataset, spec.name, progress)
        while len(_LOADED) > _LOADED_MAX:
            _LOADED.popitem(last=False)
    _LOADED.move_to_end(key)
    return _LOADED[key]


def search_text(
    dataset: Dataset,
    spec: SystemSpec | str,
    text: str,
    k: int = 10,
    *,
    hy_doc: str | None = None,
    progress: Progress | None = None,
) -> Ranking:
    """Rank the corpus for a query typed by the user (the what-if page).

    A rewritten system (``+METHOD:LLM``) needs the hypothetical document for this text, generated
    live (``hy_doc``); it is combined with the query by the benchmark's rules, as for dataset queries.
    """
    spec = parse_system(spec) if isinstance(spec, str) else spec
    if not spec.searches_text:
        raise SpecError(f"{spec.label} is a fixed run of the dataset's own queries: it cannot search typed text")
    if spec.rewrite and hy_doc is None:
        raise SpecError(f"{spec.label} needs a hypothetical document for a typed query (a live LLM endpoint)")
    if spec.kind == "fusion":
        members = [
            Run(str(m), {"q": search_text(dataset, m, text, max(k, 100), hy_doc=hy_doc, progress=progress)})
            for m in spec.members
        ]
        return reciprocal_rank_fusion(members, str(spec), depth=k).top("q")
    retriever = _loaded_retriever(dataset, spec, progress)
    if spec.kind == "bm25":
        query = bm25_query(*spec.rewrite, text, hy_doc) if spec.rewrite else text
        return retriever.search([query], k)[0]
    texts = dense_query(*spec.rewrite, text, hy_doc).texts if spec.rewrite else (text,)
    return retriever.search_vectors(retriever.encode_queries([texts]), k)[0]
