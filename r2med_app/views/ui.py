"""The app's compute glue: runs, results, intervals, provenance and reranked runs kept in memory for every
session, whether a system may be shown now, and the Compute button or a background job's progress when it
may not. Pages import from here and only render; the rest of the shared view code is one concern a file
beside it (``markup``, ``look``, ``charts``, ``routes``, ``serving``, ``live``, ``datasets``, ``summaries``,
``naming``, ``notices``, ``annotation_db``), the view state in ``state.py``.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.errors import StreamlitDuplicateElementId, StreamlitDuplicateElementKey

from r2med_app.views.datasets import dataset_key
from r2med_app.views.markup import md
from r2med_app.views.naming import system_label
from r2med_app.views.serving import settings
from r2med_app.views.state import view
from r2med_core import Dataset, Results, Run, evaluate
from r2med_core.analysis.explore import query_table, shorten
from r2med_core.cache import entry_path, fingerprint
from r2med_core.compute.jobs import (
    REGISTRY,
    JobStatus,
    estimate_seconds,
    format_seconds,
    rerank_seconds,
    run_job_key,
    start_run,
)
from r2med_core.hub import ModelUnavailable
from r2med_core.imported_runs import kept_provenance
from r2med_core.intervals import Interval
from r2med_core.progress import Progress
from r2med_core.reporting.provenance import Provenance, ProvenanceError, run_provenance
from r2med_core.retrieval.rerank import RerankerUnavailable, rerank, rerank_key
from r2med_core.systems import (
    Explanations,
    SpecError,
    cost_notes,
    needs_click,
    run_system,
    system_explanations,
)

T = TypeVar("T")


_MEMO_SIZE = 64  # runs kept in memory (a run of a real R2MED task is ~1-2 MB)


def with_progress(label: str, work: Callable[[Progress], T]) -> T:
    """Run long work with an st.progress bar, drawn outside any cached function (Streamlit would
    replay a bar drawn inside one on every cache hit); the bar goes away when the work ends. It is drawn
    before the work starts (a model may take seconds to load before its first report), so the page says
    at once what is being computed."""
    holder = st.empty()
    holder.progress(0.0, text=f"Computing {label} …")
    try:
        return work(lambda fraction, message: holder.progress(fraction, text=message or label))
    finally:
        holder.empty()


@st.cache_resource(show_spinner=False)
def _memo() -> OrderedDict[tuple, Any]:
    """Runs and reranked runs kept in memory for every session of this server (r2med_core keeps
    them on disk too): a plain LRU rather than st.cache_data, because computing them draws progress."""
    return OrderedDict()


def _remembered(key: tuple, compute: Callable[[], T]) -> T:
    memo = _memo()
    if key in memo:
        memo.move_to_end(key)
    else:
        memo[key] = compute()
        while len(memo) > _MEMO_SIZE:
            memo.popitem(last=False)
    return memo[key]


@st.cache_data(show_spinner=False, max_entries=64)
def _results(key: str, system: str, name: str, _run_value: Run, _qrels: dict) -> Results:
    return evaluate(_run_value, _qrels, dataset_name=name, seconds=_run_value.seconds)


def get_run(dataset: Dataset, system: str) -> Run:
    """The system's run on the dataset, with a progress bar while indexes are built or encoded.

    Pages reach this through ``safe_results``, which first makes sure the work is cached or cheap.
    """
    return _remembered(
        ("run", dataset_key(dataset), system),
        lambda: with_progress(system_label(system), lambda progress: run_system(dataset, system, progress=progress)),
    )


@st.cache_resource(show_spinner=False, max_entries=64)
def _provenance(key: str, system: str, seconds: float | None, usage: str, _dataset: Dataset) -> Provenance:
    kept = kept_provenance(_dataset, system, settings())  # a reopened report's run: where it was made
    if kept is not None:
        try:
            return Provenance.from_json(kept, source=system)
        except ProvenanceError:
            pass  # unreadable: say what is known here instead
    return run_provenance(_dataset, system, wall_seconds=seconds, usage=json.loads(usage))


def get_provenance(dataset: Dataset, system: str, run: Run) -> Provenance:
    """Where the system's numbers come from (data, models, rewrites, code, machine, tokens), once per run."""
    usage = json.dumps(list(run.usage), sort_keys=True)  # part of the key: a remade run may cost otherwise
    return _provenance(dataset_key(dataset), system, run.seconds, usage, dataset)


@st.cache_resource(show_spinner=False, max_entries=32)
def _query_table(key: str, system: str, _dataset: Dataset, _results: Results, _run: Run) -> pd.DataFrame:
    return query_table(_dataset, _results, _run)


def get_query_table(dataset: Dataset, system: str, results: Results, run: Run) -> pd.DataFrame:
    """The explorer's table of every judged query, built once per dataset and system (not per rerun)."""
    return _query_table(dataset_key(dataset), system, dataset, results, run)


def get_results(dataset: Dataset, system: str) -> Results:
    return _results(dataset_key(dataset), system, dataset.name, get_run(dataset, system), dataset.qrels)


@st.cache_data(show_spinner=False, max_entries=256)
def _intervals(key: str, system: str, means: tuple, metrics: tuple[str, ...], _results_value: Results) -> dict:
    return _results_value.intervals(metrics)


def get_intervals(dataset: Dataset, results: Results, metrics: Sequence[str]) -> dict[str, Interval | None]:
    """Each metric's 95 % bootstrap interval for a computed system (seeded: the same on every visit). The
    means are part of the key, so a run recomputed under the same name never shows a stale interval."""
    means = tuple(sorted(results.means.items()))
    return _intervals(dataset_key(dataset), results.run_name, means, tuple(metrics), results)


def _in_memory(dataset: Dataset, system: str) -> bool:
    return ("run", dataset_key(dataset), system) in _memo()


def is_ready(dataset: Dataset, system: str) -> bool:
    """True when the run can be shown now: in memory, on disk, or cheap (under the operator's threshold)
    and not already being computed by a background job (whose progress the page shows instead of doing
    the same work a second time: a cached BM25 index makes the rest of a 357k run look cheap).

    A URL may select only such systems; anything longer waits for a click on "Compute".
    """
    if _in_memory(dataset, system):
        return True
    job = REGISTRY.get(run_job_key(dataset, system))
    if job is not None and job.active:
        return False
    if needs_click(dataset, system):  # LLM requests cost the operator money: never without a click
        return False
    return estimate_seconds(dataset, system) <= settings().compute_seconds


def safe_results(dataset: Dataset, system: str, slot: DeltaGenerator | None = None) -> tuple[Run, Results] | None:
    """Run and evaluate, or return None after showing why not: a "Compute (≈ time)" button or the
    progress of the background job for work that is not cached, or what went wrong.

    A system not in memory says so at once: deciding whether it is cheap may load a model for seconds,
    and meanwhile the page would show the previous system's numbers. Given ``slot`` (an ``st.empty()``
    that the page then draws its body into), the message goes there: Streamlit replaces by position, so
    it takes the old body's place at once instead of sitting above it, greyed, until the run ends."""
    waiting = slot if slot is not None else st.empty()
    if not _in_memory(dataset, system):
        waiting.info(f"Getting {md(system_label(system))} ready on this task …")
    try:
        try:
            ready = is_ready(dataset, system)
        finally:
            waiting.empty()
        if not ready:
            compute_panel(dataset, system)
            return None
        return get_run(dataset, system), get_results(dataset, system)
    except SpecError as err:
        st.error(md(err))
    except ModelUnavailable as err:  # its message says what to install, set or download
        st.error(f"{md(system_label(system))} could not run: {md(err)}")
    except Exception as err:
        st.error(
            f"{md(system_label(system))} could not run: {type(err).__name__}: {md(err)}. "
            "Models other than the offline MiniLM are downloaded from the Hugging Face hub on first use."
        )
    return None


def compute_panel(dataset: Dataset, system: str) -> None:
    """The button that starts a system's background job, or the job's live progress and Cancel.

    The job belongs to the server, not the session: every visitor who opens the same system sees
    the same progress, and a finished job's run is in the disk cache for all of them.

    The button and the progress each have their own place, and the one not shown is an ``st.empty()``:
    the browser keeps a container's children when another container takes its place, until that run
    ends. Drawn in the button's place, the progress left the Compute button below it, on screen and
    clickable while the rest of the page was drawn (seconds when the job shares the CPU): it looked like
    the next system's button, and a click on it did nothing. An element in a place drops them at once.
    """
    key = run_job_key(dataset, system)
    job = REGISTRY.get(key)
    label = md(system_label(system))
    try:
        if job is not None and job.active:
            st.empty()  # the button's place
            job_progress(key)
            return
        seconds = estimate_seconds(dataset, system)
        stopped = job is not None and (job.state == "cancelled" or job.cancelling)
        resumed = " (resumes where it stopped)" if stopped else ""
        with st.container(border=True):
            if job is not None and job.state == "failed":
                st.error(f"{label} failed: {md(job.error)}")
            st.markdown(f"**{label}** is not computed on this task yet.")
            if job is not None and job.cancelling:
                st.caption("Cancelling… the finished part is kept; Compute starts again from there.")
            for note in cost_notes(dataset, system):
                st.caption(md(note))
            if st.button(f"Compute (≈ {format_seconds(seconds)}){resumed}", key=f"compute:{system}", type="primary"):
                start_run(dataset, system)  # a job still being cancelled is not joined: a new one resumes
                st.rerun()  # one control at a time: the next run shows the progress, not this button
        st.empty()  # the progress's place
    except (StreamlitDuplicateElementKey, StreamlitDuplicateElementId):
        pass  # the same system's panel is already on this page


@st.fragment(run_every=1.0)
def job_progress(key: tuple) -> None:
    """A background job's progress (documents/s and ETA when it encodes), redrawn every second on its
    own; when the job ends the whole page reruns and shows the result."""
    status = REGISTRY.status(key)
    if status is None:
        return
    if status.finished:
        st.rerun()
    with st.container(border=True):
        if status.state == "cancelling":
            st.markdown(f"**Cancelling {md(status.label)}…** the finished part is kept.")
        else:
            st.markdown(f"**Computing {md(status.label)}** — other pages stay usable meanwhile.")
        st.progress(min(max(status.fraction, 0.0), 1.0), text=shorten(status.message, 120))
        st.caption(" · ".join(status_facts(status)))
        if status.state != "cancelling" and st.button("Cancel", key=f"cancel:{'|'.join(key)}"):
            REGISTRY.cancel(key)
            st.rerun(scope="fragment")


def status_facts(status: JobStatus) -> list[str]:
    """Elapsed time, documents done, speed and an ETA that counts down (or "estimating" until the
    first batch is measured)."""
    facts = [f"{format_seconds(status.elapsed_seconds)} elapsed"]
    if status.done is not None and status.total:
        facts.append(f"{status.done:,} / {status.total:,} documents")
    if status.docs_per_s:
        facts.append(f"{status.docs_per_s:,.1f} documents/s")
    if status.state == "cancelling":
        return facts
    eta = status.eta_seconds
    facts.append(f"about {format_seconds(eta)} left" if eta is not None else "estimating…")
    return facts


def explanations(dataset: Dataset, system: str, query_id: str) -> Explanations | None:
    """A system's per-document reasons for a query (a point-wise LLM reranking's), from the cache only."""
    try:
        return system_explanations(dataset, system, query_id)
    except SpecError:
        return None


def get_reranked(dataset: Dataset, system: str) -> Run | None:
    """The system's run reranked by the chosen cross-encoder, or None (not chosen, or not available
    here: the reason is shown, and remembered so the hub is not asked again on every rerun)."""
    v = view()
    if not v.rerank:
        return None

    def attempt() -> Run | RerankerUnavailable:
        try:
            return with_progress(
                f"Reranking with {v.rerank}",
                lambda progress: rerank(get_run(dataset, system), dataset, v.rerank, v.rerank_k, progress=progress),
            )
        except RerankerUnavailable as err:
            return err

    memo_key = ("rerank", dataset_key(dataset), system, v.rerank, v.rerank_k)
    if memo_key not in _memo() and not _rerank_ready(dataset, system, v.rerank, v.rerank_k):
        return None
    outcome = _remembered(memo_key, attempt)
    if isinstance(outcome, RerankerUnavailable):
        st.warning(f"Reranking is off: {md(outcome)}")
        return None
    return outcome


def _rerank_ready(dataset: Dataset, system: str, model: str, k: int) -> bool:
    """True when a reranking is on disk or cheap; otherwise its Compute button / job progress is shown."""
    if not is_ready(dataset, system):
        return False
    run = get_run(dataset, system)
    try:
        key = rerank_key(run, dataset, model, k)
    except RerankerUnavailable:
        return True  # the attempt explains why reranking is off
    seconds = 0.0 if entry_path("rerank", key).is_dir() else rerank_seconds(len(run.rankings), k)
    if seconds <= settings().compute_seconds:
        return True
    job_key = ("rerank", fingerprint("rerank", key))
    job = REGISTRY.get(job_key)
    if job is not None and job.state == "running":
        job_progress(job_key)
        return False
    if job is not None and job.state == "failed":
        st.error(f"Reranking failed: {md(job.error)}")
    if st.button(f"Rerank with {md(model)} (≈ {format_seconds(seconds)})", key=f"rerank:{system}", type="primary"):
        REGISTRY.start(
            job_key, f"reranking with {model}", lambda job: rerank(run, dataset, model, k, progress=job.progress)
        )
        job_progress(job_key)
    return False
