"""The chunked, resumable corpus encoder: order restored, chunks kept across a crash, one encoder per key."""

from __future__ import annotations

import threading
import zlib
from pathlib import Path

import numpy as np
import pytest

from r2med_core import load_demo
from r2med_core.encoding import (
    Cancelled,
    chunk_folder,
    encode_corpus,
    finished_docs,
    format_seconds,
    length_order,
    measured_docs_per_s,
)
from r2med_core.retrieval.dense import PRESETS, DenseRetriever

TEXTS = [f"document {i} " + "word " * (i * 7 % 13) for i in range(23)]
KEY = {"corpus": "test-corpus", "model": "fake"}


def fake_vectors(texts: list[str]) -> np.ndarray:
    """Deterministic per text, so any order mix-up shows as a wrong row."""
    return np.array([[len(t), zlib.crc32(t.encode()) % 1000, 1.0] for t in texts], dtype=np.float32)


class Counting:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.texts += texts
        return fake_vectors(texts)


def test_vectors_come_back_in_corpus_order_although_batches_are_sorted_by_length() -> None:
    encode = Counting()
    vectors = encode_corpus(encode, TEXTS, KEY, chunk_docs=4)
    assert np.array_equal(vectors, fake_vectors(TEXTS))
    lengths = [len(t) for t in encode.texts]
    assert lengths == sorted(lengths, reverse=True)  # longest first: similar lengths share a batch
    assert list(length_order(["a", "ccc", "bb", "ccc"])) == [1, 3, 2, 0]  # stable on ties


def test_a_cancelled_encoding_resumes_where_it_stopped() -> None:
    first = Counting()
    reports: list[str] = []

    def stop_after_two_chunks(fraction: float, message: str) -> None:
        reports.append(message)
        if len(first.texts) >= 8:
            raise Cancelled("stop")

    with pytest.raises(Cancelled):
        encode_corpus(first, TEXTS, KEY, chunk_docs=4, progress=stop_after_two_chunks)
    assert len(first.texts) == 8
    assert finished_docs(KEY, len(TEXTS)) == 8
    assert any("8/23 documents" in r and "docs/s" in r and "ETA" in r for r in reports)

    second = Counting()
    vectors = encode_corpus(second, TEXTS, KEY, chunk_docs=4)
    assert len(second.texts) == len(TEXTS) - 8  # only what was missing
    assert not set(second.texts) & set(first.texts)
    assert np.array_equal(vectors, fake_vectors(TEXTS))


def test_a_damaged_chunk_is_encoded_again_and_another_plan_starts_over() -> None:
    encode_corpus(Counting(), TEXTS, KEY, chunk_docs=4)
    folder = chunk_folder(KEY)
    (folder / "0000001.npy").write_bytes(b"not numpy")
    again = Counting()
    vectors = encode_corpus(again, TEXTS, KEY, chunk_docs=4)
    assert len(again.texts) == 4 and np.array_equal(vectors, fake_vectors(TEXTS))

    other = Counting()
    encode_corpus(other, TEXTS, KEY, chunk_docs=5)  # chunks cut another way are not mixed in
    assert len(other.texts) == len(TEXTS)


def test_two_callers_of_the_same_encoding_share_one_encoder() -> None:
    encode = Counting()
    gate = threading.Event()

    def slow(texts: list[str]) -> np.ndarray:
        gate.wait(5)
        return encode(texts)

    results: list[np.ndarray] = []
    seen: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(encode_corpus(slow, TEXTS, KEY, chunk_docs=4))),
        threading.Thread(
            target=lambda: results.append(
                encode_corpus(slow, TEXTS, KEY, chunk_docs=4, progress=lambda f, m: seen.append(m))
            )
        ),
    ]
    for t in threads:
        t.start()
    threading.Timer(1.5, gate.set).start()
    for t in threads:
        t.join(30)
    assert len(results) == 2 and all(np.array_equal(r, fake_vectors(TEXTS)) for r in results)
    assert len(encode.texts) == len(TEXTS)  # each document encoded once


def test_durations_read_like_a_person_writes_them() -> None:
    assert format_seconds(42.4) == "42 s"
    assert format_seconds(185) == "3 min 05 s"
    assert format_seconds(2 * 3600 + 7 * 60) == "2 h 07 min"


def test_minilm_index_resumes_after_an_interruption_and_matches_an_uninterrupted_one(cache_dir: Path) -> None:
    dataset = load_demo("clinical-case")
    ids, texts = list(dataset.corpus), list(dataset.corpus.values())
    retriever = DenseRetriever(PRESETS["minilm"])
    key = retriever.cache_key(dataset.fingerprint)
    calls = {"n": 0}

    def crash_midway(fraction: float, message: str) -> None:
        calls["n"] += 1
        if fraction > 0.3:
            raise Cancelled("killed")

    import r2med_core.encoding as encoding

    original = encoding.CHUNK_DOCS
    encoding.CHUNK_DOCS = 16
    try:
        with pytest.raises(Cancelled):
            retriever.index_corpus(ids, texts, dataset.fingerprint, crash_midway)
        done = finished_docs(key, len(texts))
        assert 0 < done < len(texts)
        assert not (cache_dir / "dense").exists() or not any((cache_dir / "dense").iterdir())
        retriever.index_corpus(ids, texts, dataset.fingerprint)
    finally:
        encoding.CHUNK_DOCS = original
    assert not chunk_folder(key).exists()  # the chunks became the final entry
    resumed = retriever._matrix().copy()
    direct = retriever.encode(texts, "doc")
    assert resumed.shape == direct.shape
    assert np.allclose(resumed, direct, atol=1e-5)
    assert measured_docs_per_s("minilm", "cpu") is not None or len(texts) - done < 64


@pytest.fixture
def cache_dir(_isolated_cache: Path) -> Path:
    return _isolated_cache
