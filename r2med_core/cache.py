"""The on-disk cache: where indexes, embeddings and runs live, keyed so stale data is never reused.

Every entry is a folder named by a fingerprint of everything that produced it (corpus digest,
system parameters, model revision …). It is built in a temporary folder and renamed into place,
so a crash never leaves a half-written entry; a manifest of file sizes and SHA-256 digests is
checked on load, so a truncated or damaged file is detected and the entry rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

MANIFEST = "manifest.json"
CACHE_ENV = "R2MED_CACHE_DIR"


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


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write a file so readers see the old content or the new, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
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


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_manifest(folder: Path, key: dict[str, Any]) -> None:
    files = {
        str(p.relative_to(folder)): {"size": p.stat().st_size, "sha256": _digest(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    (folder / MANIFEST).write_text(json.dumps({"key": key, "files": files}, indent=1, default=str), encoding="utf-8")


def is_intact(folder: Path) -> bool:
    """True when every file in the manifest exists with its recorded size and digest."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        for name, info in manifest["files"].items():
            path = folder / name
            if path.stat().st_size != info["size"] or _digest(path) != info["sha256"]:
                return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True


def entry_path(kind: str, key: dict[str, Any]) -> Path:
    """The folder a cache entry of this kind and key lives in (it may not exist yet)."""
    return cache_root() / kind / fingerprint(kind, key)


def _discard(folder: Path) -> None:
    """Move a damaged entry aside first (atomic), then delete it."""
    if not folder.exists():
        return
    trash = folder.with_name(f".trash-{folder.name}-{uuid.uuid4().hex[:8]}")
    try:
        os.replace(folder, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def cached(kind: str, key: dict[str, Any], build: Callable[[Path], None], load: Callable[[Path], T]) -> T:
    """Load the entry for ``key``; build it (atomically) when missing, stale or damaged.

    ``build(folder)`` writes files into an empty temporary folder; ``load(folder)`` reads them and may
    raise on damage, which triggers one rebuild.
    """
    folder = entry_path(kind, key)
    if folder.is_dir() and is_intact(folder):
        try:
            return load(folder)
        except Exception:
            pass
    _discard(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".build-{folder.name}-"))
    try:
        build(staging)
        _write_manifest(staging, key)
        try:
            os.replace(staging, folder)
        except OSError:
            # Another process finished the same entry first; theirs is as good as ours.
            if not (folder.is_dir() and is_intact(folder)):
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return load(folder)
