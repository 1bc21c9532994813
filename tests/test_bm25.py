"""BM25Retriever: official parity with the benchmark's runs, hand-checked scores, all engines."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path

import bm25s
import numpy as np
import pytest
import Stemmer
from rank_bm25 import BM25Okapi

from r2med_core.retrieval.bm25 import ENGINES, BM25Retriever, _top_k, lucene_weights
from r2med_core.retrieval.tokenize import TokenIds, lucene_tokenize

FIXTURES = Path(__file__).parent / "fixtures" / "bm25-official"
ALL_ENGINES = list(ENGINES)


def _read_jsonl(name: str) -> list[dict]:
    with open(FIXTURES / name, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="module")
def fixture_corpus() -> tuple[list[str], list[str], list[str], list[str]]:
    docs, queries = _read_jsonl("corpus.jsonl"), _read_jsonl("query.jsonl")
    return [d["id"] for d in docs], [d["text"] for d in docs], [q["id"] for q in queries], [q["text"] for q in queries]


@pytest.fixture(scope="module")
def official(fixture_corpus: tuple[list[str], list[str], list[str], list[str]]) -> BM25Retriever:
    doc_ids, texts, _, _ = fixture_corpus
    retriever = BM25Retriever()
    retriever.index(doc_ids, texts)
    return retriever


# --- parity with the benchmark's own pipeline (pyserini analyzer + gensim LuceneBM25Model) ------


def test_official_top100_identical_to_reference_run(
    official: BM25Retriever, fixture_corpus: tuple[list[str], list[str], list[str], list[str]]
) -> None:
    reference: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for line in (FIXTURES / "reference.trec").read_text(encoding="utf-8").splitlines():
        qid, _, doc_id, _rank, score, _tag = line.split()
        reference[qid].append((doc_id, float(score)))
    _, _, query_ids, queries = fixture_corpus
    results = official.search(queries, k=100)
    assert len(results) == len(query_ids) == 60
    for qid, got in zip(query_ids, results, strict=True):
        want = reference[qid]
        assert [d for d, _ in got] == [d for d, _ in want], f"query {qid}: ranking differs"
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=0, atol=1e-5)


def test_defaults_are_the_papers() -> None:
    retriever = BM25Retriever()
    assert retriever.params == {"engine": "official", "k1": 0.9, "b": 0.4}
    assert retriever.label == "BM25 (R2MED official)"


# --- a corpus small enough to check by hand -------------------------------------------------------

# Words the analyzer leaves alone, so the arithmetic below is the whole story.
HAND_DOCS = ["cat dog", "cat cat fish", "dog fish", "bird"]  # lengths 2, 3, 2, 1 -> avgdl = 2
HAND_IDS = ["d0", "d1", "d2", "d3"]


def test_hand_checked_scores_official() -> None:
    """N=4, df(cat)=2 -> idf = ln(1 + 2.5/2.5) = ln 2; k1=0.9, b=0.4, avgdl=2.

    doc weight  d0: tf=1, dl=2 -> 1 / (1 + 0.9·(0.6 + 0.4·2/2))   = 1/1.9
                d1: tf=2, dl=3 -> 2 / (2 + 0.9·(0.6 + 0.4·3/2))   = 2/3.08
    query weight "cat": qtf=1, |q|=1 -> 1 / (1 + 0.9·(0.6 + 0.4·1/2)) = 1/1.72
    score = idf² · doc weight · query weight; d2, d3 score 0 and follow in corpus order.
    """
    retriever = BM25Retriever()
    retriever.index(HAND_IDS, HAND_DOCS)
    [ranked] = retriever.search(["cat"], k=10)
    ln2sq = math.log(2) ** 2
    assert [d for d, _ in ranked] == ["d1", "d0", "d2", "d3"]
    expected = [ln2sq * (2 / 3.08) / 1.72, ln2sq * (1 / 1.9) / 1.72, 0.0, 0.0]
    np.testing.assert_allclose([s for _, s in ranked], expected, rtol=1e-6)


def test_repeated_query_term_saturates_instead_of_doubling() -> None:
    """Query "cat cat": qtf=2, |q|=2 -> query weight 2 / (2 + 0.9·(0.6 + 0.4·2/2)) = 2/2.9, not 2 × 1/1.72."""
    official = BM25Retriever()
    official.index(HAND_IDS, HAND_DOCS)
    [ranked] = official.search(["cat cat"], k=1)
    assert ranked[0][0] == "d1"
    assert ranked[0][1] == pytest.approx(math.log(2) ** 2 * (2 / 3.08) * (2 / 2.9), rel=1e-6)
    # bm25s sums the document weight per query token: twice the single-token score.
    plain = BM25Retriever(engine="bm25s")
    plain.index(HAND_IDS, HAND_DOCS)
    [[(_, once)]] = plain.search(["cat"], k=1)
    [[(_, twice)]] = plain.search(["cat cat"], k=1)
    assert twice == pytest.approx(2 * once, rel=1e-6)


def _gensim_style_scores(docs: list[list[str]], query: list[str], k1: float, b: float) -> list[float]:
    """Independent, loop-by-loop statement of PROTOCOL.md's BM25 (for checking k1/b handling)."""
    n = len(docs)
    avgdl = sum(map(len, docs)) / n
    df = Counter(t for d in docs for t in set(d))
    q = Counter(t for t in query if t in df)
    q_len = sum(q.values())

    def idf(t: str) -> float:
        return math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))

    scores = []
    for d in docs:
        tf = Counter(d)
        s = 0.0
        for t, qtf in q.items():
            qw = idf(t) * qtf / (qtf + k1 * (1 - b + b * q_len / avgdl))
            dw = idf(t) * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
            s += qw * dw
        scores.append(s)
    return scores


@pytest.mark.parametrize(("k1", "b"), [(0.9, 0.4), (1.2, 0.75), (2.0, 0.0), (0.5, 1.0)])
def test_official_honours_k1_and_b(k1: float, b: float) -> None:
    docs = [
        "Diabetic ketoacidosis is treated with fluids and insulin infusion.",
        "Ketoacidosis ketoacidosis: anion gap metabolic acidosis with ketones in the blood and urine.",
        "Asthma is a chronic inflammatory disease of the airways.",
        "Insulin resistance in type 2 diabetes; insulin dosing and insulin pumps in hospital care.",
    ]
    query = "insulin treatment of diabetic ketoacidosis"
    retriever = BM25Retriever(k1=k1, b=b)
    retriever.index([f"d{i}" for i in range(4)], docs)
    [ranked] = retriever.search([query], k=4)
    expected = _gensim_style_scores([lucene_tokenize(d) for d in docs], lucene_tokenize(query), k1, b)
    got = dict(ranked)
    np.testing.assert_allclose([got[f"d{i}"] for i in range(4)], expected, rtol=1e-6)


def test_ties_keep_corpus_order_even_when_cut_at_k() -> None:
    docs = ["filler text"] * 3 + ["same words here"] * 500 + ["same same words here"]
    ids = [f"d{i:03d}" for i in range(len(docs))]
    retriever = BM25Retriever()
    retriever.index(ids, docs)
    [ranked] = retriever.search(["same"], k=10)
    assert [d for d, _ in ranked] == [ids[-1], *ids[3:12]]
    assert len({s for _, s in ranked[1:]}) == 1


# --- the three engines ------------------------------------------------------------------------

MEDICAL_DOCS = {
    "dka": "Diabetic ketoacidosis is treated with intravenous fluids, insulin infusion and potassium.",
    "mi": "Myocardial infarction presents with chest pain, ST elevation and a raised troponin.",
    "asthma": "Asthma is a chronic inflammatory disease of the airways with wheeze and cough.",
    "gout": "Gout is caused by urate crystal deposition in the joints; the big toe is typical.",
    "copd": "COPD causes chronic cough, sputum and progressive breathlessness in smokers.",
    "stroke": "A stroke causes sudden weakness of one side of the body and slurred speech.",
}
MEDICAL_QUERIES = {
    "How is diabetic ketoacidosis treated with insulin?": "dka",
    "chest pain with raised troponin": "mi",
    "wheeze in the airways": "asthma",
    "urate crystals in the joints": "gout",
}


@pytest.mark.parametrize("engine", ALL_ENGINES)
def test_every_engine_ranks_the_obvious_document_first(engine: str) -> None:
    retriever = BM25Retriever(engine=engine)
    retriever.index(list(MEDICAL_DOCS), list(MEDICAL_DOCS.values()))
    results = retriever.search(list(MEDICAL_QUERIES), k=3)
    assert [ranked[0][0] for ranked in results] == list(MEDICAL_QUERIES.values())
    for ranked in results:
        assert len(ranked) == 3
        scores = [s for _, s in ranked]
        assert scores == sorted(scores, reverse=True)
        assert scores[0] > 0


@pytest.mark.parametrize("engine", ALL_ENGINES)
def test_every_engine_honours_k1_and_b(engine: str) -> None:
    def top_scores(k1: float, b: float) -> list[float]:
        retriever = BM25Retriever(engine=engine, k1=k1, b=b)
        assert retriever.params == {"engine": engine, "k1": k1, "b": b}
        retriever.index(list(MEDICAL_DOCS), list(MEDICAL_DOCS.values()))
        return [s for _, s in retriever.search(["chronic cough and chest pain"], k=3)[0]]

    base = top_scores(0.9, 0.4)
    assert top_scores(1.5, 0.4) != pytest.approx(base)
    assert top_scores(0.9, 0.9) != pytest.approx(base)


def test_bm25s_engine_matches_raw_bm25s(fixture_corpus: tuple[list[str], list[str], list[str], list[str]]) -> None:
    doc_ids, texts, _, queries = fixture_corpus
    k1, b = 1.1, 0.6
    ours = BM25Retriever(engine="bm25s", k1=k1, b=b)
    ours.index(doc_ids, texts)
    stemmer = Stemmer.Stemmer("english")
    raw = bm25s.BM25(k1=k1, b=b, method="lucene")
    raw.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    raw_docs, raw_scores = raw.retrieve(
        bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False), k=20, show_progress=False
    )
    for ranked, r_docs, r_scores in zip(ours.search(queries, k=20), raw_docs, raw_scores, strict=True):
        np.testing.assert_allclose([s for _, s in ranked], r_scores, rtol=1e-5)
        # Same documents above the cut-off score (ties at the cut may be broken differently).
        cut = r_scores[-1] + 1e-4
        assert {d for d, s in ranked if s > cut} == {doc_ids[i] for i, s in zip(r_docs, r_scores) if s > cut}


def test_okapi_engine_is_rank_bm25_over_lucene_tokens(
    fixture_corpus: tuple[list[str], list[str], list[str], list[str]],
) -> None:
    doc_ids, texts, _, queries = fixture_corpus
    doc_ids, texts, queries = doc_ids[:400], texts[:400], queries[:10]
    ours = BM25Retriever(engine="okapi", k1=1.3, b=0.7)
    ours.index(doc_ids, texts)
    reference = BM25Okapi([lucene_tokenize(t) for t in texts], k1=1.3, b=0.7)
    for ranked, query in zip(ours.search(queries, k=len(texts)), queries, strict=True):
        expected = reference.get_scores(lucene_tokenize(query))
        got = dict(ranked)
        np.testing.assert_allclose([got[d] for d in doc_ids], expected, rtol=1e-12)


def test_engines_disagree_where_the_protocol_says_they_should(
    official: BM25Retriever, fixture_corpus: tuple[list[str], list[str], list[str], list[str]]
) -> None:
    """PROTOCOL.md: plain bm25s reproduces 0% of the official top-100 lists."""
    doc_ids, texts, _, queries = fixture_corpus
    plain = BM25Retriever(engine="bm25s")
    plain.index(doc_ids, texts)
    same = sum(
        [d for d, _ in a] == [d for d, _ in b]
        for a, b in zip(official.search(queries, k=100), plain.search(queries, k=100), strict=True)
    )
    assert same < len(queries) // 2


# --- scale: the fast paths give exactly the results of the straightforward ones ----------------


def _random_corpus(seed: int, n_docs: int, n_words: int) -> tuple[list[str], list[str]]:
    """Few distinct words, so many documents tie; some duplicates, empty and stop-word-only texts."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(n_words)] + ["the", "of"]
    docs = [" ".join(rng.choice(words, size=int(rng.integers(0, 12)))) for _ in range(n_docs)]
    docs += [*docs[:5], "", "the of the"]
    queries = [" ".join(rng.choice(words, size=int(rng.integers(1, 8)))) for _ in range(25)]
    queries += ["", "the", "zzz unknown", f"{words[0]} {words[0]} {words[0]}"]
    return docs, queries


def _bincount_scores(retriever: BM25Retriever, tokens: list[str]) -> np.ndarray:
    """The search path this module had before scipy's row gather (a regression oracle)."""
    n_docs = len(retriever._doc_ids)
    counts = Counter(retriever._vocab[t] for t in tokens if t in retriever._vocab)
    if not counts:
        return np.zeros(n_docs)
    terms = np.fromiter(sorted(counts), dtype=np.int64, count=len(counts))
    qtf = np.array([counts[t] for t in terms.tolist()], dtype=np.float64)
    if retriever.engine == "official":
        norm = retriever.k1 * (1.0 - retriever.b + retriever.b * qtf.sum() / retriever._avgdl)
        weights = retriever._idf[terms] * qtf / (qtf + norm)
    else:
        weights = qtf
    starts, ends = retriever._indptr[terms], retriever._indptr[terms + 1]
    lengths = ends - starts
    offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    positions = np.arange(int(lengths.sum()), dtype=np.int64) + offsets
    values = retriever._data[positions] * np.repeat(weights, lengths)
    return np.bincount(retriever._indices[positions], weights=values, minlength=n_docs)


@pytest.mark.parametrize("engine", ["official", "bm25s"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_threaded_search_is_identical_to_the_previous_search_path(engine: str, seed: int) -> None:
    docs, queries = _random_corpus(seed, n_docs=300, n_words=6 + 10 * seed)
    ids = [f"d{i}" for i in range(len(docs))]
    retriever = BM25Retriever(engine=engine)
    retriever.index(ids, docs)
    expected = []
    for tokens in retriever._analyze_queries(queries):
        scores = _bincount_scores(retriever, tokens)
        # A stable sort of the whole vector: best first, ties in corpus order.
        order = np.argsort(-scores, kind="stable")[:50]
        expected.append([(ids[j], float(scores[j])) for j in order])
    assert any(len({s for _, s in ranked}) < len(ranked) for ranked in expected)  # there are ties
    assert retriever.search(queries, k=50, workers=1) == expected
    assert retriever.search(queries, k=50, workers=2) == expected


def _sampled_positions_only(rng: np.random.Generator, n: int) -> np.ndarray:
    """High scores exactly where the threshold guess samples (every 16th): the guess then leaves
    fewer than k documents above it, and the exact fallback must take over."""
    scores = rng.random(n)
    scores[: 16 * 30 : 16] = 10.0
    return scores


@pytest.mark.parametrize("seed", range(7))
def test_top_k_is_a_stable_sort_of_all_scores(seed: int) -> None:
    """The sampled-threshold top k equals the first k of a stable sort, ties and zeros included."""
    rng = np.random.default_rng(seed)
    n = [50_000, 20_000, 7_000, 20_000, 100, 1, 0][seed]
    scores = [
        rng.random(n),
        rng.integers(0, 4, n).astype(np.float64),  # massive ties
        np.where(rng.random(n) < 0.995, 0.0, rng.random(n)),  # mostly zero: fewer than k above 0
        _sampled_positions_only(rng, n),
        np.round(rng.exponential(size=n), 1),
        np.zeros(n),
        np.zeros(n),
    ][seed]
    for k in (0, 1, 10, 100, 250, n, n + 5):
        want = np.argsort(-scores, kind="stable")[: max(k, 0)]
        np.testing.assert_array_equal(_top_k(scores, k), want)


def test_index_weights_are_bm25s_bit_for_bit() -> None:
    """The vectorised document weights equal bm25s's own ``build_index_from_ids`` exactly."""
    rng = np.random.default_rng(0)
    for _ in range(15):
        n_terms = int(rng.integers(1, 40))
        n_docs = int(rng.integers(1, 200))
        docs = [rng.integers(0, n_terms, size=int(rng.integers(0, 30))).tolist() for _ in range(n_docs)]
        used = sorted({t for d in docs for t in d})
        if not used:
            continue
        renumber = {t: i for i, t in enumerate(used)}
        docs = [[renumber[t] for t in d] for d in docs]
        k1, b = float(rng.uniform(0.1, 2.0)), float(rng.uniform(0.0, 1.0))
        want = bm25s.BM25(k1=k1, b=b, method="lucene").build_index_from_ids(
            list(range(len(used))), docs, show_progress=False
        )
        tokens = TokenIds.from_lists(docs, [f"t{i}" for i in used])
        data, indices, indptr = lucene_weights(tokens, k1, b)
        assert [tokens.tokens(i) for i in range(len(docs))] == [[f"t{used[t]}" for t in d] for d in docs]  # untouched
        assert data.dtype == want["data"].dtype and indices.dtype == want["indices"].dtype
        np.testing.assert_array_equal(data, want["data"])
        np.testing.assert_array_equal(indices, want["indices"])
        np.testing.assert_array_equal(indptr, want["indptr"])


def test_index_built_by_worker_processes_is_identical(
    official: BM25Retriever, fixture_corpus: tuple[list[str], list[str], list[str], list[str]]
) -> None:
    doc_ids, texts, _, queries = fixture_corpus
    parallel = BM25Retriever()
    parallel.index(doc_ids, texts, workers=2)
    assert parallel._vocab == official._vocab
    for name in ("_data", "_indices", "_indptr"):
        np.testing.assert_array_equal(getattr(parallel, name), getattr(official, name))
    assert parallel.search(queries[:5], k=100) == official.search(queries[:5], k=100)


# --- edge cases, persistence, errors ----------------------------------------------------------


@pytest.mark.parametrize("engine", ALL_ENGINES)
def test_queries_without_tokens_score_zero_like_the_official_run(engine: str) -> None:
    """An empty (or all-stop-word) query still gets k zero-score documents, so pytrec_eval scores it 0
    instead of leaving it out of the averages."""
    retriever = BM25Retriever(engine=engine)
    retriever.index(list(MEDICAL_DOCS), list(MEDICAL_DOCS.values()))
    results = retriever.search(["", "   ", "the of and is", "chest pain"], k=5)
    assert results[:3] == [[(d, 0.0) for d in list(MEDICAL_DOCS)[:5]]] * 3
    assert results[3][0][0] == "mi"
    assert retriever.search([], k=5) == []


@pytest.mark.parametrize("engine", ALL_ENGINES)
def test_unknown_words_still_fill_k_with_zero_scores_in_corpus_order(engine: str) -> None:
    retriever = BM25Retriever(engine=engine)
    retriever.index(list(MEDICAL_DOCS), list(MEDICAL_DOCS.values()))
    [ranked] = retriever.search(["zzyzx qwxv"], k=4)
    assert ranked == [(d, 0.0) for d in list(MEDICAL_DOCS)[:4]]


@pytest.mark.parametrize("engine", ALL_ENGINES)
def test_empty_corpus_does_not_crash(engine: str) -> None:
    retriever = BM25Retriever(engine=engine)
    retriever.index([], [])
    assert retriever.search(["chest pain"], k=5) == [[]]


@pytest.mark.parametrize("engine", ALL_ENGINES)
def test_save_load_round_trip_is_identical(engine: str, tmp_path: Path) -> None:
    retriever = BM25Retriever(engine=engine, k1=1.1, b=0.55)
    retriever.index(list(MEDICAL_DOCS), list(MEDICAL_DOCS.values()))
    queries = [*MEDICAL_QUERIES, "", "chronic cough"]
    before = retriever.search(queries, k=6)
    retriever.save(tmp_path)
    loaded = BM25Retriever.load(tmp_path)
    assert loaded.params == {"engine": engine, "k1": 1.1, "b": 0.55}
    assert loaded.search(queries, k=6) == before


def test_official_save_load_keeps_reference_parity(
    official: BM25Retriever, fixture_corpus: tuple[list[str], list[str], list[str], list[str]], tmp_path: Path
) -> None:
    _, _, _, queries = fixture_corpus
    official.save(tmp_path)
    assert BM25Retriever.load(tmp_path).search(queries, k=100) == official.search(queries, k=100)


@pytest.mark.parametrize("engine", ALL_ENGINES)
def test_load_raises_on_damaged_files(engine: str, tmp_path: Path) -> None:
    retriever = BM25Retriever(engine=engine)
    retriever.index(list(MEDICAL_DOCS), list(MEDICAL_DOCS.values()))
    retriever.save(tmp_path)
    biggest = max(tmp_path.iterdir(), key=lambda p: p.stat().st_size)
    biggest.write_bytes(biggest.read_bytes()[: biggest.stat().st_size // 2])
    with pytest.raises(Exception):  # noqa: B017 - any error: the caller rebuilds
        BM25Retriever.load(tmp_path)


def test_load_raises_on_inconsistent_files(tmp_path: Path) -> None:
    retriever = BM25Retriever()
    retriever.index(list(MEDICAL_DOCS), list(MEDICAL_DOCS.values()))
    retriever.save(tmp_path)
    (tmp_path / "doc_ids.json").write_text(json.dumps(list(MEDICAL_DOCS)[:-1]), encoding="utf-8")
    with pytest.raises(ValueError, match="doc_ids"):
        BM25Retriever.load(tmp_path)


def test_unknown_engine_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"official.*bm25s.*okapi"):
        BM25Retriever(engine="lucene")


def test_search_before_index_and_mismatched_lengths_are_errors() -> None:
    with pytest.raises(RuntimeError):
        BM25Retriever().search(["x"])
    with pytest.raises(ValueError):
        BM25Retriever().index(["a", "b"], ["only one text"])


@pytest.mark.parametrize("engine", ALL_ENGINES)
def test_progress_is_reported_from_0_to_1(engine: str) -> None:
    seen: list[tuple[float, str]] = []
    retriever = BM25Retriever(engine=engine)
    retriever.index(list(MEDICAL_DOCS), list(MEDICAL_DOCS.values()), progress=lambda f, m: seen.append((f, m)))
    assert seen and seen[-1][0] == 1.0
    assert [f for f, _ in seen] == sorted(f for f, _ in seen)
    seen.clear()
    retriever.search(list(MEDICAL_QUERIES), progress=lambda f, m: seen.append((f, m)))
    assert seen[-1][0] == 1.0 and all(0.0 <= f <= 1.0 for f, _ in seen)
