"""The dataset the view names, loaded once per server: the embedded demo, a folder inside the operator's
data roots, or an R2MED task from the hub (downloaded with progress, never in the read-only demo), with the
live LLM generations recorded for it attached as extra rewrites. ``dataset_key`` (the core workbench's) is the one key
every per-dataset cache in the app uses, so an edited folder or a new rewrite is never served stale.
"""

from __future__ import annotations

import gc
from pathlib import Path

import streamlit as st

from r2med_app.views.bars import with_progress
from r2med_app.views.serving import read_only, settings
from r2med_app.views.state import view
from r2med_core import DEMO_TASKS, TASKS, DataError, Dataset, load_demo, load_dir
from r2med_core.compute.workbench import dataset_key
from r2med_core.data import Problem
from r2med_core.hub import DownloadError, cached_task, download_task, load_snapshot
from r2med_core.llm.generation import attach_live_rewrites, live_rewrite_options, live_rewrites
from r2med_core.server.roots import NOT_ALLOWED, DatasetFolder, allowed_folder, discover, folder_signature


def _folder_signature(folder: Path) -> tuple:
    """Sizes and times of the files a load reads, so an edited folder is reloaded (no disk walk)."""
    return folder_signature(folder)


@st.cache_resource(show_spinner="Loading the dataset (once per server) …", max_entries=8)
def _load(source: str, ref: str, signature: tuple) -> Dataset:
    """Load once per server (``signature`` changes when a local folder's files change).

    What is loaded then lives as long as the server, so it is moved out of the cyclic garbage
    collector's reach (``gc.freeze``): otherwise every full collection walks it again, which showed
    as 0.5–1 s pauses on random reruns once a real-size task was open.
    """
    if source == "demo":
        dataset = load_demo(ref)
    elif source == "local":
        dataset = load_dir(ref)
    else:
        task, folder = signature
        dataset = load_snapshot(task, folder)
    gc.collect()
    gc.freeze()
    return dataset


def current_dataset() -> Dataset:
    """The dataset the view names, with any live LLM generations recorded for it as extra rewrites."""
    base = base_dataset()
    recorded = tuple(live_rewrite_options(base))
    if not recorded:
        return base
    return _with_live(dataset_key(base), recorded, _live_signature(base, recorded), base)


def _live_signature(dataset: Dataset, recorded: tuple[tuple[str, str], ...]) -> tuple:
    return tuple(len(live_rewrites(dataset, method, llm) or {}) for method, llm in recorded)


@st.cache_resource(show_spinner=False, max_entries=16)
def _with_live(key: str, recorded: tuple, signature: tuple, _base: Dataset) -> Dataset:
    return attach_live_rewrites(_base, recorded)[0]


def base_dataset() -> Dataset:
    """The dataset the view names (a cache hit after the sidebar loaded it). A local folder opens
    only inside the operator's data roots (``r2med_core.server.roots``); otherwise a neutral DataError."""
    v = view()
    if v.source == "demo":
        return _load("demo", v.task if v.task in DEMO_TASKS else DEMO_TASKS[0], ())
    if v.source == "local":
        folder = allowed_folder(v.folder, settings().data_roots) if not read_only() else None
        if folder is None:
            raise DataError([Problem("folder", None, NOT_ALLOWED)])
        return _load("local", str(folder), _folder_signature(folder))
    task = v.task if v.task in TASKS else next(iter(TASKS))
    folder = cached_task(task)
    if folder is None:
        if read_only():
            raise DownloadError(f"R2MED/{task} is not on this server, and this read-only demo downloads nothing.")
        folder = with_progress(f"Downloading R2MED/{task}", lambda progress: download_task(task, progress=progress))
    return _load("hf", task, (task, str(folder)))


@st.cache_data(show_spinner=False, ttl=60, max_entries=4)
def _discovered(roots: tuple[str, ...]) -> list[DatasetFolder]:
    return discover(Path(r) for r in roots)


def dataset_folders() -> list[DatasetFolder]:
    """Dataset folders under the operator's data roots (looked for at most once a minute, bounded)."""
    return _discovered(tuple(str(r) for r in settings().data_roots))
