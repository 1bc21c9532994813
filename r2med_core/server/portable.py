"""Moving cache entries between machines: embeddings made on a GPU box, browsed on a laptop.

``export_entries`` packs entries (each folder with its manifest) into a tar.gz. ``import_entries``
trusts nothing in the archive: only regular files at ``KIND/ENTRY/…`` with plain names are read
(no absolute paths, ``..``, links or devices), nothing is written outside a staging folder inside
the cache, and an entry is moved into place only when its manifest's digests match its files and
its folder name is the fingerprint of the key its manifest records — so a renamed or edited entry
can never serve another system's data. Which cache kinds travel, the system kinds and model roles
declare (``r2med_core.kinds.roles.cache_kinds``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from r2med_core.cache import MANIFEST, cache_root, fingerprint, is_intact, make_kind_folder
from r2med_core.kinds.roles import cache_kinds

_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]*$")
MAX_IMPORT_BYTES = 64 * 1024**3


class ArchiveError(ValueError):
    """An archive that cannot be imported; the message names the member and the reason."""


@dataclass
class ImportReport:
    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already present
    rejected: list[str] = field(default_factory=list)  # "kind/entry: why"


def entries(kinds: Iterable[str] | None = None, corpus: str | None = None) -> list[Path]:
    """Intact entries of these cache kinds, by default every kind that travels (``kinds.roles.cache_kinds``:
    runs, indexes, embeddings, reranker scores); only those built on ``corpus``, a fingerprint, when given."""
    found = []
    for kind in cache_kinds() if kinds is None else kinds:
        for folder in sorted((cache_root() / kind).glob("*")):
            if folder.name.startswith(".") or not folder.is_dir() or not is_intact(folder):
                continue
            if corpus is not None:
                key = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("key", {})
                if not isinstance(key, dict) or key.get("corpus") != corpus:
                    continue
            found.append(folder)
    return found


def export_entries(folders: Iterable[Path], archive: Path) -> int:
    """Write the entries to ``archive`` (tar.gz) as ``KIND/ENTRY/FILE``; returns how many."""
    root = cache_root()
    count = 0
    archive.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=archive.parent, prefix=f".{archive.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for folder in folders:
                for path in sorted(folder.rglob("*")):
                    if path.is_file():
                        tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False)
                count += 1
        os.replace(tmp, archive)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return count


def _member_parts(member: tarfile.TarInfo) -> tuple[str, ...]:
    """The checked path parts of an archive member, or ArchiveError."""
    name = member.name
    parts = PurePosixPath(name).parts
    if name.startswith("/") or "\\" in name or len(parts) < 3:
        raise ArchiveError(f"{name!r}: not KIND/ENTRY/FILE")
    if any(p in ("", ".", "..") or not _PLAIN.match(p) for p in parts):
        raise ArchiveError(f"{name!r}: unexpected characters in the path")
    travelling = cache_kinds()
    if parts[0] not in travelling:
        raise ArchiveError(f"{name!r}: unknown entry kind {parts[0]!r} (expected one of {', '.join(travelling)})")
    if not member.isfile():
        raise ArchiveError(f"{name!r}: not a regular file (links and devices are never extracted)")
    return parts


def import_entries(archive: Path, max_bytes: int = MAX_IMPORT_BYTES) -> ImportReport:
    """Add the archive's entries to the cache (checked one by one; a bad entry is rejected, not fatal)."""
    report = ImportReport()
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root, prefix=".import-"))
    try:
        try:
            tar = tarfile.open(archive, "r:*")
        except (OSError, tarfile.TarError) as err:
            raise ArchiveError(f"{archive}: not a readable tar archive ({err})") from None
        total = 0
        with tar:
            for member in tar:
                if member.isdir():
                    continue
                parts = _member_parts(member)
                total += member.size
                if total > max_bytes:
                    raise ArchiveError(f"{archive}: larger than {max_bytes / 1024**3:.0f} GiB unpacked; refused")
                target = staging.joinpath(*parts)
                source = tar.extractfile(member)
                if source is None:
                    raise ArchiveError(f"{member.name!r}: cannot be read")
                target.parent.mkdir(parents=True, exist_ok=True)
                with source, target.open("wb") as out:
                    shutil.copyfileobj(source, out)
        for kind_dir in sorted(p for p in staging.iterdir() if p.is_dir()):
            for entry in sorted(p for p in kind_dir.iterdir() if p.is_dir()):
                _install(kind_dir.name, entry, root, report)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return report


def _install(kind: str, entry: Path, root: Path, report: ImportReport) -> None:
    label = f"{kind}/{entry.name}"
    try:
        manifest = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
        key = manifest["key"]
        listed = set(manifest["files"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        report.rejected.append(f"{label}: no readable manifest")
        return
    if fingerprint(kind, key) != entry.name:
        report.rejected.append(f"{label}: the folder name does not match the key in its manifest")
        return
    present = {str(p.relative_to(entry).as_posix()) for p in entry.rglob("*") if p.is_file() and p.name != MANIFEST}
    if present != listed or not is_intact(entry):
        report.rejected.append(f"{label}: files differ from the manifest (damaged or edited)")
        return
    final = root / kind / entry.name
    if final.is_dir() and is_intact(final):
        report.skipped.append(label)
        return
    make_kind_folder(final.parent)
    if final.exists():
        shutil.rmtree(final, ignore_errors=True)
    os.replace(entry, final)
    report.added.append(label)
