"""Long work on a page: the core's compute workbench (``r2med_core.compute.workbench``) asked once per
thing a page shows, and the state it answers drawn by one renderer, ``compute_panel``.

Whether a run may be computed now, needs a click or has a background job is the workbench's decision
(the operator's settings, secrets included; LLM requests only after a click); a page asks here and draws
what it gets: the value, or the panel (the Compute button with its cost, a job's live progress and
Cancel, or what went wrong with the button that tries again). The values pages read of a computed run
(intervals, provenance, the query table, a point-wise reranker's reasons) are cached here once per run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.errors import StreamlitDuplicateElementId, StreamlitDuplicateElementKey

from r2med_app.views.bars import bar
from r2med_app.views.datasets import dataset_key
from r2med_app.views.markup import md
from r2med_app.views.naming import system_label
from r2med_app.views.serving import settings
from r2med_app.views.state import view
from r2med_core import Dataset, Results, Run
from r2med_core.analysis.explore import query_table, shorten
from r2med_core.compute.jobs import JobStatus
from r2med_core.compute.workbench import MEMO_SIZE, Failed, Memo, NeedsClick, Ready, Running, State, Workbench
from r2med_core.imported_runs import kept_provenance
from r2med_core.intervals import Interval
from r2med_core.progress import Progress, format_seconds
from r2med_core.reporting.provenance import Provenance, ProvenanceError, run_provenance
from r2med_core.systems import Explanations, SpecError, system_explanations

T = TypeVar("T")


@st.cache_resource(show_spinner=False)
def _memo() -> Memo:
    """Runs, results and rerankings kept in memory for every session of this server (the disk cache keeps
    them too); a new server (or ``st.cache_resource.clear()``) starts empty."""
    return Memo(MEMO_SIZE)


def bench() -> Workbench:
    """The workbench under this server's settings (environment, then secrets) and memory."""
    return Workbench(settings(), memo=_memo())


def ready(dataset: Dataset, system: str) -> bool:
    """Whether the system's run can be shown without a click (``Workbench.ready``); False when it cannot run."""
    try:
        return bench().ready(dataset, system)
    except Exception:  # a broken name or model: ``results`` says why where it is asked for
        return False


def ask(
    label: str, question: Callable[[Progress], State[T]], slot: DeltaGenerator | None = None, waiting: str = ""
) -> T | None:
    """Ask the workbench ``question`` (its ``Progress`` drawn as a bar while cheap work runs): the value
    when ready, else None after drawing where the work stands (``compute_panel``).

    ``waiting``: said at once, before the question is asked (deciding whether work is cheap may load a
    model for seconds, and meanwhile the page would show what it showed before). ``slot``: where that and
    the bar go (an ``st.empty()`` the page then draws its body into: Streamlit replaces by position, so
    they take the old body's place at once instead of sitting above it, greyed), else a place of their own."""
    holder = slot if slot is not None else st.empty()
    if waiting:
        holder.info(waiting)
    try:
        found = question(bar(holder, label))
    finally:
        holder.empty()
    if isinstance(found, Ready):
        return found.value
    compute_panel(found)
    return None


def waiting(dataset: Dataset, system: str) -> str:
    """What a page says at once while it asks for a system's run: nothing when it is in memory."""
    return "" if bench().in_memory(dataset, system) else f"Getting {md(system_label(system))} ready on this task …"


def results(dataset: Dataset, system: str, slot: DeltaGenerator | None = None) -> tuple[Run, Results] | None:
    """The system's run and results, or None after drawing where they stand (``ask``; ``slot`` as there)."""
    label, said = system_label(system), waiting(dataset, system)
    return ask(label, lambda progress: bench().results(dataset, system, progress=progress), slot, said)


def run(dataset: Dataset, system: str) -> Run | None:
    """The system's run, or None after drawing where it stands (``results``)."""
    found = results(dataset, system)
    return None if found is None else found[0]


def reranked(dataset: Dataset, system: str) -> Run | None:
    """The system's run reranked by the cross-encoder the view names, or None (none chosen; the run not
    ready, whose own panel is the page's; not ready itself or off here: drawn)."""
    v = view()
    if not v.rerank or not ready(dataset, system):
        return None
    model, k = v.rerank, v.rerank_k
    return ask(f"Reranking with {model}", lambda progress: bench().rerank(dataset, system, model, k, progress=progress))


def compute_panel(state: State[Any], *, key: str | None = None) -> None:
    """Where a piece of work stands, drawn the one way every page draws it: nothing (ready, no button to
    run it again), the job's live progress and Cancel, or a box with what went wrong, what it costs and
    the button that starts it (``key``: the button's widget key, else one made from the work's name).

    The job belongs to the server, not the session: every visitor who opens the same work sees the same
    progress. The button and the progress each have their own place and the one not shown is an
    ``st.empty()``: the browser keeps a container's children when another takes its place until the run
    ends, so progress drawn in the button's place left a dead Compute button on screen meanwhile."""
    try:
        if isinstance(state, Running):
            st.empty()  # the button's place
            job_progress(state.key)
            return
        offer = state.again if isinstance(state, Ready) else state.retry if isinstance(state, Failed) else state
        if offer is None:
            if isinstance(state, Failed):
                (st.warning if state.expected else st.error)(md(state.message))
            return
        with st.container(border=True):
            if isinstance(state, Failed):
                st.error(md(state.message))
            if offer.headline:
                st.markdown(f"**{md(offer.label)}** {md(offer.headline)}")
            if offer.cancelling:
                st.caption("Cancelling… the finished part is kept; the next start resumes from there.")
            for note in offer.notes:
                st.caption(md(note))
            if st.button(button_words(offer), key=key or offer.handle, type="primary"):
                bench().start(offer)  # a job still being cancelled is not joined: a new one resumes
                st.rerun()  # one control at a time: the next run shows the progress, not this button
        st.empty()  # the progress's place
    except (StreamlitDuplicateElementKey, StreamlitDuplicateElementId):
        pass  # the same work's panel is already on this page


def button_words(offer: NeedsClick) -> str:
    """ "Rerank with bge-reranker (≈ 3 min 05 s) (resumes where it stopped)": the code's words, the escaped
    name, the estimate, and whether an earlier job's finished part is kept."""
    words = offer.action + (f" {md(offer.subject)}" if offer.subject else "")
    if offer.seconds is not None:
        words += f" (≈ {format_seconds(offer.seconds)})"
    return words + (" (resumes where it stopped)" if offer.resumes else "")


@st.fragment(run_every=1.0)
def job_progress(key: tuple) -> None:
    """A background job's progress (documents/s and ETA when it encodes), redrawn every second on its
    own; when the job ends the whole page reruns and shows the result."""
    status = bench().status(key)
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
        if status.state != "cancelling" and st.button("Cancel", key=f"cancel:{'|'.join(map(str, key))}"):
            bench().cancel(key)
            st.rerun(scope="fragment")


def status_facts(status: JobStatus) -> list[str]:
    """Elapsed time, documents done, speed and an ETA that counts down ("estimating" until measured)."""
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


# --------------------------------------------------------------------------- what pages read of a computed run


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


@st.cache_data(show_spinner=False, max_entries=256)
def _intervals(key: str, system: str, means: tuple, metrics: tuple[str, ...], _results_value: Results) -> dict:
    return _results_value.intervals(metrics)


def get_intervals(dataset: Dataset, results: Results, metrics: Sequence[str]) -> dict[str, Interval | None]:
    """Each metric's 95 % bootstrap interval (seeded: the same on every visit). The means are part of the
    key, so a run recomputed under the same name never shows a stale interval."""
    means = tuple(sorted(results.means.items()))
    return _intervals(dataset_key(dataset), results.run_name, means, tuple(metrics), results)


def explanations(dataset: Dataset, system: str, query_id: str) -> Explanations | None:
    """A system's per-document reasons for a query (a point-wise LLM reranking's), from the cache only."""
    try:
        return system_explanations(dataset, system, query_id)
    except SpecError:
        return None
