"""Local dataset folders a visitor may open: only under the operator's data roots.

A folder typed in the app or named in a link (``?source=local&folder=…``) is resolved (``~``,
``..``, symlinks) and must lie inside one of ``Settings.data_roots``, and so must every file a load
would read from it (a symlinked ``corpus.jsonl`` cannot point elsewhere). Anything else gets one
neutral message that does not say whether the path exists. Discovery lists dataset folders under
the roots, bounded in depth and count, so no input ever walks the whole disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from r2med_core.tasks import REWRITE_METHODS

#: The one message for a folder that may not be opened, whatever the reason (outside, missing, escaping).
NOT_ALLOWED = (
    "This folder cannot be opened here. Local datasets open only from the folders the server's operator "
    "lists (R2MED_DATA_ROOTS); choose one of the dataset folders offered."
)

#: Discovery bounds: how deep under a root, how many datasets, how many folders looked at in all.
MAX_DEPTH = 3
MAX_DATASETS = 200
MAX_VISITED = 5000

_LAYOUT_FILES = (
    "corpus.jsonl",
    "query.jsonl",
    "queries.jsonl",
    "qrels.jsonl",
    "qrels.txt",
    "qrels.tsv",
    "metadata.json",
    "qrels/test.tsv",
)


def _resolved_roots(roots: Iterable[Path]) -> list[Path]:
    out = []
    for root in roots:
        try:
            resolved = Path(root).expanduser().resolve()
        except (OSError, RuntimeError, ValueError):
            continue
        if resolved.is_dir():
            out.append(resolved)
    return out


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def dataset_files(folder: Path) -> list[Path]:
    """The files a load of ``folder`` reads (layout files and ``<method>/<llm>/query_with_hydoc.jsonl``),
    found without walking below two levels."""
    files = [folder / name for name in _LAYOUT_FILES]
    for method in REWRITE_METHODS:
        method_dir = folder / method
        if method_dir.is_dir():
            files += [llm / "query_with_hydoc.jsonl" for llm in sorted(method_dir.iterdir()) if llm.is_dir()]
    return [f for f in files if f.is_file()]


def allowed_folder(folder: str, roots: Iterable[Path]) -> Path | None:
    """The resolved folder when it is a folder inside a root and none of its dataset files escape one;
    else None (callers show ``NOT_ALLOWED``, which never says which check failed)."""
    text = folder.strip()
    if not text or "\x00" in text:
        return None
    allowed = _resolved_roots(roots)
    try:
        path = Path(text).expanduser()
        if not path.is_absolute():
            return None  # relative to what? the server's working directory is not the visitor's business
        resolved = path.resolve()
        if not _inside(resolved, allowed) or not resolved.is_dir():
            return None
        if not all(_inside(f.resolve(), allowed) for f in dataset_files(resolved)):
            return None
    except (OSError, RuntimeError, ValueError):
        return None
    return resolved


def folder_signature(folder: Path) -> tuple:
    """Sizes and times of the files a load reads, so an edited folder is reloaded (bounded: no walk)."""
    out = []
    for path in dataset_files(folder):
        try:
            stat = path.stat()
        except OSError:
            continue
        out.append((str(path), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(out))


@dataclass(frozen=True)
class DatasetFolder:
    """A dataset folder found under a root; ``label`` is what a visitor sees (root name + relative path)."""

    path: Path
    label: str


def discover(
    roots: Iterable[Path], max_depth: int = MAX_DEPTH, max_datasets: int = MAX_DATASETS
) -> list[DatasetFolder]:
    """Folders holding a dataset (``corpus.jsonl`` and queries) under the roots, breadth first, at most
    ``max_depth`` levels down and ``max_datasets`` found; symlinks are not followed."""
    found: list[DatasetFolder] = []
    visited = 0
    for root in _resolved_roots(roots):
        level = [root]
        for _ in range(max_depth + 1):
            following: list[Path] = []
            for folder in level:
                visited += 1
                if visited > MAX_VISITED or len(found) >= max_datasets:
                    return found
                if (folder / "corpus.jsonl").is_file() and (
                    (folder / "query.jsonl").is_file() or (folder / "queries.jsonl").is_file()
                ):
                    relative = folder.relative_to(root)
                    label = root.name + ("" if str(relative) == "." else f"/{relative.as_posix()}")
                    found.append(DatasetFolder(folder, label))
                try:
                    with os.scandir(folder) as entries:
                        following += sorted(
                            Path(e.path)
                            for e in entries
                            if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
                        )
                except OSError:
                    continue
            level = following
    return found
