"""The on-disk cache: where indexes, embeddings and runs live, keyed so stale data is never reused.

Every entry is a folder named by a fingerprint of everything that produced it (corpus digest,
system parameters, model revision …). It is built in a temporary folder and renamed into place,
so a crash never leaves a half-written entry; a manifest of file sizes and SHA-256 digests is
checked on load, so a truncated or damaged file is detected and the entry rebuilt. A file is
digested when it is new to the manifest's record (built, imported, copied, written before) or has
changed since its last check (size, mtime, ctime or inode), not on every load of a 4 GB index.

Whoever can write the cache folder must not be able to make a loader hang, crash or serve the
wrong data, so an entry is trusted only when its manifest is a small regular file of the right
shape, it records the very key that was asked for, and it lists exactly the regular files of the
folder (no symlinks, no devices, nothing outside). Loaders never unpickle.

``R2MED_CACHE_MAX_GB`` caps the cache: after a build, least recently used entries are evicted
(loading an entry marks it used), never one that a live process is loading or building (it holds
a lease file under ``.leases/``). Build folders (and scratch files) left by killed processes are
swept away by the next build, and by loads now and then (a process's first load of a kind): a live
build holds a lock on its folder that dies with its process, and the folder names its host and
process, so a crashed build's folder goes at once and a reused process id keeps it ten minutes at most.

The manifest catches accidents (a truncated write, a damaged or misplaced file), not an adversary:
whoever can write the cache can rewrite a file and its manifest alike, so the cache folder must be
writable only by the account the app runs as (the operator guide says so). A kind folder replaced by a file is moved
aside (kept, renamed ``<kind>.not-a-folder-…``) and its entries rebuilt.

LLM replies are kept apart, one small JSON file each (``ReplyCache``): they are paid for, so a
reply is never thrown away by eviction, and a damaged file is a miss (asked again), never a crash.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import stat
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # Windows: a build is known to be alive by its process id only
    fcntl = None

T = TypeVar("T")

MANIFEST = "manifest.json"
CACHE_ENV = "R2MED_CACHE_DIR"
LEASES = ".leases"
#: A build folder whose process is gone is removed once it is this old (seconds).
STALE_BUILD_SECONDS = 10 * 60
#: A build folder made on another host (a shared cache volume) is removed only this old.
STALE_FOREIGN_SECONDS = 24 * 3600
_MANIFEST_MAX_BYTES = 16 << 20
#: The mtime a check gives each file of an entry (2000-01-01): any write sets it to now.
SEAL_NS = 946_684_800 * 10**9
_HOST = hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]
#: A build folder (``.build-<entry>-<host>-<pid>-…``) or a scratch file (``.build-<host>-<pid>-…``): the host
#: and process that made it.
_BUILD_NAME = re.compile(r"^\.build-(?:[0-9a-f]+-)?([0-9a-f]{8})-(\d+)-")


def cache_root() -> Path:
    """``$R2MED_CACHE_DIR``, else ``cached_indexes/`` of the checkout, else ``~/.cache/r2med_explorer``."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    checkout = Path(__file__).resolve().parent.parent / "cached_indexes"
    if checkout.is_dir():
        return checkout
    return Path.home() / ".cache" / "r2med_explorer"


def fingerprint(*parts: Any) -> str:
    """A stable digest of JSON-serialisable parts (dict key order does not matter)."""
    payload = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:24]


def _umask() -> int:
    """The process umask, read without changing it (``os.umask`` would race other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def atomic_write_bytes(path: Path, data: bytes, scratch: Path | None = None) -> None:
    """Write a file so readers see the old content or the new, never a partial one.

    The file gets the permissions any new file would (``0666 & ~umask``), not mkstemp's 0600. The
    new content is written in ``scratch`` (default: the file's folder; the same file system) first.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if scratch is None:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    else:  # named like a build folder (host and process id), so a crash's leftover is swept
        prefix = f".build-{_HOST}-{os.getpid()}-{path.parent.name}-{path.name}-"
        fd, tmp = tempfile.mkstemp(dir=scratch, prefix=prefix, suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


# --------------------------------------------------------------------------- integrity


def open_regular(path: Path) -> int:
    """Open a regular file for reading; a symlink, FIFO or device raises OSError (never blocks)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return fd


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with os.fdopen(open_regular(path), "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: Path) -> dict[str, os.stat_result] | None:
    """``{relative path: lstat}`` of every file under ``folder``; None if anything is not a plain file or folder."""
    if not stat.S_ISDIR(os.lstat(folder).st_mode):
        return None
    files: dict[str, os.stat_result] = {}
    for parent, dirs, names in os.walk(folder, followlinks=False):
        for name in dirs:
            if not stat.S_ISDIR(os.lstat(os.path.join(parent, name)).st_mode):
                return None  # a symlink to a folder
        for name in names:
            full = os.path.join(parent, name)
            info = os.lstat(full)
            if not stat.S_ISREG(info.st_mode):
                return None  # a symlink, FIFO, socket or device
            files[Path(os.path.relpath(full, folder)).as_posix()] = info
    return files


def _listing(folder: Path) -> dict[str, int] | None:
    """``{relative path: size}`` of every file under ``folder``; None if anything is not a plain file or folder."""
    files = _files(folder)
    return None if files is None else {name: info.st_size for name, info in files.items()}


def _seen(info: os.stat_result) -> list[int]:
    """What the manifest records of a checked file besides size and digest: ``[mtime_ns, ctime_ns, inode]``."""
    return [info.st_mtime_ns, info.st_ctime_ns, info.st_ino]


def _seal(path: Path) -> list[int] | None:
    """Mark a file whose digest is about to be checked: its mtime is set to ``SEAL_NS``, so any later
    write (which sets it to now, even in the same tick of the file system's clock) or ``utime`` shows;
    returns what to record, or None where the file cannot be marked (a read-only cache)."""
    try:
        os.utime(path, ns=(SEAL_NS, SEAL_NS), follow_symlinks=False)
        return _seen(os.lstat(path))
    except (OSError, NotImplementedError):
        return None


def _normalized(key: dict[str, Any]) -> Any:
    """The key as it reads back from the manifest (tuples → lists, odd values → str)."""
    return json.loads(json.dumps(key, sort_keys=True, default=str))


def _read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest when it is a small regular file of the expected shape, else None."""
    try:
        with os.fdopen(open_regular(folder / MANIFEST), "rb") as handle:
            raw = handle.read(_MANIFEST_MAX_BYTES + 1)
        if len(raw) > _MANIFEST_MAX_BYTES:
            return None
        manifest = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return None
    for name, info in manifest["files"].items():
        if not (
            isinstance(info, dict)
            and type(info.get("size")) is int
            and info["size"] >= 0
            and isinstance(info.get("sha256"), str)
            and name != MANIFEST
            and ("seen" not in info or _is_seen(info["seen"]))
        ):
            return None
    return manifest


def _is_seen(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 3 and all(type(n) is int for n in value)


def _write_manifest(folder: Path, kind: str, key: dict[str, Any]) -> None:
    files: dict[str, dict[str, Any]] = {}
    for name, size in sorted((_listing(folder) or {}).items()):
        seen = _seal(folder / name)
        files[name] = {"size": size, "sha256": file_digest(folder / name), **({"seen": seen} if seen else {})}
    payload = {"kind": kind, "key": key, "files": files}
    (folder / MANIFEST).write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")


def _record_seen(folder: Path, manifest: dict[str, Any], seen: dict[str, list[int]]) -> None:
    """Record files just digested as checked, so the next load trusts them without a digest. The new
    manifest is written beside the entry and renamed into it (an entry never holds a stray file);
    where the cache is read-only, the next load digests them again."""
    for name, now in seen.items():
        manifest["files"][name]["seen"] = now
    text = json.dumps(manifest, indent=1, default=str)
    try:
        atomic_write_bytes(folder / MANIFEST, text.encode("utf-8"), scratch=folder.parent)
    except OSError:
        pass


def is_intact(folder: Path, key: dict[str, Any] | None = None, kind: str | None = None) -> bool:
    """True when the manifest lists exactly the folder's files, each with its recorded size and digest.

    With ``key`` (and ``kind``), the manifest must also record that key: an entry copied or renamed
    under another entry's name is never served.

    A file is digested when it was not checked before or has changed since (its size, mtime, ctime or
    inode differ from the manifest's record of its last check), not on every load: a build, an import
    or a copy digests, a load of an unchanged entry reads its manifest and stats its files. Every
    write or ``utime`` changes ctime, which no user can set back, and a check marks each file's mtime
    (``_seal``) so even a write within the same clock tick shows.
    """
    try:
        manifest = _read_manifest(folder)
        if manifest is None:
            return False
        if key is not None and manifest.get("key") != _normalized(key):
            return False
        if kind is not None and manifest.get("kind") != kind:
            return False
        stats = _files(folder)
        if stats is None or stats.pop(MANIFEST, None) is None:
            return False
        files: dict[str, dict[str, Any]] = manifest["files"]
        if set(stats) != set(files):
            return False
        checked: dict[str, list[int]] = {}
        for name, info in files.items():
            if stats[name].st_size != info["size"]:
                return False
            if info.get("seen") == _seen(stats[name]):
                continue
            now = _seal(folder / name)
            if file_digest(folder / name) != info["sha256"]:
                return False
            if now is not None:
                checked[name] = now
        if checked:
            _record_seen(folder, manifest, checked)
    except OSError:
        return False
    return True


def entry_path(kind: str, key: dict[str, Any]) -> Path:
    """The folder a cache entry of this kind and key lives in (it may not exist yet)."""
    return cache_root() / kind / fingerprint(kind, key)


def _discard(folder: Path) -> None:
    """Move a damaged entry aside first (atomic), then delete it."""
    if not os.path.lexists(folder):
        return
    trash = folder.with_name(f".trash-{folder.name}-{uuid.uuid4().hex[:8]}")
    try:
        os.replace(folder, trash)
    except OSError:
        return
    if trash.is_symlink() or not trash.is_dir():
        trash.unlink(missing_ok=True)
    else:
        shutil.rmtree(trash, ignore_errors=True)


# --------------------------------------------------------------------------- leases, sweeping, eviction


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid > 0
    return pid > 0


@contextmanager
def _lease(folder: Path) -> Iterator[None]:
    """Mark an entry in use by this process while it is loaded or built (eviction skips it)."""
    leases = folder.parent.parent / LEASES
    path: Path | None = leases / f"{folder.parent.name}.{folder.name}.{_HOST}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    try:
        leases.mkdir(parents=True, exist_ok=True)
        path.touch()  # type: ignore[union-attr]
    except OSError:
        path = None
    try:
        yield
    finally:
        if path is not None:
            path.unlink(missing_ok=True)


@contextmanager
def in_use(kind: str, key: dict[str, Any]) -> Iterator[Path]:
    """Hold an entry (its folder is yielded) so no process evicts it meanwhile, e.g. while reading it lazily."""
    folder = entry_path(kind, key)
    with _lease(folder):
        yield folder


def entries_in_use(root: Path | None = None) -> set[tuple[str, str]]:
    """``(kind, entry name)`` of every entry a live process holds a lease on (dead leases are removed)."""
    leases = (root or cache_root()) / LEASES
    held: set[tuple[str, str]] = set()
    try:
        names = [p for p in leases.iterdir()]
    except OSError:
        return held
    for lease in names:
        parts = lease.name.rsplit(".", 4)
        if len(parts) != 5 or not parts[3].isdigit():
            continue
        kind, name, host, pid = parts[0], parts[1], parts[2], int(parts[3])
        if host != _HOST:
            try:
                fresh = time.time() - lease.stat().st_mtime < STALE_FOREIGN_SECONDS
            except OSError:
                continue
            if fresh:
                held.add((kind, name))
            continue
        if _pid_alive(pid):
            held.add((kind, name))
        else:
            lease.unlink(missing_ok=True)
    return held


@contextmanager
def _building(staging: Path) -> Iterator[None]:
    """Hold a lock on a build folder while building into it; the kernel releases it when the process
    dies, so a sweep tells a crashed build from a live one (``_build_alive``)."""
    fd: int | None = None
    if fcntl is not None:
        try:
            fd = os.open(staging, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass  # a file system without locks: the folder's process id still tells
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def _build_alive(folder: Path, pid: int) -> bool:
    """Whether a build of this host still works in ``folder``: its lock is held (where locks work; else
    its process lives). A process id alone lies once it is reused, e.g. by a restarted container."""
    if fcntl is None:
        return _pid_alive(pid)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(folder, flags)
    except OSError:
        return False  # gone, or a link planted in its place
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return _pid_alive(pid)
    finally:
        os.close(fd)
    return False


#: When this process last swept each kind folder. Loads sweep too (a kind whose entries are all built
#: never builds again), at most once per ``STALE_BUILD_SECONDS``.
_LAST_SWEEP: dict[Path, float] = {}


def sweep_builds(kind_dir: Path, now: float | None = None) -> list[Path]:
    """Remove build folders (and scratch files) of processes that died mid-build, and leftover trash;
    returns what went.

    One of this host's is removed at once when its lock is free and the process that made it is gone
    (killed mid-build: the next build or load cleans up), and once ``STALE_BUILD_SECONDS`` old when its
    lock is free but its process id is alive (the id reused by another process, or the moment between
    making the folder and locking it). Another host's waits ``STALE_FOREIGN_SECONDS`` (its processes
    cannot be seen from here)."""
    now = time.time() if now is None else now
    _LAST_SWEEP[kind_dir] = now
    removed: list[Path] = []
    try:
        children = list(kind_dir.iterdir())
    except OSError:
        return removed
    for child in children:
        if child.name.startswith(".trash-"):
            stale = True
        elif child.name.startswith(".build-"):
            try:
                age = now - child.lstat().st_mtime
            except OSError:
                continue
            match = _BUILD_NAME.match(child.name)
            if match and match.group(1) == _HOST:
                pid = int(match.group(2))
                stale = not _build_alive(child, pid) and (age > STALE_BUILD_SECONDS or not _pid_alive(pid))
            else:  # another host's build, or an old-style name without a pid
                stale = age > (STALE_FOREIGN_SECONDS if match else STALE_BUILD_SECONDS)
        else:
            continue
        if stale:
            if child.is_symlink() or not child.is_dir():
                child.unlink(missing_ok=True)
            else:
                shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    return removed


def _sweep_now_and_then(kind_dir: Path) -> None:
    if time.time() - _LAST_SWEEP.get(kind_dir, 0.0) >= STALE_BUILD_SECONDS:
        sweep_builds(kind_dir)


def make_kind_folder(kind_dir: Path) -> None:
    """Make a kind's folder of entries. Something else in its place (a file, a dangling link) is moved
    aside as ``<kind>.not-a-folder-…``, kept rather than deleted, so the entries can be rebuilt; a cache
    folder that is itself a file is an error naming it."""
    if os.path.lexists(kind_dir) and not kind_dir.is_dir():
        aside = kind_dir.with_name(f"{kind_dir.name}.not-a-folder-{uuid.uuid4().hex[:8]}")
        try:
            os.replace(kind_dir, aside)
        except FileNotFoundError:
            pass  # another process moved it first
    try:
        kind_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocking = next((p for p in (kind_dir, *kind_dir.parents) if p.exists() and not p.is_dir()), kind_dir)
        raise NotADirectoryError(
            f"{blocking} is a file where the cache needs a folder: move it, or set {CACHE_ENV} to another folder"
        ) from None


def _cap_bytes() -> int | None:
    from r2med_core.settings import load_settings

    try:
        cap = load_settings().cache_max_gb
    except ValueError:
        return None  # the app and CLI report a bad setting; the cache just stays uncapped
    return None if cap is None else int(cap * (1 << 30))


def _entries(root: Path) -> list[tuple[float, int, Path]]:
    """``(last used, size, folder)`` of every cache entry (a folder holding a manifest)."""
    found: list[tuple[float, int, Path]] = []
    try:
        kinds = [p for p in root.iterdir() if not p.name.startswith(".") and p.is_dir() and not p.is_symlink()]
    except OSError:
        return found
    for kind_dir in kinds:
        try:
            children = list(kind_dir.iterdir())
        except OSError:
            continue
        for entry in children:
            if entry.name.startswith(".") or not (entry / MANIFEST).is_file():
                continue
            try:
                listing = _listing(entry)
                used = entry.lstat().st_mtime
            except OSError:
                continue
            found.append((used, sum((listing or {}).values()), entry))
    return found


def enforce_cap(root: Path | None = None, cap_bytes: int | None = None) -> list[Path]:
    """Evict least recently used entries until the cache fits ``R2MED_CACHE_MAX_GB``; returns the evicted.

    Entries a live process holds a lease on are never evicted, even if the cache stays over the cap.
    """
    root = root or cache_root()
    cap = _cap_bytes() if cap_bytes is None else cap_bytes
    if cap is None:
        return []
    entries = _entries(root)
    total = sum(size for _, size, _ in entries)
    if total <= cap:
        return []
    held = entries_in_use(root)
    evicted: list[Path] = []
    for _, size, entry in sorted(entries, key=lambda e: e[0]):
        if total <= cap:
            break
        if (entry.parent.name, entry.name) in held:
            continue
        _discard(entry)
        evicted.append(entry)
        total -= size
    return evicted


def _touch(folder: Path) -> None:
    """Record a use (the folder's mtime), for least-recently-used eviction."""
    try:
        os.utime(folder)
    except OSError:
        pass


def cached(kind: str, key: dict[str, Any], build: Callable[[Path], None], load: Callable[[Path], T]) -> T:
    """Load the entry for ``key``; build it (atomically) when missing, stale or damaged.

    ``build(folder)`` writes files into an empty temporary folder; ``load(folder)`` reads them and may
    raise on damage, which triggers one rebuild.
    """
    folder = entry_path(kind, key)
    with _lease(folder):
        if folder.is_dir() and is_intact(folder, key, kind):
            try:
                value = load(folder)
            except Exception:
                pass
            else:
                _touch(folder)
                _sweep_now_and_then(folder.parent)
                return value
        _discard(folder)
        make_kind_folder(folder.parent)
        sweep_builds(folder.parent)
        staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".build-{folder.name}-{_HOST}-{os.getpid()}-"))
        try:
            with _building(staging):
                build(staging)
                _write_manifest(staging, kind, key)
                try:
                    os.replace(staging, folder)
                except OSError:
                    # Another process finished the same entry first; theirs is as good as ours.
                    if not (folder.is_dir() and is_intact(folder, key, kind)):
                        raise
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        value = load(folder)
        _touch(folder)
        enforce_cap(folder.parent.parent)
        return value


# --------------------------------------------------------------------------- LLM replies

#: A reply entry larger than this is not read (a miss): replies are kB, and capped at a few MB.
REPLY_ENTRY_MAX_BYTES = 64 << 20
_REPLY_KEY = re.compile(r"[0-9a-f]{24}")


@dataclass(frozen=True)
class ReplyCache:
    """LLM replies on disk, one JSON object per reply at ``cache_root()/<folder>/<kk>/<key>.json``.

    The key (``key``) is a fingerprint of ``namespace`` and of everything that changes the reply —
    the caller passes the server, model, sampling, prompt version and the input text — and never
    the API key. Entries are written atomically. A missing, unreadable, oversized, non-JSON or
    non-object entry, a symlink or a device is a miss, never a crash; callers check the fields they
    read and treat a wrong one as a miss too. The folder and key scheme are the ones the replies of
    earlier versions were written with, so a user's cached (paid) replies stay in use.
    """

    folder: str
    namespace: str

    def key(self, *parts: Any) -> str:
        return fingerprint(self.namespace, *parts)

    def path(self, key: str) -> Path:
        if not _REPLY_KEY.fullmatch(key):
            raise ValueError(f"not a reply cache key: {key[:40]!r}")
        return cache_root() / self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry for ``key``, or None (missing or damaged)."""
        try:
            fd = open_regular(self.path(key))
            with os.fdopen(fd, "rb") as handle:
                if os.fstat(handle.fileno()).st_size > REPLY_ENTRY_MAX_BYTES:
                    return None
                payload = json.loads(handle.read(REPLY_ENTRY_MAX_BYTES + 1))
        except (OSError, ValueError, RecursionError):
            return None
        return payload if isinstance(payload, dict) else None

    def put(self, key: str, payload: dict[str, Any]) -> bool:
        """Keep ``payload`` for ``key``; False when it could not be written (the reply is still
        used by the batch that asked for it; it is just asked again next time)."""
        try:
            atomic_write_text(self.path(key), json.dumps(payload, ensure_ascii=False))
        except OSError:
            return False
        return True
