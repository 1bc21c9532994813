"""Systems: one small spec names a retrieval system, and ``run_system`` turns it into a Run.

The spec's canonical string (``bm25``, ``bm25s``, ``bm25-okapi``, ``minilm``, ``dense:<model>``,
``rrf(bm25,minilm)``, ``run:<name>``, ``bm25>rerank:bge-reranker@10``, any retriever with
``+hyde:<llm>``) is the one name used by the CLI, the URL, run files and every cache key — so the
same system is never computed twice under two names. Each kind of system is a class in
``r2med_core.kinds`` (one module per kind, found through a registry); this module is the public
face: the names callers import, and the questions asked of any system whatever its kind.
"""

from __future__ import annotations

from r2med_core.data import HAND_WRITTEN, LIVE, Dataset
from r2med_core.kinds.base import (
    MAX_FUSION_DEPTH,
    RUN_FORMAT_VERSION,
    Explanations,
    SpecError,
    SystemKind,
    SystemSpec,
    cost_notes,
    estimate_seconds,
    is_computed,
    needs_click,
    parse_system,
    queries_left_out,
    register,
    registered_kinds,
    retrieved_queries,
    rewritten_texts,
    run_key,
    run_system,
    search_text,
    split_top_level,
    system_explanations,
)
from r2med_core.kinds.bm25 import BM25_ENGINES, BM25_LABELS, bm25_index_key, bm25_queries, bm25_retriever
from r2med_core.kinds.dense import dense_model, dense_query_vectors, dense_retriever
from r2med_core.kinds.insertrank import BM25_KINDS
from r2med_core.retrieval.dense import instruction_note, resolve_model

__all__ = [
    "BM25_ENGINES",
    "BM25_LABELS",
    "MAX_FUSION_DEPTH",
    "RUN_FORMAT_VERSION",
    "Explanations",
    "SpecError",
    "SystemKind",
    "SystemSpec",
    "bm25_index_key",
    "bm25_queries",
    "bm25_retriever",
    "cost_notes",
    "default_rewrite",
    "dense_instruction_notes",
    "dense_query_vectors",
    "dense_retriever",
    "estimate_seconds",
    "is_computed",
    "leaf_systems",
    "llm_reranker_choices",
    "needs_click",
    "parse_system",
    "published_kind",
    "queries_left_out",
    "register",
    "registered_kinds",
    "resolve_model",
    "retrieved_queries",
    "rewrite_origin",
    "rewrite_words",
    "rewritten_name",
    "rewritten_texts",
    "run_key",
    "run_system",
    "search_text",
    "system_explanations",
    "system_words",
]

# Older private names some callers and tests use.
_run_key = run_key
_dense_model = dense_model
_split_top_level = split_top_level


def published_kind(spec: SystemSpec | str) -> str | None:
    """The kind whose published metric set applies to a system ("bm25", "dense" or "reranker"; a
    rewrite keeps its retriever's kind), None for fusions and names that are not systems."""
    try:
        spec = parse_system(spec) if isinstance(spec, str) else spec
    except SpecError:
        return None
    return spec.system_kind.published_kind(spec)


#: Rewrite methods as a reader knows them (the file layout's names are lower case).
_METHOD_WORDS = {
    "hyde": "HyDE",
    "query2doc": "query2doc",
    "lamer": "LameR",
    "search-o1": "Search-o1",
    "search-r1": "Search-R1",
}


def rewrite_words(rewrite: str, dataset: Dataset | None = None) -> str:
    """``"hyde:smollm2-135m"`` → ``"HyDE (smollm2-135m)"``: a rewrite named for a reader, not a URL. Given
    the dataset, a set written by hand says so: ``"HyDE (demo-writer: written by hand, not by an LLM)"``,
    and a live generation recorded on this server: ``"HyDE (my-llm, generated live)"``. Every page names
    a rewrite with this, so one set has one name wherever it is shown."""
    method, _, llm = rewrite.partition(":")
    name = _METHOD_WORDS.get(method, method)
    if not llm:
        return name
    if dataset is not None and dataset.hand_written((method, llm)):
        return f"{name} ({llm}: {HAND_WRITTEN})"
    if dataset is not None and dataset.generated_live((method, llm)):
        return f"{name} ({llm}, {LIVE})"
    return f"{name} ({llm})"


def system_words(name: str, dataset: Dataset | None = None) -> str:
    """A system's label (its name when it does not parse), marked when a rewrite it runs on was written
    by hand: ``"BM25 + hyde (demo-writer) · rewrite written by hand, not by an LLM"``."""
    try:
        spec = parse_system(name)
    except SpecError:
        return name
    hand = dataset is not None and any(
        leaf.rewrite and dataset.hand_written(leaf.rewrite) for leaf in leaf_systems(spec)
    )
    return f"{spec.label} · rewrite {HAND_WRITTEN}" if hand else spec.label


def rewrite_origin(dataset: Dataset, rewrite: tuple[str, str]) -> str:
    """Where a dataset's rewrite set comes from, in a few words for the line above its passage."""
    record = dataset.rewrite_provenance.get((rewrite[0], rewrite[1]), {})
    if record.get("made_by") == "hand":
        return f"{HAND_WRITTEN}: an illustration, not the benchmark's setting"
    if record.get("made_by") == "llm":
        file, sampling = record.get("model_file"), record.get("sampling")
        model = file.get("name") if isinstance(file, dict) else None
        sampling = sampling if isinstance(sampling, dict) else {}
        shown = ", ".join(f"{k} {v}" for k, v in sampling.items() if k in ("temperature", "seed") and v is not None)
        where = "on this server, " if dataset.generated_live(rewrite) else ""
        written = f"{where}written by {model or record.get('model', 'an LLM')}"
        return written + (f" ({shown})" if shown else "")
    return "precomputed (its origin is not recorded)"


def rewrite_told(dataset: Dataset, rewrite: tuple[str, str]) -> str:
    """A rewrite's name (``rewrite_words``, as the sidebar shows it) and where it comes from, for the line
    above one of its passages; what the name already says is not said twice."""
    name = rewrite_words(f"{rewrite[0]}:{rewrite[1]}", dataset)
    if dataset.hand_written(rewrite):
        return f"{name} · an illustration, not the benchmark's setting"
    return f"{name} · {rewrite_origin(dataset, rewrite)}"


def default_rewrite(dataset: Dataset) -> str:
    """The rewrite a view starts from (``"METHOD:LLM"``, ``""`` when there is none): HyDE first, and of
    its sets one an LLM made before one written by hand, so a user first meets a real model's output."""
    ranked = sorted(dataset.rewrite_options(), key=lambda r: (r[0] != "hyde", dataset.hand_written(r)))
    return f"{ranked[0][0]}:{ranked[0][1]}" if ranked else ""


def rewritten_name(system: str, rewrite: str) -> str:
    """The canonical name of ``system`` run on the ``"METHOD:LLM"`` rewrite (``""``: the system itself)."""
    if not rewrite:
        return str(parse_system(system))
    method, _, llm = rewrite.partition(":")
    return str(parse_system(system).with_rewrite((method, llm)))


def leaf_systems(spec: SystemSpec) -> list[SystemSpec]:
    """The single systems a (combined or wrapped) system runs."""
    if not spec.members:
        return [spec]
    return [leaf for member in spec.members for leaf in leaf_systems(member)]


def dense_instruction_notes(dataset: Dataset, system: SystemSpec | str) -> list[str]:
    """For each instruction model in ``system``, a note when it runs with this app's generic instruction
    (the dataset is not an R2MED task), for the UI to show next to its numbers."""
    try:
        spec = parse_system(system) if isinstance(system, str) else system
    except SpecError:
        return []
    notes = [note for role, m in spec.models() if role == "dense" and (note := instruction_note(dataset.name, m))]
    return list(dict.fromkeys(notes))


def llm_reranker_choices(system: str, model: str, k: int = 10) -> dict[str, str]:
    """The LLM rerankings the app offers over ``system`` with ``model`` (the name the operator's
    endpoint knows it by), each canonical name with what it is: the benchmark's list-wise reranker,
    the InsertRank-style one (a BM25 first stage only: its scores are shown as BM25 scores) and the
    explorer's point-wise judge. Empty when ``system`` or ``model`` cannot be parsed. Computing any
    of them waits for a Compute click that shows its estimate and cost (``needs_click``)."""
    try:
        base = parse_system(system)
        offers = {
            f"{base}>llmrerank:list:{model}@{k}": "list-wise, the benchmark's RerankerGPT prompt (one request a query)",
            f"{base}>llmrerank:point:{model}@{k}": "point-wise reasoning judge, one request a document "
            "(the explorer's, not the benchmark's)",
        }
        if base.kind in BM25_KINDS:
            offers[f"{base}>insertrank:{model}@{k}"] = (
                "InsertRank-style list-wise, shown each passage's BM25 score (not the benchmark's)"
            )
        for name in offers:
            parse_system(name)  # a model name the grammar refuses (a path, spaces) offers nothing
    except SpecError:
        return {}
    return offers
