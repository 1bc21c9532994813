"""Shared UI for every page: the view state (mirrored in the URL), the sidebar, and cached calls
into r2med_core. Pages import from here and only render.

State lives in one place: ``st.session_state["view"]`` (a ``View``). Widgets are seeded from it
and write back to it, so a value survives page switches (Streamlit forgets the state of widgets
that a page does not draw) and can be written to / read from ``st.query_params`` for deep links.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from r2med_core import DEMO_TASKS, TASKS, DataError, Dataset, Results, Run, evaluate, load_demo, load_dir
from r2med_core.annotations import (
    TAXONOMY,
    Annotation,
    AnnotationStore,
    AnnotationStoreError,
    default_store_path,
)
from r2med_core.explore import shorten
from r2med_core.generation import Endpoint, attach_live_rewrites, live_rewrite_options, live_rewrites
from r2med_core.hub import DownloadError, cached_task, download_task, load_snapshot
from r2med_core.rerank import RERANKER_PRESETS, RerankerUnavailable, rerank
from r2med_core.retrieval.dense import PRESETS
from r2med_core.systems import SpecError, parse_system, run_system

_MEMO_SIZE = 64  # runs kept in memory (a run of a real R2MED task is ~1-2 MB)
SOURCES = {"demo": "Demo (embedded)", "local": "Local folder", "hf": "Hugging Face hub"}
DEFAULT_SYSTEMS: tuple[str, ...] = ("bm25", "minilm")
BASE_SYSTEMS: tuple[str, ...] = (
    "bm25",
    "bm25s",
    "bm25-okapi",
    "minilm",
    "rrf(bm25,minilm)",
    *tuple(name for name in PRESETS if name != "minilm"),
)


@dataclass
class View:
    """Everything a deep link restores. Field names are the URL parameter names."""

    source: str = "demo"
    task: str = DEMO_TASKS[1]
    folder: str = ""
    systems: list[str] = field(default_factory=lambda: list(DEFAULT_SYSTEMS))
    extra: list[str] = field(default_factory=list)  # dense models the user typed in
    rewrite: str = ""  # "hyde:<llm>" when a rewrite is switched on, else ""
    system: str = ""  # the explorer's system
    q: str = ""  # the explorer's query
    compare: list[str] = field(default_factory=list)
    ask: str = ""  # the what-if page's typed query
    rerank: str = ""  # cross-encoder preset or model id ("" = no reranking)
    rerank_k: int = 10
    annotator: str = ""  # kept for the session, never put in the URL
    flash: str = ""  # a confirmation to show once after a rerun
    llm_url: str = ""  # live LLM endpoint: session only, never in the URL
    llm_model: str = ""
    llm_key: str = ""  # typed in a password field; never logged, cached or put in a URL
    llm_temperature: float = 0.0
    llm_max_tokens: int = 512

    _LISTS = ("systems", "extra", "compare")
    _PRIVATE = ("annotator", "flash", "llm_url", "llm_model", "llm_key", "llm_temperature", "llm_max_tokens")

    @classmethod
    def from_params(cls, params: Any) -> View:
        view = cls()
        for name in asdict(view):
            if name in cls._PRIVATE:
                continue
            if name in cls._LISTS:
                values = params.get_all(name)
                if values:
                    setattr(view, name, [v for v in values if v])
            elif params.get(name):
                value = params.get(name)
                if isinstance(getattr(view, name), int):
                    value = int(value) if value.isdigit() else getattr(view, name)
                setattr(view, name, value)
        return view

    def to_params(self) -> dict[str, Any]:
        defaults = View()
        return {
            k: v
            for k, v in asdict(self).items()
            if k not in self._PRIVATE and v != getattr(defaults, k) and v not in ("", [])
        }


def view() -> View:
    """The session's view, created from the URL on the first run of a session."""
    if "view" not in st.session_state:
        st.session_state["view"] = View.from_params(st.query_params)
    return st.session_state["view"]


def sync_url() -> None:
    """Write the view into the URL so a copied address restores it."""
    params = view().to_params()
    current = {
        k: (st.query_params.get_all(k) if isinstance(v, list) else st.query_params.get(k)) for k, v in params.items()
    }
    if current != params or set(st.query_params) != set(params):
        st.query_params.from_dict(params)


def bound(name: str, options: Sequence[Any] | None = None, default: Any = None) -> str:
    """Seed widget ``w_<name>`` from the view, and return its key.

    A value that is not among ``options`` (a stale deep link, another source's task) falls back to
    ``default`` or the first option, and the view is corrected too, so the URL never lies.
    """
    key = f"w_{name}"
    wanted = getattr(view(), name)
    if options is None:
        value = wanted
    elif isinstance(wanted, list):
        value = [v for v in wanted if v in options]
    elif wanted in options:
        value = wanted
    else:
        value = default if default in options else (options[0] if options else None)
    setattr(view(), name, value)
    if st.session_state.get(key) != value:
        st.session_state[key] = value
    return key


def store(name: str) -> Callable[[], None]:
    """An on_change callback copying widget ``w_<name>`` into the view."""

    def callback() -> None:
        setattr(view(), name, st.session_state[f"w_{name}"])

    return callback


def system_label(name: str) -> str:
    try:
        return parse_system(name).label
    except SpecError:
        return name


# --------------------------------------------------------------------------- cached core calls


def _folder_signature(folder: str) -> tuple:
    """Sizes and times of the files a load reads, so an edited folder is reloaded."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        return ()
    return tuple(sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*.js*") if p.is_file()))


@st.cache_resource(show_spinner=False, max_entries=8)
def _load(source: str, ref: str, signature: tuple) -> Dataset:
    """Load once per server (``signature`` changes when a local folder's files change)."""
    if source == "demo":
        return load_demo(ref)
    if source == "local":
        return load_dir(ref)
    task, folder = signature
    return load_snapshot(task, folder)


def dataset_key(dataset: Dataset) -> str:
    return f"{dataset.source}|{dataset.fingerprint}|{dataset.content_digest}"


def _progress_callback(label: str, holder: Any) -> Callable[[float, str], None]:
    """A callback drawing an st.progress bar in ``holder`` (created outside any cached function,
    so a cache hit never replays a stale bar); nothing is drawn unless work actually starts."""

    def progress(fraction: float, message: str) -> None:
        holder.progress(fraction, text=message or label)

    return progress


@st.cache_resource(show_spinner=False)
def _run_memo() -> OrderedDict[tuple[str, str], Run]:
    """Runs kept in memory for every session of this server (r2med_core keeps them on disk too).

    A plain LRU rather than st.cache_data: computing a run draws a progress bar, and Streamlit
    would replay that bar on every cache hit.
    """
    return OrderedDict()


@st.cache_data(show_spinner=False, max_entries=64)
def _results(key: str, system: str, name: str, _run_value: Run, _qrels: dict) -> Results:
    return evaluate(_run_value, _qrels, dataset_name=name, seconds=_run_value.seconds)


def get_run(dataset: Dataset, system: str) -> Run:
    """The system's run on the dataset, with a progress bar while indexes are built or encoded."""
    memo, key = _run_memo(), (dataset_key(dataset), system)
    if key in memo:
        memo.move_to_end(key)
        return memo[key]
    holder = st.empty()
    try:
        run = run_system(dataset, system, progress=_progress_callback(system_label(system), holder))
    finally:
        holder.empty()
    memo[key] = run
    while len(memo) > _MEMO_SIZE:
        memo.popitem(last=False)
    return run


def get_results(dataset: Dataset, system: str) -> Results:
    return _results(dataset_key(dataset), system, dataset.name, get_run(dataset, system), dataset.qrels)


def safe_results(dataset: Dataset, system: str) -> tuple[Run, Results] | None:
    """Run and evaluate, or show what went wrong (e.g. a model that needs a download) and return None."""
    try:
        return get_run(dataset, system), get_results(dataset, system)
    except SpecError as err:
        st.error(md(err))
    except Exception as err:
        st.error(
            f"{md(system_label(system))} could not run: {type(err).__name__}: {md(err)}. "
            "Models other than the offline MiniLM are downloaded from the Hugging Face hub on first use."
        )
    return None


# --------------------------------------------------------------------------- sidebar


def sidebar() -> Dataset | None:
    """Data source, task, systems in play and the rewrite switch; returns the loaded dataset."""
    v = view()
    with st.sidebar:
        st.header("Data")
        st.radio(
            "Source",
            list(SOURCES),
            format_func=SOURCES.get,
            key=bound("source", list(SOURCES)),
            on_change=store("source"),
            horizontal=True,
        )
        dataset = _sidebar_dataset(v)
        if dataset is None:
            return None
        st.header("Systems")
        options = list(dict.fromkeys([*BASE_SYSTEMS, *v.extra]))
        st.multiselect(
            "Systems in play",
            options,
            format_func=system_label,
            key=bound("systems", options),
            on_change=store("systems"),
            help="Every page compares these. Indexes are cached on disk.",
        )
        with st.expander("Add a model or a fusion"):
            typed = st.text_input(
                "sentence-transformers model id or local path",
                key="w_new_model",
                placeholder="e.g. BAAI/bge-small-en-v1.5 or /models/my-encoder",
            )
            if st.button("Add model", disabled=not typed.strip(), key="w_add_model"):
                _add_system(f"dense:{typed.strip()}")
            plain = [s for s in v.systems if not s.startswith("rrf(")]
            if st.button(
                "Add RRF fusion of the selected systems",
                disabled=len(plain) < 2,
                key="w_add_fusion",
                help="Reciprocal-rank fusion (k=60) of every selected system that is not itself a fusion.",
            ):
                _add_system(f"rrf({','.join(plain)})")
        _sidebar_rewrite(v, dataset)
    return dataset


def _add_system(name: str) -> None:
    """Offer a new system and select it (it stays offered for the rest of the session and in the URL)."""
    v = view()
    v.extra = list(dict.fromkeys([*v.extra, name]))
    v.systems = list(dict.fromkeys([*v.systems, name]))
    st.rerun()


def _sidebar_dataset(v: View) -> Dataset | None:
    if v.source == "demo":
        st.selectbox("Demo task", DEMO_TASKS, key=bound("task", DEMO_TASKS, View.task), on_change=store("task"))
    elif v.source == "local":
        st.text_input(
            "Folder (R2MED or BEIR layout)",
            key=bound("folder"),
            on_change=store("folder"),
            placeholder="/data/R2MED/Biology",
        )
        if not v.folder.strip():
            st.info(
                "Type the path of a folder holding corpus.jsonl, query.jsonl and qrels (R2MED layout) "
                "or corpus.jsonl, queries.jsonl and qrels/test.tsv (BEIR layout)."
            )
            return None
    else:
        tasks = list(TASKS)
        st.selectbox("R2MED task", tasks, key=bound("task", tasks), on_change=store("task"))
        task = TASKS[v.task] if v.task in TASKS else next(iter(TASKS.values()))
        if cached_task(task.name) is None:
            st.caption(
                f"{task.hf_id} ({task.n_documents:,} documents) is not in your Hugging Face cache yet. "
                "It is downloaded once; set HF_HUB_OFFLINE=1 to use only what is cached."
            )
            if not st.button(f"Download {task.hf_id}", key="w_download"):
                return None
    try:
        dataset = current_dataset()
    except DataError as err:
        st.error(
            "This folder cannot be loaded. Fix these and the app reloads it:\n\n"
            + "\n".join(f"- {md(p)}" for p in err.problems[:20])
        )
        return None
    except DownloadError as err:
        st.error(md(err))
        return None
    st.caption(f"{len(dataset.queries)} queries · {len(dataset.corpus):,} documents")
    return dataset


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
    """The dataset the view names (a cache hit after the sidebar loaded it)."""
    v = view()
    if v.source == "demo":
        return _load("demo", v.task if v.task in DEMO_TASKS else DEMO_TASKS[0], ())
    if v.source == "local":
        folder = v.folder.strip()
        return _load("local", folder, _folder_signature(folder))
    task = v.task if v.task in TASKS else next(iter(TASKS))
    folder = cached_task(task)
    if folder is None:  # the download draws its progress outside any cached function
        holder = st.empty()
        try:
            folder = download_task(task, progress=_progress_callback(f"Downloading R2MED/{task}", holder))
        finally:
            holder.empty()
    return _load("hf", task, (task, str(folder)))


def _sidebar_rewrite(v: View, dataset: Dataset) -> None:
    st.header("Query rewriting")
    options = [f"{m}:{llm}" for m, llm in dataset.rewrite_options()]
    if not options:
        st.caption(
            "No rewrites yet: the dataset has no precomputed <method>/<llm>/query_with_hydoc.jsonl. "
            "Generate some on the Rewriting page with a live LLM."
        )
        v.rewrite = ""
    else:
        on = st.toggle(
            "HyDE / rewrite on",
            value=bool(v.rewrite),
            key="w_rewrite_on",
            help="Adds each system's run on the LLM-rewritten queries, next to the original.",
        )
        if on:
            default = next((o for o in options if o.startswith("hyde:")), options[0])
            live = {f"{m}:{llm}" for m, llm in live_rewrite_options(dataset)}
            st.selectbox(
                "Rewrite (method:LLM)",
                options,
                format_func=lambda o: f"{o} (live)" if o in live else o,
                key=bound("rewrite", options, default),
                on_change=store("rewrite"),
            )
            v.rewrite = st.session_state["w_rewrite"]
        else:
            v.rewrite = ""
    with st.expander("Live LLM endpoint"):
        st.caption(
            "Any OpenAI-compatible server (OpenAI, Azure, vLLM, Ollama, llama.cpp). The key stays in this session."
        )
        st.text_input(
            "Base URL",
            key=bound("llm_url"),
            on_change=store("llm_url"),
            placeholder=os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
        )
        st.text_input("Model", key=bound("llm_model"), on_change=store("llm_model"), placeholder="e.g. gpt-4o-mini")
        st.text_input(
            "API key",
            type="password",
            key=bound("llm_key"),
            on_change=store("llm_key"),
            help="Or set OPENAI_API_KEY (environment or .streamlit/secrets.toml).",
        )
        c1, c2 = st.columns(2)
        c1.number_input(
            "Temperature", 0.0, 2.0, step=0.1, key=bound("llm_temperature"), on_change=store("llm_temperature")
        )
        c2.number_input("Max tokens", 32, 4096, step=32, key=bound("llm_max_tokens"), on_change=store("llm_max_tokens"))
        if _env_key() and not v.llm_key:
            st.caption("Using the OPENAI_API_KEY from the environment / secrets.")
    st.header("Reranking")
    presets = ["", *RERANKER_PRESETS]
    choices = list(dict.fromkeys([*presets, v.rerank]))
    st.selectbox(
        "Cross-encoder over the top k",
        choices,
        format_func=lambda m: "none" if not m else m,
        key=bound("rerank", choices),
        on_change=store("rerank"),
        help="Downloaded from the Hugging Face hub on first use; any cross-encoder id works in the URL (rerank=…).",
    )
    if v.rerank:
        st.radio("k", [10, 100], key=bound("rerank_k", [10, 100]), on_change=store("rerank_k"), horizontal=True)


def _env_key() -> str | None:
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        return key
    try:
        return st.secrets.get("OPENAI_API_KEY")
    except Exception:
        return None


def live_endpoint() -> Endpoint | None:
    """The live endpoint the user configured (model required), or None."""
    v = view()
    if not v.llm_model.strip():
        return None
    return Endpoint(
        base_url=v.llm_url.strip() or os.environ.get("OPENAI_BASE_URL") or None,
        model=v.llm_model.strip(),
        api_key=v.llm_key or _env_key(),
        temperature=float(v.llm_temperature),
        max_tokens=int(v.llm_max_tokens),
        timeout=60.0,
    )


@st.cache_resource(show_spinner=False)
def _rerank_memo() -> OrderedDict[tuple[str, str, str, int], Run]:
    return OrderedDict()


def get_reranked(dataset: Dataset, system: str) -> Run | None:
    """The system's run reranked by the chosen cross-encoder, or None (not chosen, or not available here)."""
    v = view()
    if not v.rerank:
        return None
    key = (dataset_key(dataset), system, v.rerank, v.rerank_k)
    memo = _rerank_memo()
    if key not in memo:
        holder = st.empty()
        try:
            memo[key] = rerank(
                get_run(dataset, system),
                dataset,
                v.rerank,
                v.rerank_k,
                progress=_progress_callback(f"Reranking with {v.rerank}", holder),
            )
        except RerankerUnavailable as err:
            st.warning(f"Reranking is off: {md(err)}")
            return None
        finally:
            holder.empty()
        while len(memo) > _MEMO_SIZE:
            memo.popitem(last=False)
    return memo[key]


def systems_in_play(include_rewrites: bool = True) -> list[str]:
    """The selected systems, plus their rewritten variants when a rewrite is on."""
    v = view()
    out = list(v.systems)
    if include_rewrites and v.rewrite:
        out += [str(parse_system(s).with_rewrite(tuple(v.rewrite.split(":", 1)))) for s in v.systems]
    return out


def explorer_link(query_id: str, system: str) -> str:
    """A relative URL opening the explorer on one query (the view's other settings kept)."""
    from urllib.parse import urlencode

    params = view().to_params()
    params.update({"q": query_id, "system": system})
    return "explorer?" + urlencode(params, doseq=True)


@st.cache_resource(show_spinner=False)
def _store(path: str) -> AnnotationStore:
    return AnnotationStore(path)


def annotation_store() -> AnnotationStore | None:
    """The annotation database ($R2MED_DATA_HOME or the user data folder), opened once per server.

    A file that is not a usable store is reported and left untouched; the rest of the app works on.
    """
    try:
        return _store(str(default_store_path()))
    except AnnotationStoreError as err:
        st.error(f"Annotations are unavailable: {md(err)}")
        return None


def demo_banner(dataset: Dataset) -> None:
    if dataset.is_demo:
        notice = dataset.meta.get("notice", "Illustrative demo data written for R2MED Explorer.")
        st.info(f"**Demo data.** {md(notice)}", icon="ℹ️")


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


_STYLE = """<style>
.r2-text { line-height: 1.55; font-size: 0.95rem; max-height: 24rem; overflow-y: auto; }
.r2-text mark { background: #fde68a; color: inherit; padding: 0 2px; border-radius: 3px; }
</style>"""


def style() -> None:
    """Styles for highlighted document text (a fixed string: nothing from a dataset goes in here)."""
    st.html(_STYLE)


def label_form(dataset: Dataset, query_id: str, system: str, documents: list[str]) -> None:
    """Label this query, or one of its documents, with a failure type (stored at once, never lost)."""
    v = view()
    store = annotation_store()
    if store is None:
        return
    codes = list(TAXONOMY)
    whole = "(the whole query)"
    if v.flash:
        st.success(v.flash)
        v.flash = ""
    with st.form(f"label_{query_id}", clear_on_submit=True):
        st.markdown("**Label a failure**")
        c1, c2 = st.columns(2)
        code = c1.selectbox(
            "Failure type", codes, format_func=lambda c: TAXONOMY[c].label, help=_taxonomy_help(), key="w_label_type"
        )
        target = c2.selectbox("Document", [whole, *documents], key="w_label_doc")
        note = st.text_area("Note", placeholder="What went wrong? (free text)", key="w_label_note")
        name = st.text_input("Your name", value=v.annotator, key="w_label_annotator")
        if not st.form_submit_button("Save label"):
            return
    v.annotator = name.strip()
    try:
        store.add(
            Annotation(
                dataset=dataset.source,
                task=dataset.name,
                query_id=query_id,
                doc_id=None if target == whole else target,
                system=system,
                failure_type=code,
                note=note,
                annotator=v.annotator,
            )
        )
    except ValueError as err:
        st.error(f"Not saved: {md(err)}")
        return
    v.flash = f"Saved: {TAXONOMY[code].label}" + ("" if target == whole else f" on {md(target)}")
    st.rerun()  # so every panel shows the new label


def _taxonomy_help() -> str:
    return "\n".join(f"- **{t.label}**: {t.description}" for t in TAXONOMY.values())


def labels_for(dataset: Dataset, query_id: str) -> list[Annotation]:
    store = annotation_store()
    return [] if store is None else store.list(dataset=dataset.source, task=dataset.name, query_id=query_id)


def label_tags(labels: list[Annotation], doc_id: str | None) -> str:
    """A short "🏷 type (annotator)" summary of the labels on one document (or the query itself)."""
    mine = [a for a in labels if a.doc_id == doc_id]
    return " · ".join(
        f"🏷 {TAXONOMY[a.failure_type].label if a.failure_type in TAXONOMY else a.failure_type}" for a in mine
    )


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


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def md(text: object) -> str:
    """Text from a dataset, a file or a user, escaped for Streamlit's markdown (labels, titles,
    captions), so ids and names show as written and can never add formatting or links."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", str(text))
