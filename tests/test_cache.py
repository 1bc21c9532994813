"""The disk cache: atomic entries, integrity checks, rebuild on damage."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from r2med_core import cache as cache_module
from r2med_core.cache import (
    CACHE_ENV,
    STALE_BUILD_SECONDS,
    atomic_write_text,
    cache_root,
    cached,
    entry_path,
    fingerprint,
    is_intact,
    sweep_builds,
)


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


#: A build that is killed: it writes part of an entry (and a scratch file of a manifest), says so, and
#: waits to be killed (``kill -9``: no ``finally`` runs, so the leftovers stay as after a crash).
_KILLED_BUILD = """
import sys, time
from pathlib import Path
from r2med_core import cache

ready = Path(sys.argv[1])

def hang(fd):  # the scratch file is written, not yet renamed
    ready.write_text("building")
    time.sleep(3600)

def build(folder):
    (folder / "partial.bin").write_bytes(b"x" * 1000)
    cache.os.fsync = hang
    cache.atomic_write_bytes(folder / "manifest.json", b"{}", scratch=folder.parent)

cache.cached("t", {"k": "killed"}, build, lambda f: None)
"""


def _killed_build(tmp_path: Path) -> list[str]:
    """Run ``_KILLED_BUILD`` in its own process, kill it mid-build; the ``.build-`` leftovers' names."""
    ready = tmp_path / "ready"
    process = subprocess.Popen([sys.executable, "-c", _KILLED_BUILD, str(ready)], cwd=Path(__file__).parent.parent)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert process.poll() is None, f"the build exited early ({process.returncode})"
            assert time.monotonic() < deadline, "the build never started"
            time.sleep(0.1)
    finally:
        process.kill()
        process.wait(timeout=60)
    kind = entry_path("t", {"k": "killed"}).parent
    return sorted(p.name for p in kind.iterdir() if p.name.startswith(".build-"))


def test_a_killed_builds_leftovers_are_cleaned_by_the_next_build(tmp_path: Path) -> None:
    left = _killed_build(tmp_path)
    assert len(left) == 2, left  # the half-built entry's folder and the manifest's scratch file
    assert cached("t", {"k": "next"}, lambda f: (f / "data.txt").write_text("ok"), lambda f: "loaded") == "loaded"
    kind = entry_path("t", {"k": "next"}).parent
    assert [p.name for p in kind.iterdir() if p.name.startswith(".build-")] == []
    assert not entry_path("t", {"k": "killed"}).exists()


def test_a_killed_builds_leftovers_are_cleaned_by_the_next_load(tmp_path: Path) -> None:
    """A process that only loads (every entry built) cleans up too, on its first load of the kind."""
    assert cached("t", {"k": "other"}, lambda f: (f / "data.txt").write_text("ok"), lambda f: "built") == "built"
    assert len(_killed_build(tmp_path)) == 2
    cache_module._LAST_SWEEP.clear()  # a fresh process: it has not swept yet
    assert cached("t", {"k": "other"}, lambda f: pytest.fail("built again"), lambda f: "loaded") == "loaded"
    kind = entry_path("t", {"k": "other"}).parent
    assert [p.name for p in kind.iterdir() if p.name.startswith(".build-")] == []


def test_a_live_build_is_never_swept(tmp_path: Path) -> None:
    """Another build of this process (or of a live one) keeps its folder, whatever a sweep finds."""
    started, release = threading.Event(), threading.Event()

    def slow(folder: Path) -> None:
        (folder / "data.txt").write_text("slow")
        started.set()
        assert release.wait(120)

    result: list[str] = []
    worker = threading.Thread(target=lambda: result.append(cached("t", {"k": "slow"}, slow, lambda f: "slow")))
    worker.start()
    try:
        assert started.wait(120)
        kind = entry_path("t", {"k": "slow"}).parent
        live = [p for p in kind.iterdir() if p.name.startswith(".build-")]
        assert len(live) == 1
        assert sweep_builds(kind, now=time.time() + 10 * STALE_BUILD_SECONDS) == []  # locked: alive, however old
        assert live[0].is_dir()
    finally:
        release.set()
        worker.join(120)
    assert result == ["slow"]
