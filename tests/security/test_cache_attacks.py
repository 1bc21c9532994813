"""Issue 9 item 6 (and item 4's size cap): whoever can write the cache folder cannot make a loader
hang, crash, serve another system's data or run code; killed builds do not pile up; the cache
stays under ``R2MED_CACHE_MAX_GB`` without evicting what a live process is using."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from r2med_core import cache
from r2med_core.cache import MANIFEST, cached, entry_path, in_use, is_intact

ROOT = Path(__file__).resolve().parents[2]


def _build(text: str):
    def build(folder: Path) -> None:
        (folder / "data.txt").write_text(text)

    return build


def _load(folder: Path) -> str:
    return (folder / "data.txt").read_text()


def _manifest(folder: Path) -> dict:
    return json.loads((folder / MANIFEST).read_text())


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _run_cached_in_subprocess(cache_dir: Path, key: dict, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``cached`` in a child process, so a loader that hangs fails the test instead of hanging it."""
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from r2med_core.cache import cached\n"
        "def build(folder): (folder / 'data.txt').write_text('rebuilt')\n"
        "print(cached('t', json.loads(sys.argv[1]), build, lambda f: (f / 'data.txt').read_text()))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script, json.dumps(key)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "R2MED_CACHE_DIR": str(cache_dir)},
    )


@pytest.mark.parametrize("target", ["/dev/zero", "../" * 30 + "dev/zero", "link"])
def test_a_manifest_naming_a_device_never_hangs_the_loader(target: str, _isolated_cache: Path) -> None:
    key = {"k": "device"}
    cached("t", key, _build("original"), _load)
    folder = entry_path("t", key)
    if target == "link":
        (folder / "link").symlink_to("/dev/zero")
    manifest = _manifest(folder)
    manifest["files"] = {target: {"size": 0, "sha256": _sha(b"")}}
    (folder / MANIFEST).write_text(json.dumps(manifest))
    done = _run_cached_in_subprocess(_isolated_cache, key, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "rebuilt"


def test_a_manifest_that_is_itself_a_device_never_hangs(_isolated_cache: Path) -> None:
    key = {"k": "manifest-device"}
    cached("t", key, _build("original"), _load)
    folder = entry_path("t", key)
    (folder / MANIFEST).unlink()
    (folder / MANIFEST).symlink_to("/dev/zero")
    done = _run_cached_in_subprocess(_isolated_cache, key, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "rebuilt"


@pytest.mark.parametrize(
    "manifest",
    [
        [],
        "files",
        {"files": []},
        {"files": {"data.txt": 5}},
        {"files": {"data.txt": {"size": "8", "sha256": None}}},
        {"key": {"k": "shape"}, "files": {"data.txt": {"size": 8}}},
    ],
)
def test_a_manifest_of_the_wrong_shape_means_rebuild_not_crash(manifest: object) -> None:
    key = {"k": "shape"}
    cached("t", key, _build("original"), _load)
    folder = entry_path("t", key)
    (folder / MANIFEST).write_text(json.dumps(manifest))
    assert not is_intact(folder)
    assert cached("t", key, _build("rebuilt"), _load) == "rebuilt"


def test_a_swapped_entry_never_serves_another_systems_data() -> None:
    cached("t", {"system": "A"}, _build("A's run"), _load)
    cached("t", {"system": "B"}, _build("B's run"), _load)
    a, b = entry_path("t", {"system": "A"}), entry_path("t", {"system": "B"})
    # An intact entry, copied under another entry's name: every file matches its own manifest.
    for name in ("data.txt", MANIFEST):
        (b / name).write_bytes((a / name).read_bytes())
    assert is_intact(b)  # the files are consistent …
    assert not is_intact(b, {"system": "B"}, "t")  # … but they are not B's
    assert cached("t", {"system": "B"}, _build("B's run"), _load) == "B's run"


def test_an_unlisted_extra_file_or_symlinked_folder_makes_the_entry_untrusted(tmp_path: Path) -> None:
    key = {"k": "extra"}
    cached("t", key, _build("x"), _load)
    folder = entry_path("t", key)
    (folder / "extra.bin").write_bytes(b"planted")
    assert not is_intact(folder, key, "t")
    (folder / "extra.bin").unlink()
    outside = tmp_path / "outside"
    outside.mkdir()
    (folder / "sub").symlink_to(outside, target_is_directory=True)
    assert not is_intact(folder, key, "t")


def test_the_bm25_okapi_cache_never_unpickles(tiny_r2med: Path, tmp_path: Path) -> None:
    """A planted ``okapi.pkl`` (listed in a forged manifest) must not run: nothing is ever unpickled."""
    from r2med_core import load_dir, run_system
    from r2med_core.systems import bm25_retriever

    dataset = load_dir(tiny_r2med)
    retriever = bm25_retriever(dataset, "bm25-okapi")
    folder = next((cache.cache_root() / "bm25").iterdir())
    assert not [p for p in folder.iterdir() if p.suffix in (".pkl", ".pickle")]
    before = retriever.search(["diabetic ketoacidosis insulin"], k=5)

    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):  # what a pickle of this object runs when loaded
            return (os.system, (f"touch {marker}",))

    import pickle

    (folder / "okapi.pkl").write_bytes(pickle.dumps(Exploit()))
    manifest = _manifest(folder)
    for path in folder.iterdir():
        if path.name != MANIFEST:
            data = path.read_bytes()
            manifest["files"][path.name] = {"size": len(data), "sha256": _sha(data)}
    (folder / MANIFEST).write_text(json.dumps(manifest))

    loaded = bm25_retriever(dataset, "bm25-okapi")
    assert not marker.exists()
    assert loaded.search(["diabetic ketoacidosis insulin"], k=5) == before
    assert run_system(dataset, "bm25-okapi").top("q1", 1)[0][0] == "dka_0"


def test_killed_builds_are_swept_but_live_ones_kept(_isolated_cache: Path) -> None:
    cached("t", {"k": 1}, _build("x"), _load)  # creates the kind folder
    kind_dir = _isolated_cache / "t"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = cache._HOST
    killed = kind_dir / f".build-abc-{host}-{dead.pid}-xyz"
    alive = kind_dir / f".build-def-{host}-{os.getpid()}-xyz"
    recent_dead = kind_dir / f".build-fed-{host}-{dead.pid}-new"
    # A live process between making its folder and locking it: fresh, unlocked, its process alive.
    starting = kind_dir / f".build-aaa-{host}-{os.getpid()}-new"
    old_style = kind_dir / ".build-0123abcd-k2j3h4"
    for folder in (killed, alive, recent_dead, starting, old_style):
        folder.mkdir()
        (folder / "partial.bin").write_bytes(b"x" * 100)
    old = time.time() - 2 * cache.STALE_BUILD_SECONDS
    for folder in (killed, alive, old_style):
        os.utime(folder, (old, old))

    with cache._building(alive):  # a live build holds its folder's lock
        cached("t", {"k": 2}, _build("y"), _load)  # any build sweeps its kind folder

    # A dead process's folder goes at once, however fresh (issue 36: a killed build's leftovers are cleaned by
    # the next build); a live one's stays, locked or not yet locked.
    assert not killed.exists() and not old_style.exists() and not recent_dead.exists()
    assert alive.exists(), "a build folder of a live process was removed"
    assert starting.exists(), "a fresh build folder of a live process was removed before it could lock it"


@pytest.mark.skipif(cache.fcntl is None, reason="without flock a build is known alive by its process id only")
def test_a_crashed_build_is_swept_even_when_its_process_id_was_reused(_isolated_cache: Path) -> None:
    """Issue 29 item 12: a restarted container's app gets the crashed one's process id back, so the
    crashed build's folder looked alive for ever."""
    cached("t", {"k": 1}, _build("x"), _load)
    crashed = _isolated_cache / "t" / f".build-abc-{cache._HOST}-{os.getpid()}-xyz"
    crashed.mkdir()
    (crashed / "partial.bin").write_bytes(b"x" * 100)
    _age(crashed, 2 * cache.STALE_BUILD_SECONDS)
    assert cache.sweep_builds(crashed.parent) == [crashed] and not crashed.exists()


def test_loads_sweep_crashed_builds_too(_isolated_cache: Path) -> None:
    """Issue 29 item 12: only a build swept its kind folder, so once every entry of a kind was built the
    folders of crashed builds stayed for good (here a fresh process only loads)."""
    cached("t", {"k": 1}, _build("x"), _load)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    crashed = _isolated_cache / "t" / f".build-abc-{cache._HOST}-{dead.pid}-xyz"
    crashed.mkdir()
    _age(crashed, 2 * cache.STALE_BUILD_SECONDS)
    done = _run_cached_in_subprocess(_isolated_cache, {"k": 1})
    assert (done.returncode, done.stdout) == (0, "x\n"), done.stderr  # loaded, not rebuilt
    assert not crashed.exists()


def test_a_kind_folder_replaced_by_a_file_is_moved_aside_and_rebuilt(_isolated_cache: Path, tmp_path: Path) -> None:
    """Issue 29 item 12: a file where a kind's folder belongs gave "[Errno 17] File exists" for every
    entry of that kind, with no rebuild and no hint."""
    from r2med_core.server.portable import export_entries, import_entries

    entry, kind_dir = entry_path("runs", {"k": 1}), _isolated_cache / "runs"
    cached("runs", {"k": 1}, _build("x"), _load)
    archive = tmp_path / "runs.tar.gz"
    assert export_entries([entry], archive) == 1

    def replace_kind_folder() -> None:
        shutil.rmtree(kind_dir)
        kind_dir.write_text("not a folder")

    def kept_aside() -> list[str]:
        kept = list(_isolated_cache.glob("runs.not-a-folder-*"))
        contents = [p.read_text() for p in kept]
        for path in kept:
            path.unlink()
        return contents

    replace_kind_folder()
    assert cached("runs", {"k": 1}, _build("y"), _load) == "y"
    assert kept_aside() == ["not a folder"]  # kept, not deleted

    replace_kind_folder()
    assert import_entries(archive).added == [f"runs/{entry.name}"]
    assert _load(entry) == "x" and kept_aside() == ["not a folder"]

    shutil.rmtree(_isolated_cache)
    _isolated_cache.write_text("not a folder")  # the cache folder itself: an error naming it
    with pytest.raises(NotADirectoryError, match=f"^{_isolated_cache} is a file where the cache needs a folder"):
        cached("runs", {"k": 1}, _build("x"), _load)


def _age(folder: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(folder, (then, then))


def test_cache_cap_evicts_least_recently_used(monkeypatch: pytest.MonkeyPatch) -> None:
    payload = "x" * 4000
    manifest_size = 400  # roughly; each entry is ~4.4 kB
    monkeypatch.setenv("R2MED_CACHE_MAX_GB", str((2.5 * (4000 + manifest_size)) / (1 << 30)))
    cached("t", {"k": "A"}, _build(payload), _load)
    cached("t", {"k": "B"}, _build(payload), _load)
    a, b = entry_path("t", {"k": "A"}), entry_path("t", {"k": "B"})
    _age(a, 300)
    _age(b, 200)
    assert cached("t", {"k": "A"}, _build("never"), _load) == payload  # a use: A is now the most recent
    cached("t", {"k": "C"}, _build(payload), _load)
    assert a.is_dir() and entry_path("t", {"k": "C"}).is_dir()
    assert not b.exists(), "the least recently used entry was not evicted"


def test_cache_cap_never_evicts_an_entry_another_process_holds(monkeypatch: pytest.MonkeyPatch, _isolated_cache: Path):
    monkeypatch.setenv("R2MED_CACHE_MAX_GB", str((1.5 * 4400) / (1 << 30)))
    cached("t", {"k": "held"}, _build("x" * 4000), _load)
    held = entry_path("t", {"k": "held"})
    _age(held, 1000)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom r2med_core.cache import in_use\n"
            "with in_use('t', {'k': 'held'}):\n    print('holding', flush=True)\n    time.sleep(120)\n",
        ],
        cwd=ROOT,
        env={**os.environ, "R2MED_CACHE_DIR": str(_isolated_cache)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        cached("t", {"k": "new"}, _build("y" * 4000), _load)
        assert held.is_dir(), "an entry another process holds was evicted"
    finally:
        holder.kill()
        holder.wait()
    # Once the holder is gone, its lease no longer protects the entry.
    cached("t", {"k": "newer"}, _build("z" * 4000), _load)
    assert not held.exists()
    with in_use("t", {"k": "newer"}):
        assert (_isolated_cache / cache.LEASES).is_dir()


def test_cache_files_get_normal_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        target = tmp_path / "out.json"
        cache.atomic_write_text(target, "{}")
    finally:
        os.umask(old)
    assert target.stat().st_mode & 0o777 == 0o644
