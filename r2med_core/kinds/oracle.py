"""``oracle:<retriever>`` (``oracle:bm25``, ``oracle:minilm``) retrieves with each query's reference
answer instead of the query; ``oracle:<retriever>+q`` with the query and the answer together.

A diagnostic, not a benchmark setting: it asks how well the retriever finds the gold documents when
it is handed what a perfect rewrite could at best produce (the answer), an upper reference for
rewriting methods such as HyDE. The answers are the query file's ``answer`` field (kept in
``Dataset.query_meta``); a query without one is not retrieved, so not evaluated, and data with
none at all is refused with a message. The retriever's run on the answer-queries is cached as any
run (its key holds the answers' digest through the queries), so this kind stores nothing itself.
"""

from __future__ import annotations

from dataclasses import replace

from r2med_core.data import Dataset
from r2med_core.kinds.base import (
    Parse,
    Rewrite,
    SpecError,
    SystemKind,
    SystemSpec,
    done,
    estimate_seconds,
    register,
    run_system,
)
from r2med_core.progress import Progress
from r2med_core.runs import Run

PREFIX = "oracle:"
WITH_QUERY = "+q"
LABEL = "Answer oracle (diagnostic, not a benchmark setting)"
#: The plain retrievers an oracle may use (their ``published_kind``): no fusion, wrapper or run.
RETRIEVER_KINDS = ("bm25", "dense")


def reference_answers(dataset: Dataset) -> dict[str, str]:
    """Each query's non-blank reference answer, in query order."""
    out = {}
    for qid in dataset.queries:
        answer = dataset.query_meta.get(qid, {}).get("answer")
        if isinstance(answer, str) and answer.strip():
            out[qid] = answer
    return out


def oracle_dataset(dataset: Dataset, with_query: bool) -> Dataset:
    """The dataset with its queries replaced by their reference answers (after the query with ``+q``);
    no rewrites, which belong to the original queries."""
    answers = reference_answers(dataset)
    if not answers:
        raise SpecError(
            f"{dataset.name} has no reference answers (an \"answer\" field in its query file): "
            "the answer oracle needs them"
        )
    queries = {q: f"{dataset.queries[q]}\n{a}" if with_query else a for q, a in answers.items()}
    return replace(dataset, queries=queries, rewrites={}, rewrite_queries={})


@register
class OracleKind(SystemKind):
    name = "oracle"
    grammar = f"{PREFIX}RETRIEVER[{WITH_QUERY}] (retrieval with the reference answer [and the query]: a diagnostic)"
    priority = 15
    stores_run = False  # the retriever's run on the answers is cached under its own key

    def parse(self, text: str, parse: Parse) -> SystemSpec | None:
        if not text.startswith(PREFIX):
            return None
        inner = text[len(PREFIX) :]
        with_query = inner.endswith(WITH_QUERY)
        retriever = parse(inner.removesuffix(WITH_QUERY))
        if retriever.system_kind.published_kind(retriever) not in RETRIEVER_KINDS or retriever.rewrite:
            raise SpecError(
                f"{text!r}: the answer oracle takes one plain retriever (a BM25 engine or a dense model, "
                f"no rewrite), e.g. oracle:bm25 or oracle:bm25{WITH_QUERY}"
            )
        return SystemSpec("oracle", members=(retriever,), params=(("with_query", with_query),))

    def format(self, spec: SystemSpec) -> str:
        return PREFIX + str(spec.members[0]) + (WITH_QUERY if spec.param("with_query") else "")

    def label(self, spec: SystemSpec) -> str:
        used = "query + answer" if spec.param("with_query") else "answer"
        return f"{LABEL}: {spec.members[0].label} on the {used}"

    def with_rewrite(self, spec: SystemSpec, rewrite: Rewrite | None) -> SystemSpec:
        return spec  # it retrieves with the answers, never with a rewrite

    def check(self, dataset: Dataset, spec: SystemSpec) -> None:
        oracle_dataset(dataset, spec.param("with_query"))

    def compute(self, dataset: Dataset, spec: SystemSpec, k: int, progress: Progress | None) -> Run:
        answered = oracle_dataset(dataset, spec.param("with_query"))
        run = run_system(answered, spec.members[0], k=k, progress=progress)
        done(progress, spec)
        return Run(str(spec), run.rankings, run.seconds, run.usage)

    def no_text_reason(self, spec: SystemSpec) -> str:
        return f"{LABEL} retrieves with the dataset's reference answers: it cannot search typed text"

    def differences(self, spec: SystemSpec, dataset_name: str | None) -> list[str]:
        out = [f"{LABEL}: it retrieves with the reference answer, which a real system never has"]
        return out + [d for d in super().differences(spec, dataset_name) if d not in out]

    def estimate_seconds(self, dataset: Dataset, spec: SystemSpec, k: int) -> float:
        return estimate_seconds(oracle_dataset(dataset, spec.param("with_query")), spec.members[0], k)
