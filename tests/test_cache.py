"""The disk cache: atomic entries, integrity checks, rebuild on damage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from r2med_core.cache import CACHE_ENV, atomic_write_text, cache_root, cached, entry_path, fingerprint, is_intact


def test_cache_root_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "elsewhere"))
    assert cache_root() == tmp_path / "elsewhere"


def test_fingerprint_is_order_insensitive_for_dicts_and_sensitive_to_values() -> None:
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})


def test_build_once_then_load(tmp_path: Path) -> None:
    builds: list[int] = []

    def build(folder: Path) -> None:
        builds.append(1)
        (folder / "data.txt").write_text("hello")

    def load(folder: Path) -> str:
        return (folder / "data.txt").read_text()

    assert cached("t", {"k": 1}, build, load) == "hello"
    assert cached("t", {"k": 1}, build, load) == "hello"
    assert len(builds) == 1
    cached("t", {"k": 2}, build, load)
    assert len(builds) == 2


def test_damaged_entry_is_rebuilt(tmp_path: Path) -> None:
    builds: list[int] = []

    def build(folder: Path) -> None:
        builds.append(1)
        (folder / "data.txt").write_text("0123456789")

    cached("t", {"k": "damage"}, build, lambda f: (f / "data.txt").read_text())
    folder = entry_path("t", {"k": "damage"})
    assert is_intact(folder)
    (folder / "data.txt").write_text("01234")  # truncated
    assert not is_intact(folder)
    assert cached("t", {"k": "damage"}, build, lambda f: (f / "data.txt").read_text()) == "0123456789"
    assert len(builds) == 2
    (folder / "data.txt").write_text("0123456780")  # same size, different bytes
    assert not is_intact(folder)


def test_failed_build_leaves_nothing_behind() -> None:
    def build(folder: Path) -> None:
        (folder / "partial.bin").write_bytes(b"x" * 10)
        raise RuntimeError("encoder crashed")

    with pytest.raises(RuntimeError):
        cached("t", {"k": "crash"}, build, lambda f: None)
    folder = entry_path("t", {"k": "crash"})
    assert not folder.exists()
    assert [p for p in folder.parent.iterdir() if p.name.startswith(".build-")] == []


def test_atomic_write_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "out" / "file.txt"
    atomic_write_text(target, "first")
    atomic_write_text(target, "second")
    assert target.read_text() == "second"
    assert os.listdir(target.parent) == ["file.txt"]
