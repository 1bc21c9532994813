"""The sidebar every page shares: data source and task, systems in play, rewriting, live LLM, reranker."""

from __future__ import annotations

import streamlit as st

from r2med_app.views import datasets, live, naming, serving
from r2med_app.views.markup import md
from r2med_app.views.panels import runs
from r2med_app.views.state import View, bound, store, switch_task, view
from r2med_core import DEMO_TASKS, TASKS, DataError, Dataset
from r2med_core.hub import DownloadError, cached_task
from r2med_core.llm import local_server
from r2med_core.llm.endpoints import LOCAL, named_endpoints
from r2med_core.retrieval.dense import PRESETS
from r2med_core.retrieval.rerank import RERANKER_PRESETS
from r2med_core.retrieval.static import STATIC_PRESETS, cost_and_quality
from r2med_core.server.access import model_refusal, vet_link_systems
from r2med_core.server.roots import NOT_ALLOWED, allowed_folder
from r2med_core.systems import default_rewrite, llm_reranker_choices, rewrite_words

SOURCES = {"demo": "Demo (embedded)", "local": "Local folder", "hf": "Hugging Face hub"}
BASE_SYSTEMS: tuple[str, ...] = (
    "bm25",
    "bm25s",
    "bm25-okapi",
    "bm25q",
    "bm25s-mteb",
    "minilm",
    "rrf(bm25,minilm)",
    "static:minilm",
    "rrf(bm25,static:minilm)",
    *tuple(name for name in PRESETS if name != "minilm"),
    *tuple(f"static:{name}" for name in STATIC_PRESETS if name != "minilm"),
)


def sidebar() -> Dataset | None:
    """Data source, task, systems in play and the rewrite switch; returns the loaded dataset."""
    v = view()
    with st.sidebar:
        st.header("Data")
        sources = [s for s in SOURCES if s != "local"] if serving.read_only() else list(SOURCES)
        st.radio(
            "Source",
            sources,
            format_func=SOURCES.get,
            key=bound("source", sources),
            on_change=store("source"),
            horizontal=True,
        )
        dataset = _sidebar_dataset(v)
        if dataset is None:
            return None
        st.header("Systems")
        _vet_link(v, runs.offered(dataset))
        options = list(dict.fromkeys([*BASE_SYSTEMS, *runs.offered(dataset), *v.extra]))
        st.multiselect(
            "Systems in play",
            options,
            format_func=naming.system_label,
            key=bound("systems", options),
            on_change=store("systems"),
            help=f"Every page compares these. Indexes are cached on disk. {md(cost_and_quality())}.",
        )
        with st.expander("Add a model or a fusion" if not serving.read_only() else "Add a fusion"):
            if not serving.read_only():
                _add_model_field()
                _add_llm_reranking(v)
            plain = [s for s in v.systems if not s.startswith("rrf(")]
            if st.button(
                "Add RRF fusion of the selected systems",
                disabled=len(plain) < 2,
                key="w_add_fusion",
                help="Reciprocal-rank fusion (k=60) of every selected system that is not itself a fusion.",
            ):
                _add_system(f"rrf({','.join(plain)})")
        runs.runs_section(dataset)
        _sidebar_rewrite(v, dataset)
    return dataset


def _add_model_field() -> None:
    """A dense model by id or path: only a preset or one the operator allows (R2MED_ALLOW_MODELS)."""
    typed = st.text_input(
        "sentence-transformers model id or local path",
        key="w_new_model",
        placeholder="e.g. BAAI/bge-small-en-v1.5 or /models/my-encoder",
        help="Presets and the models the server's operator allows (R2MED_ALLOW_MODELS).",
    )
    if st.button("Add model", disabled=not typed.strip(), key="w_add_model"):
        model = typed.strip()
        reason = model_refusal("dense", model, serving.settings())
        if reason:
            st.error(f"Not added: {md(reason)}.")
        else:
            _add_system(f"dense:{model}")


def _add_llm_reranking(v: View) -> None:
    """An LLM reranking of a system in play, on this server's LLM endpoint: added as a system; its
    estimate, cost and Compute button show where its numbers would be (nothing is sent before the click)."""
    if not v.systems:
        return
    st.markdown("**LLM reranking** (this server's LLM endpoint)")
    base = st.selectbox("First stage", v.systems, format_func=naming.system_label, key="w_llmrr_base")
    model = st.text_input(
        "LLM model", value=v.llm_model, key="w_llmrr_model", placeholder="the model name the endpoint serves"
    )
    depth = st.number_input("Passages reranked (top k)", 2, 100, 10, key="w_llmrr_k")
    choices = llm_reranker_choices(base, model.strip(), int(depth)) if model.strip() else {}
    if not choices:
        st.caption("Name the model the endpoint serves (e.g. smollm2-135m for the local server).")
        return
    chosen = st.radio("Method", list(choices), format_func=choices.get, key="w_llmrr_method")
    if st.button("Add LLM reranking", key="w_add_llmrr", help="Its estimate and a Compute button appear on the pages"):
        _add_system(chosen)


def _vet_link(v: View, imported: list[str]) -> None:
    """Models and fusions named by a link run only if allowed (r2med_core.server.access); the rest are dropped
    and listed in a note that stays for the session."""
    settings = serving.settings()
    offered = [*BASE_SYSTEMS, *imported]
    named = [*v.extra, *(s for s in v.systems if s not in offered and s not in v.extra)]
    vetted = vet_link_systems(named, settings, offered)
    v.extra = [name for name in v.extra if name in vetted.kept] + [name for name in vetted.kept if name not in v.extra]
    notes = vetted.notes
    refused_reranker = model_refusal("reranker", v.rerank, settings) if v.rerank else None
    if refused_reranker:
        notes = [*notes, f"reranker {v.rerank[:80]}: {refused_reranker}"]
        v.rerank = ""
    if notes:
        st.session_state["refused"] = list(dict.fromkeys([*st.session_state.get("refused", []), *notes]))
    if st.session_state.get("refused"):
        st.warning(
            "Not run (named by the link or typed): " + "; ".join(md(n) for n in st.session_state["refused"][:10])
        )


def _add_system(name: str) -> None:
    """Offer a new system and select it (it stays offered for the rest of the session and in the URL)."""
    v = view()
    v.extra = list(dict.fromkeys([*v.extra, name]))
    v.systems = list(dict.fromkeys([*v.systems, name]))
    st.rerun()


def _sidebar_dataset(v: View) -> Dataset | None:
    if v.source == "demo":
        st.selectbox("Demo task", DEMO_TASKS, key=bound("task", DEMO_TASKS, View.task), on_change=switch_task)
    elif v.source == "local":
        if not _sidebar_folder(v):
            return None
    else:
        tasks = list(TASKS)
        st.selectbox("R2MED task", tasks, key=bound("task", tasks), on_change=switch_task)
        task = TASKS[v.task] if v.task in TASKS else next(iter(TASKS.values()))
        if cached_task(task.name) is None:
            st.caption(
                f"{task.hf_id} ({task.n_documents:,} documents) is not in your Hugging Face cache yet. "
                "It is downloaded once; set HF_HUB_OFFLINE=1 to use only what is cached."
            )
            if serving.read_only():
                st.caption("This read-only demo downloads nothing: choose a task that is on the server.")
                return None
            if not st.button(f"Download {task.hf_id}", key="w_download"):
                return None
    v.source_error = ""
    try:
        dataset = datasets.current_dataset()
    except DataError as err:
        v.source_error = "This folder cannot be loaded. Fix these and the app reloads it:\n\n" + "\n".join(
            f"- {md(p)}" for p in err.problems[:20]
        )
    except DownloadError as err:
        v.source_error = md(err)
    if v.source_error:
        st.error(v.source_error)  # the main area shows it too (streamlit_app.py), where the user looks
        return None
    st.caption(f"{len(dataset.queries)} queries · {len(dataset.corpus):,} documents")
    return dataset


def _sidebar_folder(v: View) -> bool:
    """Pick a dataset folder found under the operator's data roots, or type one; True when one is chosen
    that may be opened. Anything else gets the one neutral message (``roots.NOT_ALLOWED``)."""
    found = {str(f.path): f.label for f in datasets.dataset_folders()}
    current = v.folder.strip()
    allowed = allowed_folder(current, serving.settings().data_roots) if current else None
    options = list(dict.fromkeys([*found, *([str(allowed)] if allowed else [])]))
    picked = str(allowed) if allowed else None
    if st.session_state.get("w_folder") != picked:
        st.session_state.pop("w_folder", None)  # so the widget starts from the view (a deep link)
    st.selectbox(
        "Dataset folder",
        options,
        format_func=lambda path: found.get(path, path),
        index=options.index(picked) if picked else None,
        key="w_folder",
        on_change=store("folder"),
        placeholder="Choose a dataset folder" if options else "No dataset folders on this server",
    )
    st.text_input(
        "… or a folder path (R2MED or BEIR layout) under the server's data folders",
        key="w_folder_typed",
        on_change=_typed_folder,
        placeholder="/data/R2MED/Biology",
    )
    if current and allowed is None:
        st.error(NOT_ALLOWED)
        return False
    if not current:
        st.info(
            "Choose a folder holding corpus.jsonl, query.jsonl and qrels (R2MED layout) or corpus.jsonl, "
            "queries.jsonl and qrels/test.tsv (BEIR layout). The server's operator decides which folders "
            "are offered (R2MED_DATA_ROOTS)."
        )
        return False
    return True


def _typed_folder() -> None:
    view().folder = st.session_state["w_folder_typed"].strip()
    st.session_state["w_folder_typed"] = ""


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
            help="Adds each system's run on the rewritten queries (a HyDE passage per question), next to the "
            "original. A set marked 'written by hand' is an illustration, not an LLM's output.",
        )
        if on:
            default = default_rewrite(dataset)
            st.selectbox(
                "Rewrite (method:LLM)",
                options,
                format_func=lambda o: rewrite_words(o, dataset),  # the core names it, as every page does
                key=bound("rewrite", options, default),
                on_change=store("rewrite"),
            )
            v.rewrite = st.session_state["w_rewrite"]
        else:
            v.rewrite = ""
    if not serving.read_only():
        _sidebar_llm(v)
    _sidebar_rerank(v)


def _sidebar_llm(v: View) -> None:
    with st.expander("Live LLM endpoint"):
        names = ["", *named_endpoints(serving.settings())]
        if v.llm not in names:
            names.append(v.llm)  # an unknown name from a link: shown, and the note below says so
        st.selectbox(
            "Server",
            names,
            format_func=lambda n: "a base URL typed below" if not n else n,
            key=bound("llm", names),
            on_change=store("llm"),
            help="'local': this machine's own LLM server (`r2med llm-server`, llama.cpp); other names are the "
            "operator's (R2MED_LLM_ENDPOINTS). The chosen name and model are part of the page address.",
        )
        if v.llm == LOCAL and not local_server.installed():
            st.caption(md(local_server.install_hint()))
        if not v.llm:
            st.caption(
                "Any OpenAI-compatible server (OpenAI, Azure, vLLM, Ollama, llama.cpp). The key stays in this "
                "session. The server's own key (if it has one) is sent only to the server's own endpoint: leave "
                "Base URL empty to use it."
            )
            st.text_input(
                "Base URL",
                key=bound("llm_url"),
                on_change=store("llm_url"),
                placeholder="empty: this server's endpoint",
            )
        st.text_input(
            "Model",
            key=bound("llm_model"),
            on_change=store("llm_model"),
            placeholder="the server's own" if v.llm else "e.g. gpt-4o-mini",
        )
        if not v.llm:
            st.text_input(
                "API key",
                type="password",
                key=bound("llm_key"),
                on_change=store("llm_key"),
                help="Leave empty to use the server's own key, which is sent only to the server's own endpoint.",
            )
        c1, c2 = st.columns(2)
        c1.number_input(
            "Temperature", 0.0, 2.0, step=0.1, key=bound("llm_temperature"), on_change=store("llm_temperature")
        )
        c2.number_input(
            "Max tokens",
            32,
            32768,
            step=256,
            key=bound("llm_max_tokens"),
            on_change=store("llm_max_tokens"),
            help="The benchmark's live generation allows 10240 (a reasoning model's answer comes late).",
        )
        resolved = live.live_llm()
        if resolved.endpoint is not None:
            st.caption(f"Key in use: **{resolved.credential_source}** · model **{md(resolved.endpoint.model)}**")
        if resolved.note:
            st.warning(resolved.note)


def _sidebar_rerank(v: View) -> None:
    st.header("Reranking")
    presets = ["", *RERANKER_PRESETS]
    choices = list(dict.fromkeys([*presets, v.rerank]))
    st.selectbox(
        "Cross-encoder over the top k",
        choices,
        format_func=lambda m: "none" if not m else m,
        key=bound("rerank", choices),
        on_change=store("rerank"),
        help="Downloaded from the Hugging Face hub on first use; other cross-encoders only if the server's "
        "operator allows them (R2MED_ALLOW_MODELS).",
    )
    if v.rerank:
        st.radio("k", [10, 100], key=bound("rerank_k", [10, 100]), on_change=store("rerank_k"), horizontal=True)
