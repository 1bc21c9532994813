"""Issue 27: what a user does the second time. A cached run is found without reading the corpus,
yet any change to the corpus's bytes gives a new key; JSONL files are streamed with the same
messages as before; a cache entry is digested when it was built, copied or changed, not on every
load, and damage is still found."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from r2med_core import cache, file_facts
from r2med_core.cache import MANIFEST, cached, entry_path, is_intact
from r2med_core.data import DataError, FileCorpus, load_beir_dir, load_dir, validate_dir
from r2med_core.evaluation import evaluate
from r2med_core.systems import run_system
from tests.conftest import TINY_CORPUS, write_jsonl

_OPENED: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # hooks cannot be removed: this one records only inside ``opened``


@contextmanager
def opened() -> Iterator[list[str]]:
    """Every file path the process opens meanwhile (``open``, ``os.open``, ``Path.open``)."""
    global _OPENED
    _OPENED = []
    try:
        yield _OPENED
    finally:
        _OPENED = None


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written by a test are not "racy" (changed within the file system clock's tick of their
    read), as a user's data written seconds or days before a run is not."""
    monkeypatch.setattr(file_facts, "RACY_NS", 0)


def test_a_warm_run_never_opens_the_corpus(tiny_r2med: Path, settled: None) -> None:
    corpus = tiny_r2med / "corpus.jsonl"
    first = load_dir(tiny_r2med)
    run = run_system(first, "bm25", k=10)
    with opened() as paths:
        again = load_dir(tiny_r2med)
        rerun = run_system(again, "bm25", k=10)
        results = evaluate(rerun, again.qrels)
        lines = again.report.lines()
    assert str(corpus) not in paths and str(corpus.resolve()) not in paths
    assert rerun.rankings == run.rankings and results.means == evaluate(run, first.qrels).means
    assert again.fingerprint == first.fingerprint and len(again.corpus) == len(TINY_CORPUS)
    assert lines == first.report.lines()
    assert isinstance(again.corpus, FileCorpus) and not again.corpus.loaded
    assert again.corpus["gout_0"] == TINY_CORPUS[4]["text"]  # a preview reads the texts, once
    assert list(again.corpus) == [d["id"] for d in TINY_CORPUS]


def test_judged_documents_absent_from_the_corpus_are_counted_without_reading_it(
    tiny_r2med: Path, settled: None
) -> None:
    write_jsonl(tiny_r2med / "qrels.jsonl", [{"q_id": "q1", "p_id": "gone", "score": 1}])
    first = load_dir(tiny_r2med)
    with opened() as paths:
        again = load_dir(tiny_r2med)
    assert str(tiny_r2med / "corpus.jsonl") not in paths
    assert again.report.unknown_qrels_documents == first.report.unknown_qrels_documents == 1
    assert again.report.queries_only_unknown_documents == ("q1",)


def _rewrite_in_place(path: Path, old: bytes, new: bytes, keep_mtime: bool) -> None:
    """Change bytes without changing the size (and, if asked, set the old mtime back)."""
    before = os.stat(path)
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    with open(path, "r+b") as handle:  # the same inode
        handle.write(data.replace(old, new))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.mark.parametrize("keep_mtime", [False, True])
def test_a_changed_byte_of_the_same_size_gives_a_new_key(tiny_r2med: Path, keep_mtime: bool) -> None:
    corpus = tiny_r2med / "corpus.jsonl"
    before = load_dir(tiny_r2med).fingerprint
    _rewrite_in_place(corpus, b"urate", b"urea!", keep_mtime)
    changed = load_dir(tiny_r2med)
    assert changed.fingerprint != before and "urea!" in changed.corpus["gout_0"]


def test_a_rewrite_within_one_tick_of_a_coarse_file_system_clock_gives_a_new_key(
    tiny_r2med: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """File systems stamp times in ticks (jiffies, whole seconds): a same-size rewrite in the tick of
    the read leaves size, times and inode as they were, so such a file's bytes are digested again."""
    real = file_facts.identity

    def whole_seconds(path: Path) -> list[int] | None:
        found = real(path)
        return None if found is None else [found[0], *(t // 10**9 * 10**9 for t in found[1:3]), found[3]]

    monkeypatch.setattr(file_facts, "identity", whole_seconds)
    before = load_dir(tiny_r2med).fingerprint
    _rewrite_in_place(tiny_r2med / "corpus.jsonl", b"urate", b"urea!", keep_mtime=False)
    assert load_dir(tiny_r2med).fingerprint != before


def test_a_replaced_file_with_the_same_size_and_mtime_gives_a_new_key(tiny_r2med: Path, settled: None) -> None:
    corpus = tiny_r2med / "corpus.jsonl"
    before = load_dir(tiny_r2med).fingerprint
    old = os.stat(corpus)
    other = tiny_r2med / "other.jsonl"
    other.write_bytes(corpus.read_bytes().replace(b"urate", b"urea!"))
    os.utime(other, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(other, corpus)  # another inode, same size and mtime
    assert load_dir(tiny_r2med).fingerprint != before


def test_a_touched_corpus_keeps_its_key_without_a_parse(tiny_r2med: Path) -> None:
    before = load_dir(tiny_r2med)
    os.utime(tiny_r2med / "corpus.jsonl")
    touched = load_dir(tiny_r2med)
    assert touched.fingerprint == before.fingerprint and not touched.corpus.loaded


def test_a_corpus_changed_after_a_warm_load_is_an_error_naming_it(tiny_r2med: Path, settled: None) -> None:
    load_dir(tiny_r2med)
    warm = load_dir(tiny_r2med)
    write_jsonl(tiny_r2med / "corpus.jsonl", [*TINY_CORPUS, {"id": "new", "text": "added later"}])
    with pytest.raises(DataError, match=r"corpus\.jsonl: the file changed since the dataset was loaded"):
        warm.corpus.get("gout_0")


def test_forged_or_damaged_remembered_facts_mean_a_full_read(tiny_r2med: Path, settled: None) -> None:
    before = load_dir(tiny_r2med).fingerprint
    [record] = list((file_facts.cache_root() / file_facts.FOLDER).iterdir())
    for text in ["[]", '{"identity": "x"}', "{" * 100_000, ""]:
        record.write_text(text)
        again = load_dir(tiny_r2med)
        assert again.fingerprint == before and again.corpus.loaded


def test_jsonl_is_streamed_with_the_same_file_and_line_messages(tiny_r2med: Path) -> None:
    corpus = tiny_r2med / "corpus.jsonl"
    corpus.write_bytes(
        b'\xef\xbb\xbf{"id": "a", "text": "first"}\r\n'
        b"\n"
        b'{"id": "b", "text": "bad\n'
        b"[1, 2]\n"
        b'{"id": "a", "text": "again"}\n'
        b'{"text": "no id"}'
    )
    errors, _ = validate_dir(tiny_r2med)
    assert [str(p) for p in errors] == [
        f"{corpus}:3: malformed JSON: Unterminated string starting at (column 21)",
        f"{corpus}:4: expected a JSON object per line",
        f"{corpus}:5: duplicate id 'a' (first seen on line 1)",
        f'{corpus}:6: missing field "id"',
    ]


def test_a_beir_corpus_is_remembered_apart_from_an_r2med_reading_of_the_same_file(tmp_path: Path) -> None:
    root = tmp_path / "beir"
    write_jsonl(root / "corpus.jsonl", [{"_id": "d1", "title": "Gout", "text": "Urate crystals."}])
    write_jsonl(root / "queries.jsonl", [{"_id": "q1", "text": "gout"}])
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    first = load_beir_dir(root)
    assert load_beir_dir(root).corpus["d1"] == first.corpus["d1"] == "Gout\nUrate crystals."


# --------------------------------------------------------------------------- cache entries: digested when changed


def _count_digests(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    digested: list[Path] = []
    real = cache.file_digest

    def counting(path: Path) -> str:
        digested.append(Path(path))
        return real(path)

    monkeypatch.setattr(cache, "file_digest", counting)
    return digested


def _build(folder: Path) -> None:
    (folder / "data.bin").write_bytes(b"0123456789" * 1000)
    (folder / "sub").mkdir()
    (folder / "sub" / "ids.txt").write_text("a\nb")


def _load(folder: Path) -> bytes:
    return (folder / "data.bin").read_bytes()


def test_an_unchanged_entry_loads_without_digesting_its_files(monkeypatch: pytest.MonkeyPatch) -> None:
    cached("t", {"k": 1}, _build, _load)
    digested = _count_digests(monkeypatch)
    assert cached("t", {"k": 1}, lambda folder: pytest.fail("rebuilt"), _load) == b"0123456789" * 1000
    assert digested == []


def test_tampering_that_sets_the_mtime_back_is_still_detected() -> None:
    cached("t", {"k": 1}, _build, _load)
    path = entry_path("t", {"k": 1}) / "data.bin"
    before = os.stat(path)
    with open(path, "r+b") as handle:  # same size, same inode
        handle.write(b"X")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert not is_intact(path.parent, {"k": 1}, "t")
    assert cached("t", {"k": 1}, _build, _load) == b"0123456789" * 1000  # rebuilt


def test_an_entry_checked_before_this_release_or_copied_is_digested_once(monkeypatch: pytest.MonkeyPatch) -> None:
    cached("t", {"k": 1}, _build, _load)
    folder = entry_path("t", {"k": 1})
    manifest = json.loads((folder / MANIFEST).read_text())
    for info in manifest["files"].values():
        del info["seen"]  # as every manifest written before issue 27
    (folder / MANIFEST).write_text(json.dumps(manifest))
    copy = folder.with_name("copy")
    shutil.copytree(folder, copy)  # new inodes
    shutil.rmtree(folder)
    copy.rename(folder)
    digested = _count_digests(monkeypatch)
    assert is_intact(folder, {"k": 1}, "t") and len(digested) == 2
    assert is_intact(folder, {"k": 1}, "t") and len(digested) == 2  # recorded: not digested again
    assert sorted(p.name for p in folder.iterdir()) == ["data.bin", MANIFEST, "sub"]
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no stray manifest copy


def test_a_reopened_dense_index_is_the_built_one_and_damage_is_still_found(tiny_r2med: Path) -> None:
    from r2med_core.retrieval.dense import open_index
    from r2med_core.systems import dense_retriever

    dataset = load_dir(tiny_r2med)
    built = dense_retriever(dataset, "minilm")
    folder = entry_path("dense", built.cache_key(dataset.fingerprint))
    index, ids = open_index(folder)
    assert ids == list(dataset.corpus) and index.ntotal == len(ids)
    assert (index.reconstruct_n(0, len(ids)) == built.index.reconstruct_n(0, len(ids))).all()
    with open(folder / "index.faiss", "r+b") as handle:  # a flipped byte in the vectors, same size
        handle.seek(-4, os.SEEK_END)
        handle.write(b"\x00\x00\x80\x7f")
    assert not is_intact(folder, built.cache_key(dataset.fingerprint), "dense")
