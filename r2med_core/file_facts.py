"""What a full read of a big data file found, remembered so the next start need not read it again.

Why: a warm run needs only a corpus's fingerprint (the key of every index and run built on it), its
number of documents and which judged documents it lacks, yet finding them meant reading, parsing and
hashing a 300 MB corpus on every start. A full read leaves those facts under ``<cache>/.files/``, one
small JSON file per data file and reader, next to the file's identity when it was read — size,
mtime_ns, ctime_ns, inode — and the SHA-256 of its bytes.

While the identity is unchanged the facts hold: any write changes the file's ctime (which, unlike
mtime, no user can set back) and a replaced file has another inode. When the identity changed, the
bytes decide: the same digest (a copy, a ``touch``) keeps the facts; different bytes mean a full read.

The cache folder is trusted no further than the rest of the cache: a record is used only when it is
a small regular file of the expected shape; anything else is ignored (the file is read again).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from r2med_core.cache import atomic_write_text, cache_root, file_digest, open_regular

FOLDER = ".files"
_MAX_BYTES = 16 << 20
#: A file changed this close to (or after) the moment it was read may have been written again within
#: one tick of the file system's clock, unseen by its times: its bytes are digested before trusting it.
RACY_NS = 2_000_000_000


def identity(path: Path) -> list[int] | None:
    """``[size, mtime_ns, ctime_ns, inode]`` of a regular file, None when it is not one (or is gone)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]


@dataclass(frozen=True)
class Remembered:
    """What a full read found (``facts``), and the file it read: its ``identity`` and ``sha256`` then,
    and when it was read (``read_ns``, wall clock)."""

    identity: list[int]
    sha256: str
    read_ns: int
    facts: dict[str, Any]


def _record_path(path: Path, reader: str) -> Path:
    name = hashlib.sha256(f"{reader}\x00{path.resolve()}".encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return cache_root() / FOLDER / f"{name}.json"


def _read_record(place: Path) -> Remembered | None:
    try:
        with os.fdopen(open_regular(place), "rb") as handle:
            raw = handle.read(_MAX_BYTES + 1)
        record = json.loads(raw.decode("utf-8")) if len(raw) <= _MAX_BYTES else None
    except (OSError, ValueError, RecursionError):
        return None
    if not (
        isinstance(record, dict)
        and isinstance(record.get("identity"), list)
        and len(record["identity"]) == 4
        and all(type(n) is int for n in record["identity"])
        and isinstance(record.get("sha256"), str)
        and type(record.get("read_ns")) is int
        and isinstance(record.get("facts"), dict)
    ):
        return None
    return Remembered(record["identity"], record["sha256"], record["read_ns"], record["facts"])


def recall(path: Path, reader: str) -> Remembered | None:
    """What a full read of the file, as it is now, found; None when there was none (read it in full).

    ``reader`` names how the file is read (its fields, the reader's version): another reader's facts
    never apply. The bytes are digested again only when the file's identity changed, or when it was
    changed so close to its read that its times might not show a later write.
    """
    now = identity(path)
    record = _read_record(_record_path(path, reader)) if now is not None else None
    if now is None or record is None or record.identity[0] != now[0]:  # another size: other bytes
        return None
    racy = now[2] + RACY_NS >= record.read_ns
    if record.identity == now and not racy:
        return record
    read_ns = time.time_ns()
    try:
        if file_digest(path) != record.sha256 or identity(path) != now:
            return None
    except OSError:
        return None
    fresh = Remembered(now, record.sha256, read_ns, record.facts)
    remember(path, reader, fresh)
    return fresh


def remember(path: Path, reader: str, found: Remembered) -> None:
    """Keep what a full read of the file found; a cache that cannot be written only means the next
    start reads the file again."""
    record = {"path": str(path), **asdict(found)}
    try:
        atomic_write_text(_record_path(path, reader), json.dumps(record, ensure_ascii=False))
    except (OSError, ValueError):
        pass
