"""System kinds (``r2med_core/kinds/``): the registry parse_system consults, a kind added as one class,
names that stay what they were, and the built-in wrappers (cross-encoder rerank, answer oracle)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import pytest

from r2med_core.analysis.fidelity import fidelity
from r2med_core.compute.jobs import estimate_seconds
from r2med_core.data import load_demo, load_r2med_dir
from r2med_core.kinds import base
from r2med_core.kinds.base import SpecError, SystemKind, SystemSpec, register, registered_kinds
from r2med_core.retrieval.dense import PRESETS
from r2med_core.retrieval.rerank import rerank, reranked_name
from r2med_core.runs import Run
from r2med_core.server.access import system_refusal
from r2med_core.settings import load_settings
from r2med_core.systems import parse_system, published_kind, run_system, search_text

BUILT_IN = {"bm25", "bm25q", "dense", "static", "fusion", "run", "rerank", "llmrerank", "insertrank", "oracle"}


def test_every_built_in_kind_is_registered_and_found_by_name() -> None:
    assert BUILT_IN <= {kind.name for kind in registered_kinds()}
    assert base.kind_named("bm25").label(parse_system("bm25s")) == "BM25 (bm25s default tokenizer)"
    with pytest.raises(SpecError, match="no system kind 'nope'"):
        base.kind_named("nope")
    # wrappers and fusion are tried before the plain retrievers, which reject unknown '+' suffixes
    order = [kind.name for kind in registered_kinds()]
    assert max(order.index(n) for n in ("rerank", "insertrank", "oracle", "fusion", "run")) < order.index("bm25")


# --------------------------------------------------------------------------- a kind added by a test


class ReverseKind(SystemKind):
    """``reverse:<system>``: a system's ranking upside down (a kind wrapping a base, as llmrerank will)."""

    name = "reverse"
    grammar = "reverse:SYSTEM (a test kind)"
    computed: ClassVar[list[str]] = []

    def parse(self, text: str, parse: base.Parse) -> SystemSpec | None:
        if not text.startswith("reverse:"):
            return None
        return SystemSpec("reverse", members=(parse(text[len("reverse:") :]),))

    def format(self, spec: SystemSpec) -> str:
        return "reverse:" + str(spec.members[0])

    def label(self, spec: SystemSpec) -> str:
        return f"{spec.members[0].label}, reversed"

    def compute(self, dataset, spec, k, progress) -> Run:  # type: ignore[no-untyped-def]
        ReverseKind.computed.append(str(spec))
        first = run_system(dataset, spec.members[0], k=k)
        return Run(str(spec), {q: r[::-1] for q, r in first.rankings.items()}, 0.0)


@pytest.fixture
def reverse_kind() -> Iterator[type[ReverseKind]]:
    register(ReverseKind)
    ReverseKind.computed = []
    yield ReverseKind
    base.unregister("reverse")


def test_a_kind_registered_in_one_class_parses_computes_and_is_cached(
    reverse_kind: type[ReverseKind], tiny_r2med: Path
) -> None:
    spec = parse_system("reverse:rrf(bm25,bm25s)")
    assert spec.kind == "reverse" and str(spec) == "reverse:rrf(bm25,bm25s)"
    assert spec.label.endswith(", reversed") and spec.models() == ()
    dataset = load_r2med_dir(tiny_r2med)
    run = run_system(dataset, spec)
    fused = run_system(dataset, "rrf(bm25,bm25s)")
    assert run.name == "reverse:rrf(bm25,bm25s)"
    assert all(run.rankings[q] == fused.rankings[q][::-1] for q in fused.rankings)
    again = run_system(load_r2med_dir(tiny_r2med), "reverse:rrf(bm25,bm25s)")
    assert again.rankings == run.rankings and reverse_kind.computed == ["reverse:rrf(bm25,bm25s)"]
    # the defaults pass a rewrite on to the wrapped system and refuse what its base refuses
    assert str(spec.with_rewrite(("hyde", "x"))) == "reverse:rrf(bm25+hyde:x,bm25s+hyde:x)"
    assert system_refusal("reverse:dense:someone/huge", load_settings({})) is not None
    assert system_refusal("reverse:bm25", load_settings({})) is None


def test_a_kind_that_is_unregistered_is_no_longer_parsed(reverse_kind: type[ReverseKind]) -> None:
    assert parse_system("reverse:bm25").kind == "reverse"
    base.unregister("reverse")
    with pytest.raises(SpecError, match="unknown system 'reverse:bm25'"):
        parse_system("reverse:bm25")


def test_two_kinds_cannot_claim_one_name() -> None:
    class Impostor(ReverseKind):
        name = "bm25"

    with pytest.raises(ValueError, match="registered already"):
        register(Impostor)
    assert parse_system("bm25").label == "BM25 (R2MED official)"


def test_an_unknown_name_lists_every_registered_grammar(reverse_kind: type[ReverseKind]) -> None:
    with pytest.raises(SpecError) as err:
        parse_system("tf-idf")
    message = str(err.value)
    assert message.startswith("unknown system 'tf-idf': use ")
    for kind in registered_kinds():
        assert kind.grammar in message
    assert "reverse:SYSTEM" in message and "bm25-okapi" in message and "dense:<model id or path>" in message


def test_wrapping_is_bounded_for_names_from_links() -> None:
    with pytest.raises(SpecError, match="levels deep"):
        parse_system("bm25" + ">rerank:bge-reranker@10" * (base.MAX_WRAPPING + 2))


# --------------------------------------------------------------------------- names stay what they were

EXISTING = [
    "bm25",
    "bm25s",
    "bm25-okapi",
    *PRESETS,
    "dense:BAAI/bge-small-en-v1.5",
    "dense:/models/local folder",
    "bm25+hyde:gpt4",
    "nv+query2doc:qwen-7b",
    "rrf(bm25,minilm)",
    "rrf(bm25+hyde:gpt4,e5+hyde:gpt4)",
    "rrf(rrf(bm25,bm25s),minilm)",
    "run:my-run_1.v2",
    "rrf(run:mine,bm25)",
    reranked_name("bm25", "bge-reranker", 10),
    reranked_name("bm25+hyde:gpt4", "monobert", 100, keep_tail=True),
    reranked_name("rrf(bm25,minilm)", "/models/my-cross-encoder", 10),
    "oracle:bm25",
    "oracle:bm25+q",
    "oracle:dense:BAAI/bge-small-en-v1.5",
]


@pytest.mark.parametrize("name", EXISTING)
def test_every_canonical_name_round_trips(name: str) -> None:
    assert str(parse_system(name)) == name
    assert parse_system(str(parse_system(name))) == parse_system(name)


def test_run_keys_keep_their_layout(tiny_r2med: Path) -> None:
    """The cache key of a plain run is the one runs were stored under before kinds existed."""
    from r2med_core.cache import fingerprint
    from r2med_core.retrieval.tokenize import ANALYZER_VERSION

    dataset = load_r2med_dir(tiny_r2med)
    plain = {
        "system": "bm25",
        "k": 100,
        "corpus": dataset.fingerprint,
        "queries": fingerprint(dataset.queries),
        "version": 2,
        "analyzer": ANALYZER_VERSION,
    }
    assert base.run_key(dataset, parse_system("bm25"), 100) == plain
    fused = base.run_key(dataset, parse_system("rrf(bm25,bm25s)"), 10)
    assert fused["members"] == [base.run_key(dataset, parse_system(m), 10) for m in ("bm25", "bm25s")]
    rewritten = base.run_key(dataset, parse_system("bm25+hyde:toy-llm"), 100)
    hyde = ("hyde", "toy-llm")
    assert rewritten["rewrite"] == fingerprint(dataset.rewrites[hyde], dataset.rewrite_queries.get(hyde, {}))


# --------------------------------------------------------------------------- cross-encoder rerank


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> str:
    from .test_rerank import build_cross_encoder

    return str(build_cross_encoder(tmp_path_factory.mktemp("ce"), num_labels=1, seed=0))


def test_a_rerank_name_is_the_sidebars_reranking(cross_encoder: str, tiny_r2med: Path) -> None:
    """``bm25>rerank:M@K`` gives the run the reranker setting always made, under the same name."""
    dataset = load_r2med_dir(tiny_r2med)
    name = reranked_name("bm25", cross_encoder, 2)
    spec = parse_system(name)
    assert spec.kind == "rerank" and str(spec.members[0]) == "bm25" and not spec.searches_text
    assert estimate_seconds(dataset, name) > 0  # the scores are not on disk yet: a click, not a page load
    expected = rerank(run_system(dataset, "bm25"), dataset, cross_encoder, 2)  # as the sidebar's reranker does
    assert estimate_seconds(dataset, name) == 0.0  # and this system reads the same cache
    run = run_system(dataset, name)
    assert run.name == expected.name == name and run.rankings == expected.rankings
    assert all(len(r) <= 2 for r in run.rankings.values())
    assert run_system(dataset, name, k=1).rankings == {q: r[:1] for q, r in expected.rankings.items()}
    assert published_kind(spec) == "reranker"
    assert spec.models() == (("reranker", cross_encoder),)
    found = fidelity(name)
    assert any("not one the benchmark evaluated" in d for d in found.differences)
    assert system_refusal(name, load_settings({})) is not None  # a path: not run for a visitor's link


def test_a_malformed_rerank_depth_says_the_form() -> None:
    for bad in ("bm25>rerank:bge-reranker@0", "bm25>rerank:bge-reranker", "bm25>rerank:@10"):
        with pytest.raises(SpecError, match="SYSTEM>rerank:MODEL@K"):
            parse_system(bad)
    assert parse_system(reranked_name("bm25", "bge-reranker", 10)).label == (
        "BM25 (R2MED official) → reranked by bge-reranker (top 10)"
    )


# --------------------------------------------------------------------------- answer oracle


def test_the_answer_oracle_retrieves_with_the_reference_answer() -> None:
    demo = load_demo("qa-reference")
    run = run_system(demo, "oracle:bm25", k=5)
    assert estimate_seconds(demo, "oracle:bm25", k=5) == 0.0  # cached as the retriever's run on the answers
    answers = {q: m["answer"] for q, m in demo.query_meta.items() if m.get("answer")}
    assert run.name == "oracle:bm25" and set(run.rankings) == set(answers)
    for qid in list(answers)[:3]:
        assert run.rankings[qid] == search_text(demo, "bm25", answers[qid], k=5)
    both = run_system(demo, "oracle:bm25+q", k=5)
    qid = next(iter(answers))
    assert both.rankings[qid] == search_text(demo, "bm25", f"{demo.queries[qid]}\n{answers[qid]}", k=5)


def test_the_answer_oracle_is_labelled_a_diagnostic() -> None:
    spec = parse_system("oracle:minilm")
    assert spec.label.startswith("Answer oracle (diagnostic, not a benchmark setting)")
    assert not fidelity(spec).is_benchmark and published_kind(spec) is None
    assert not spec.searches_text and str(spec.with_rewrite(("hyde", "x"))) == "oracle:minilm"
    with pytest.raises(SpecError, match="reference answers"):
        search_text(load_demo("qa-reference"), spec, "typed text")


def test_the_answer_oracle_refuses_data_without_answers_and_non_retrievers(tiny_r2med: Path) -> None:
    dataset = load_r2med_dir(tiny_r2med)
    no_answers = replace(dataset, query_meta={})
    with pytest.raises(SpecError, match="no reference answers"):
        run_system(no_answers, "oracle:bm25")
    for bad in ("oracle:rrf(bm25,bm25s)", "oracle:bm25+hyde:gpt4", "oracle:run:x"):
        with pytest.raises(SpecError, match="one plain retriever"):
            parse_system(bad)

