"""``bm25q``: query-side BM25 as Anserini computes it (issue 26 item 4), checked against a transcription
of Anserini's formula on a tiny corpus, then run on the demo through ``run_system``, typed text and the
CLI's ``eval``."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import bm25s
import numpy as np
import pytest

from r2med_core import load_demo
from r2med_core.analysis.fidelity import fidelity
from r2med_core.retrieval.bm25 import BM25Retriever
from r2med_core.retrieval.tokenize import lucene_tokenize
from r2med_core.runs import read_trec
from r2med_core.systems import parse_system, run_system, search_text

K1, B = 0.9, 0.4
# One word a document, each left alone by the analyzer: "cat" in one document, "dog" in two.
FILLER = "ant bee elk fox gnu hen kit lark mole newt orca puma quail rat seal toad wolf".split()
DOCS = ["cat", "dog", "dog", *FILLER]
IDS = [f"d{i}" for i in range(len(DOCS))]
# 3 tokens the corpus holds (dog twice) and 7 it does not: gensim's |q| is 3, Anserini's 10.
LONG_QUERY = "cat dog dog zebra yak wasp moth emu ibis crab"


def anserini_bm25q(docs: list[str], query: str) -> list[float]:
    """Anserini's BM25Q, transcribed: ``QuerySideBm25QueryGenerator`` boosts each distinct query term
    by ``idf · qtf / (qtf + k1·(1 − b + b·|q|/avgdl))`` with ``|q|`` every analysed query token, and
    Lucene's BM25Similarity scores the term in a document as ``boost · idf · tf / (tf + k1·(1 − b +
    b·dl/avgdl))`` — that document side taken here from bm25s itself (``method="lucene"``)."""
    tokens = [lucene_tokenize(d) for d in docs]
    reference = bm25s.BM25(k1=K1, b=B, method="lucene")
    reference.index(tokens, show_progress=False)
    n, avgdl = len(docs), sum(map(len, tokens)) / len(docs)
    df = Counter(t for d in tokens for t in set(d))
    query_tokens = lucene_tokenize(query)
    scores = np.zeros(n)
    for term, qtf in Counter(query_tokens).items():
        if term not in df:
            continue  # matches no document (but counted in |q| above)
        idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
        boost = idf * qtf / (qtf + K1 * (1 - B + B * len(query_tokens) / avgdl))
        scores += boost * reference.get_scores([term])
    return scores.tolist()


@pytest.fixture(scope="module")
def retriever() -> BM25Retriever:
    found = BM25Retriever()
    found.index(IDS, DOCS)
    return found


def test_query_side_scores_are_anserinis_formula(retriever: BM25Retriever) -> None:
    for query in [LONG_QUERY, "cat", "dog dog cat unknownword"]:
        [ranked] = retriever.search([query], k=len(DOCS), query_length="all")
        got = dict(ranked)
        np.testing.assert_allclose([got[d] for d in IDS], anserini_bm25q(DOCS, query), rtol=1e-6, atol=1e-12)


def test_hand_checked_query_weight_counts_words_no_document_holds() -> None:
    """N=4, avgdl=2, df(cat)=2 -> idf = ln 2. Query "cat cat zebra": qtf=2 and |q|=3 (zebra counts),
    so the query weight is ln 2 · 2 / (2 + 0.9·(0.6 + 0.4·3/2)) = ln 2 · 2/3.08; d1 ("cat cat fish",
    tf=2, dl=3) has ln 2 · 2/3.08 too. The benchmark's weighting (|q|=2) gives ln 2 · 2/2.9."""
    hand = BM25Retriever()
    hand.index(["d0", "d1", "d2", "d3"], ["cat dog", "cat cat fish", "dog fish", "bird"])
    [[(top, score)]] = hand.search(["cat cat zebra"], k=1, query_length="all")
    assert top == "d1" and score == pytest.approx(math.log(2) ** 2 * (2 / 3.08) ** 2, rel=1e-6)
    [[(_, official)]] = hand.search(["cat cat zebra"], k=1)
    assert official == pytest.approx(math.log(2) ** 2 * (2 / 3.08) * (2 / 2.9), rel=1e-6)


def test_a_long_query_can_change_the_order_not_only_the_scale(retriever: BM25Retriever) -> None:
    """A larger |q| flattens the query weights' saturation, so the twice-asked "dog" gains on "cat"."""
    [official] = retriever.search([LONG_QUERY], k=3)
    [query_side] = retriever.search([LONG_QUERY], k=3, query_length="all")
    assert [d for d, _ in official] == ["d0", "d1", "d2"]
    assert [d for d, _ in query_side] == ["d1", "d2", "d0"]


def test_query_length_is_checked(retriever: BM25Retriever) -> None:
    with pytest.raises(ValueError, match="unknown query_length 'most'; valid: vocabulary, all"):
        retriever.search(["cat"], query_length="most")
    plain = BM25Retriever(engine="bm25s")
    plain.index(IDS, DOCS)
    with pytest.raises(ValueError, match="as the official engine does"):
        plain.search(["cat"], query_length="all")


# --------------------------------------------------------------------------- the system kind


def test_bm25q_is_a_named_labelled_system_that_is_not_the_benchmarks() -> None:
    for name in ["bm25q", "bm25q+hyde:demo-writer"]:
        assert str(parse_system(name)) == name
    spec = parse_system("bm25q")
    assert spec.kind == "bm25q" and str(parse_system("bm25q").with_rewrite(("hyde", "x"))) == "bm25q+hyde:x"
    assert "arXiv 2509.02558" in spec.label and "not the benchmark's" in spec.label
    assert not fidelity("bm25q").is_benchmark and fidelity("bm25").is_benchmark
    assert parse_system("bm25").kind == "bm25"  # the benchmark's BM25 is still its own


@pytest.mark.parametrize("task", ["qa-reference", "clinical-evidence"])
def test_run_system_retrieves_the_demo_with_query_side_weights(task: str) -> None:
    dataset = load_demo(task)
    run = run_system(dataset, "bm25q")
    direct = BM25Retriever()
    direct.index(list(dataset.corpus), list(dataset.corpus.values()))
    qids = list(dataset.queries)
    expected = direct.search([dataset.queries[q] for q in qids], k=100, query_length="all")
    assert run.name == "bm25q" and list(run.rankings) == qids
    for qid, want in zip(qids, expected, strict=True):
        assert [d for d, _ in run.rankings[qid]] == [d for d, _ in want]
        np.testing.assert_allclose([s for _, s in run.rankings[qid]], [s for _, s in want], rtol=1e-12)
    official = run_system(dataset, "bm25")
    assert any(run.top(q, 10) != official.top(q, 10) for q in qids)
    typed = dataset.queries[qids[0]]
    assert search_text(dataset, "bm25q", typed, k=5) == direct.search([typed], k=5, query_length="all")[0]


def test_eval_runs_bm25q_on_the_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from r2med_core.cli import main

    assert main(["eval", "--retriever", "bm25q", "--demo", "qa-reference", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "BM25Q (query-side BM25" in out and "ndcg_at_10" in out
    written = read_trec(tmp_path / "bm25q.trec")
    computed = run_system(load_demo("qa-reference"), "bm25q")
    assert {q: [d for d, _ in r] for q, r in written.rankings.items()} == {
        q: [d for d, _ in r] for q, r in computed.rankings.items()
    }


def test_the_app_offers_bm25q_and_badges_it_as_not_the_benchmarks() -> None:
    from .test_app import open_app, your_runs

    offered = open_app("leaderboard", task="qa-reference", systems=["bm25"]).multiselect(key="w_systems").options
    assert parse_system("bm25q").label in offered  # in the sidebar's list without a link naming it
    at = open_app("leaderboard", task="qa-reference", systems=["bm25", "bm25q"])
    settings = your_runs(at)["setting"].to_dict()
    assert settings["BM25 (R2MED official)"] == "benchmark's"
    assert settings[parse_system("bm25q").label].startswith("≠ benchmark: query-side BM25 as Anserini computes it")
