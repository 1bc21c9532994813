"""Downloading R2MED tasks from the Hugging Face hub into the user's HF cache.

This is the exact library call a user makes online (``huggingface_hub.snapshot_download``); with
``HF_HUB_OFFLINE=1`` the same call serves a previously downloaded (or pre-filled) cache.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from r2med_core.data import Dataset, load_r2med_dir
from r2med_core.progress import Progress, notify
from r2med_core.tasks import REWRITE_METHODS, get_task

#: The files of a task folder on the hub: the dataset itself and every rewrite output.
HUB_PATTERNS: tuple[str, ...] = (
    "corpus.jsonl",
    "query.jsonl",
    "qrels.jsonl",
    "metadata.json",
    *tuple(f"{method}/*/query_with_hydoc.jsonl" for method in REWRITE_METHODS),
)


_COMMIT = re.compile(r"[0-9a-f]{40}")


class DownloadError(RuntimeError):
    """The hub could not provide a task (offline, not cached, unknown repository …)."""


def _progress_bar(progress: Progress | None, label: str) -> Any:
    """A tqdm class that also forwards its progress to our callback (the app's st.progress)."""
    from tqdm.auto import tqdm

    class CallbackTqdm(tqdm):
        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            if self.total:
                notify(progress, self.n / self.total, f"{label}: {self.desc or 'downloading'}")
            return shown

    return CallbackTqdm


def _snapshot(hf_id: str, revision: str | None, cache_dir: str | Path | None, **options: Any) -> Path:
    """The one ``snapshot_download`` call of a task's files, online or from the cache only."""
    from huggingface_hub import snapshot_download

    folder = snapshot_download(
        repo_id=hf_id,
        repo_type="dataset",
        revision=revision,
        cache_dir=str(cache_dir) if cache_dir else None,
        allow_patterns=list(HUB_PATTERNS),
        **options,
    )
    return Path(folder)


#: ``main`` (the newest files of every task) or ``Task=commit,Task=commit`` to override the pins.
REVISION_ENV = "R2MED_HF_REVISION"


def task_revision(task: str, override: str | None = None) -> str:
    """The hub revision a task loads: ``override``, else ``$R2MED_HF_REVISION``, else the task's pin
    (MTEB's commit for it). The environment holds ``main`` or ``Task=commit`` pairs, comma-separated."""
    info = get_task(task)
    if override:
        return override
    configured = os.environ.get(REVISION_ENV, "").strip()
    if configured and "=" not in configured:
        return configured
    for pair in filter(None, (part.strip() for part in configured.split(","))):
        name, _, revision = pair.partition("=")
        if name.strip().lower() == info.name.lower() and revision.strip():
            return revision.strip()
    return info.revision


def download_task(
    task: str, *, revision: str | None = None, cache_dir: str | Path | None = None, progress: Progress | None = None
) -> Path:
    """Fetch ``R2MED/<task>`` (repo_type dataset) at its pinned revision (``task_revision``) and
    return the local snapshot folder, whose name is the exact commit."""
    info = get_task(task)
    revision = task_revision(info.name, revision)
    try:
        folder = _snapshot(info.hf_id, revision, cache_dir, tqdm_class=_progress_bar(progress, info.hf_id))
    except Exception as err:
        raise DownloadError(
            f"could not get {info.hf_id} from the Hugging Face hub ({type(err).__name__}: {err}). "
            "Without internet, download it on a connected machine (python -m r2med_core download "
            f"--task {info.name}) and copy the HF cache, or load a local folder instead."
        ) from None
    notify(progress, 1.0, f"{info.hf_id}: downloaded")
    return folder


def cached_task(task: str, *, revision: str | None = None, cache_dir: str | Path | None = None) -> Path | None:
    """The local snapshot of a task if it is already in the HF cache (no network), else None."""
    info = get_task(task)
    try:
        folder = _snapshot(info.hf_id, task_revision(info.name, revision), cache_dir, local_files_only=True)
    except Exception:  # "not cached" comes in several exception types
        return None
    return folder if (folder / "corpus.jsonl").is_file() else None


def load_hf(
    task: str, *, revision: str | None = None, cache_dir: str | Path | None = None, progress: Progress | None = None
) -> Dataset:
    """Download (or reuse the cached copy of) a task and load it."""
    folder = download_task(task, revision=revision, cache_dir=cache_dir, progress=progress)
    return load_snapshot(task, folder)


def load_snapshot(task: str, folder: str | Path) -> Dataset:
    """Load a downloaded snapshot folder of a task (named and sourced as the hub task)."""
    info = get_task(task)
    dataset = load_r2med_dir(folder, name=info.name, source=f"hf:{info.hf_id}")
    commit = Path(folder).name  # huggingface_hub's …/snapshots/<commit>/
    return replace(dataset, revision=commit) if _COMMIT.fullmatch(commit) else dataset


class ModelUnavailable(RuntimeError):
    """A model is neither a local folder, nor in the HF cache, nor reachable on the hub."""


def check_model_reachable(model_id: str) -> None:
    """Fail in about a second, with a clear message, when a model cannot be had.

    Loading libraries retry a missing hub for over a minute before giving up; one small request
    (a model's config.json) tells the same thing at once. Local folders and cached models pass.
    """
    if Path(model_id).expanduser().exists():
        return
    model_snapshot(model_id, ("config.json",))


def model_snapshot(model_id: str, patterns: tuple[str, ...]) -> Path:
    """A hub model's files matching ``patterns``: from the HF cache first (``HF_HUB_OFFLINE=1`` uses only
    it), else downloaded; ``ModelUnavailable`` with a clear message when neither works."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(model_id, allow_patterns=list(patterns), local_files_only=True))
    except Exception:
        pass
    try:
        return Path(snapshot_download(model_id, allow_patterns=list(patterns)))
    except Exception as err:
        cause = " ".join(str(err).split())[:160]
        raise ModelUnavailable(
            f"{model_id} is not downloaded and the Hugging Face hub cannot be reached ({type(err).__name__}: "
            f"{cause}). Run once with network access (the model is kept in the HF cache) or use a local folder."
        ) from None
