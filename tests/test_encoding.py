"""The chunked, resumable corpus encoder: order restored, chunks kept across a crash, one encoder per key."""

from __future__ import annotations

import importlib.util
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest

from r2med_core import load_demo
from r2med_core.retrieval.dense import PRESETS, DenseRetriever
from r2med_core.retrieval.encoding import (
    Cancelled,
    chunk_folder,
    encode_corpus,
    finished_docs,
    format_seconds,
    length_order,
    measured_docs_per_s,
)

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

    import r2med_core.retrieval.encoding as encoding

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
    assert resumed.shape[0] == len(texts)
    sample = list(range(0, len(texts), 7))  # rows from every chunk, checked against a direct encoding
    direct = retriever.encode([texts[i] for i in sample], "doc")
    assert np.allclose(resumed[sample], direct, atol=1e-5)
    assert measured_docs_per_s("minilm", "cpu") is not None or len(texts) - done < 64


@pytest.fixture
def cache_dir(_isolated_cache: Path) -> Path:
    return _isolated_cache


# --------------------------------------------------------------------------- portable embeddings


def _archive(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return path


def test_encode_then_export_and_import_moves_embeddings_to_another_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from r2med_core.cli import main

    assert main(["encode", "--demo", "clinical-case", "--model", "minilm", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "cache entry: " in printed and "108 documents encoded on cpu" in printed
    archive = tmp_path / "embeddings.tar.gz"
    assert main(["export", "--output", str(archive), "--demo", "clinical-case"]) == 0

    other = tmp_path / "laptop-cache"
    monkeypatch.setenv("R2MED_CACHE_DIR", str(other))
    assert main(["import", str(archive)]) == 0
    assert "imported 1 entries" in capsys.readouterr().out
    assert main(["import", str(archive)]) == 0  # importing twice changes nothing
    assert "1 already present" in capsys.readouterr().out

    import r2med_core.retrieval.dense as dense

    def no_encoding(*args: object, **kwargs: object) -> None:
        raise AssertionError("the imported entry should have been used")

    monkeypatch.setattr(dense, "encode_corpus", no_encoding)
    dataset = load_demo("clinical-case")
    from r2med_core.systems import dense_retriever

    retriever = dense_retriever(dataset, "minilm")
    assert len(retriever.doc_ids) == len(dataset.corpus)


def test_an_archive_cannot_write_outside_the_cache_or_smuggle_a_wrong_entry(
    tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    from r2med_core.cli import main
    from r2med_core.server.portable import entries, export_entries
    from r2med_core.systems import run_system

    outside = tmp_path / "outside.txt"
    for name in ["../outside.txt", "/tmp/outside.txt", "runs/../../outside.txt", "runs/x", "elsewhere/e/f"]:
        bad = _archive(tmp_path / "bad.tar.gz", {name: b"owned"})
        assert main(["import", str(bad)]) == 1
        assert not outside.exists()
    linked = _archive(tmp_path / "link.tar.gz", {}, {"runs/abc/run.json": "/etc/passwd"})
    assert main(["import", str(linked)]) == 1
    assert "not a regular file" in capsys.readouterr().err

    run_system(load_demo("clinical-case"), "bm25")
    good = tmp_path / "good.tar.gz"
    export_entries(entries(("runs",)), good)
    import tarfile

    with tarfile.open(good) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    entry = next(iter(members)).split("/")[1]
    renamed = {name.replace(entry, "0" * len(entry)): data for name, data in members.items()}
    tampered = {n: (d[:20] + b" " + d[21:] if n.endswith("run.json") else d) for n, d in members.items()}
    for archive in (_archive(tmp_path / "renamed.tar.gz", renamed), _archive(tmp_path / "tampered.tar.gz", tampered)):
        import shutil

        shutil.rmtree(cache_dir / "runs", ignore_errors=True)
        assert main(["import", str(archive)]) == 1
        assert not (cache_dir / "runs").exists() or not any((cache_dir / "runs").iterdir())
    err = capsys.readouterr().err
    assert "does not match the key" in err and "differ from the manifest" in err
    assert main(["import", str(tmp_path / "missing.tar.gz")]) == 2
    assert main(["encode", "--demo", "clinical-case", "--model", "minilm", "--device", "tpu"]) == 2


# --------------------------------------------------------------------------- hardware and backends


def test_the_device_is_detected_and_an_absent_one_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from r2med_core.retrieval import hardware

    monkeypatch.setattr(hardware, "_cuda_available", lambda: False)
    monkeypatch.setattr(hardware, "_mps_available", lambda: False)
    assert hardware.detect("auto") == hardware.Hardware("cpu", fp16=False, batch_size=32)
    with pytest.raises(hardware.DeviceError, match="not available here"):
        hardware.resolve_device("cuda")
    with pytest.raises(hardware.DeviceError, match="unknown device"):
        hardware.resolve_device("tpu")
    monkeypatch.setattr(hardware, "_cuda_available", lambda: True)
    assert hardware.resolve_device("auto") == "cuda"
    assert hardware.batch_size_for("cuda", free_bytes=8 * 1024**3) == 128  # batches grow with free memory
    assert hardware.batch_size_for("cuda", free_bytes=0) == 8
    monkeypatch.setenv("R2MED_DEVICE", "cpu")
    assert DenseRetriever(PRESETS["minilm"]).hardware.device == "cpu"  # the operator's setting wins


#: The ONNX backend tests, skipped without the optional extra that installs ONNX Runtime.
needs_onnxruntime = pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is optional (requirements-scale.txt)"
)


@needs_onnxruntime
def test_the_onnx_backend_ranks_like_torch_and_is_its_own_cache_entry() -> None:
    dataset = load_demo("qa-reference")
    texts, queries = list(dataset.corpus.values())[:48], list(dataset.queries.values())
    torch_side = DenseRetriever(PRESETS["minilm"])
    onnx_side = DenseRetriever(PRESETS["minilm"], backend="onnx")
    a, b = torch_side.encode(texts, "doc"), onnx_side.encode(texts, "doc")
    assert a.shape == b.shape
    assert np.min(np.sum(a * b, axis=1)) > 0.999  # same vectors up to float error
    qa, qb = torch_side.encode(queries, "query"), onnx_side.encode(queries, "query")
    top_a = np.argsort(-(qa @ a.T), axis=1)[:, :10]
    top_b = np.argsort(-(qb @ b.T), axis=1)[:, :10]
    assert np.mean([len(set(x) & set(y)) / 10 for x, y in zip(top_a, top_b)]) >= 0.95
    assert torch_side.cache_key("c") != onnx_side.cache_key("c")


def test_auto_runs_onnx_on_a_cpu_only_when_it_is_importable_and_measured_faster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from r2med_core.retrieval import hardware

    monkeypatch.setattr(hardware, "onnx_importable", lambda: True)
    assert hardware.resolve_backend("auto", "cpu") == "torch"  # nothing measured on this machine yet
    hardware.record_backend_speeds({"torch": 20.0, "onnx": 30.0})
    assert hardware.resolve_backend("auto", "cpu") == "onnx"
    assert hardware.resolve_backend(None, "cpu") == "onnx"
    assert hardware.resolve_backend("auto", "cuda") == "torch"
    assert hardware.resolve_backend("auto", "cuda:1") == "torch"
    assert hardware.resolve_backend("torch", "cpu") == "torch"  # an explicit choice is kept
    assert DenseRetriever(PRESETS["minilm"], device="cpu").backend == "onnx"
    # decoders, unpooled prompts, remote code
    for name in ("bmr-410m", "inst-l", "e5", "nv", "qwen3-emb-4b", "reasonir-8b"):
        assert DenseRetriever(PRESETS[name], device="cpu").backend == "torch", name
    monkeypatch.setenv("R2MED_ENCODE_BACKEND", "torch")
    assert DenseRetriever(PRESETS["minilm"], device="cpu").backend == "torch"  # the operator's setting wins
    hardware.record_backend_speeds({"torch": 30.0, "onnx": 20.0})
    monkeypatch.setenv("R2MED_ENCODE_BACKEND", "auto")
    assert DenseRetriever(PRESETS["minilm"], device="cpu").backend == "torch"  # torch measured faster


def test_auto_falls_back_to_torch_when_onnxruntime_cannot_be_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from r2med_core.retrieval import hardware

    hardware.record_backend_speeds({"torch": 20.0, "onnx": 30.0})
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError
    assert not hardware.onnx_importable()
    assert hardware.resolve_backend("auto", "cpu") == "torch"
    assert DenseRetriever(PRESETS["minilm"], device="cpu", backend="auto").backend == "torch"


def test_the_cache_key_follows_the_resolved_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    from r2med_core.retrieval import hardware

    monkeypatch.setattr(hardware, "onnx_importable", lambda: True)
    torch_key = DenseRetriever(PRESETS["minilm"], device="cpu").cache_key("c")  # auto → torch
    assert torch_key == DenseRetriever(PRESETS["minilm"], backend="torch").cache_key("c")
    hardware.record_backend_speeds({"torch": 20.0, "onnx": 30.0})
    onnx_key = DenseRetriever(PRESETS["minilm"], device="cpu").cache_key("c")  # auto → onnx
    assert onnx_key == DenseRetriever(PRESETS["minilm"], backend="onnx").cache_key("c")
    assert onnx_key != torch_key
    int8_key = DenseRetriever(PRESETS["minilm"], backend="onnx-int8").cache_key("c")
    assert len({str(k) for k in (torch_key, onnx_key, int8_key)}) == 3


def _top10(retriever: DenseRetriever, texts: list[str], queries: list[str]) -> np.ndarray:
    docs, q = retriever.encode(texts, "doc"), retriever.encode(queries, "query")
    return np.argsort(-(q @ docs.T), axis=1, kind="stable")[:, :10]


@needs_onnxruntime
def test_onnx_gives_torch_s_top_10_with_prompts_and_pair_inputs_on_the_demo() -> None:
    from dataclasses import replace

    dataset = load_demo("clinical-evidence")
    texts, queries = list(dataset.corpus.values()), list(dataset.queries.values())
    for model in (
        PRESETS["minilm"],
        replace(PRESETS["minilm"], query_prompt="query: ", doc_prompt="passage: "),  # e5/bge-style prefixes
        replace(PRESETS["minilm"], doc_pair=True),  # MedCPT-style ("", text) documents
    ):
        torch_top = _top10(DenseRetriever(model, backend="torch"), texts, queries)
        onnx_top = _top10(DenseRetriever(model, backend="onnx"), texts, queries)
        assert (torch_top == onnx_top).all(), model
    prompted = replace(PRESETS["minilm"], query_prompt="query: ")
    with_prompt = DenseRetriever(prompted, backend="onnx").encode(queries[:3], "query")
    without = DenseRetriever(PRESETS["minilm"], backend="onnx").encode(queries[:3], "query")
    by_torch = DenseRetriever(prompted, backend="torch").encode(queries[:3], "query")
    assert np.min(np.sum(with_prompt * by_torch, axis=1)) > 0.999  # the prompt reached the ONNX model
    assert np.max(np.sum(with_prompt * without, axis=1)) < 0.9999


@needs_onnxruntime
def test_auto_on_onnx_uses_a_cached_torch_entry_instead_of_encoding_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from r2med_core.cache import entry_path
    from r2med_core.retrieval import hardware

    dataset = load_demo("clinical-evidence")
    ids, texts = list(dataset.corpus), list(dataset.corpus.values())
    made_on_gpu = DenseRetriever(PRESETS["minilm"], backend="torch")  # e.g. `encode` on a GPU, then `import`
    made_on_gpu.index_corpus(ids, texts, dataset.fingerprint)
    hardware.record_backend_speeds({"torch": 20.0, "onnx": 30.0})
    here = DenseRetriever(PRESETS["minilm"], device="cpu")
    assert here.backend == "onnx"
    monkeypatch.setattr(here, "encode", lambda *a, **k: pytest.fail("re-encoded a cached corpus"))
    here.index_corpus(ids, texts, dataset.fingerprint)
    assert here.doc_ids == ids
    assert not entry_path("dense", here.cache_key(dataset.fingerprint)).exists()
    # Without a torch entry, auto's ONNX entry is its own (never a torch key holding ONNX vectors).
    fresh = DenseRetriever(PRESETS["minilm"], device="cpu")
    fresh.index_corpus(ids[:20], texts[:20], "another corpus")
    assert entry_path("dense", fresh.cache_key("another corpus")).is_dir()
    torch_key = DenseRetriever(PRESETS["minilm"], backend="torch").cache_key("another corpus")
    assert not entry_path("dense", torch_key).exists()


@needs_onnxruntime
def test_the_onnx_backend_refuses_by_name_a_model_that_does_not_say_its_dimension(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sentence_transformers import SentenceTransformer

    from r2med_core.retrieval.dense import offline_model_path
    from r2med_core.retrieval.onnx_encoder import BackendUnavailable, load_accelerated

    monkeypatch.setattr(SentenceTransformer, "get_embedding_dimension", lambda self: None)
    with pytest.raises(BackendUnavailable, match="does not say its embedding dimension; use the torch backend"):
        load_accelerated(offline_model_path(), "onnx")
