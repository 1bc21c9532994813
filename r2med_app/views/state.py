"""The view: everything a page shows is decided by one ``View`` in the session, mirrored in the URL.

Widgets are seeded from it and write back to it, so a value survives page switches (Streamlit
forgets the state of widgets a page does not draw), and a copied address restores the same view.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlencode

import streamlit as st

from r2med_core.judging.list_judging import SaveOnce
from r2med_core.systems import rewritten_name

DEFAULT_SYSTEMS: tuple[str, ...] = ("bm25", "minilm")


#: The demo task the app opens on: clinical-case, where BM25 misses 8 of 12 questions for lack of a
#: diagnosis (the most telling failures; tests/test_verdicts.py keeps this true of the demo data).
DEMO_TASK = "clinical-case"


@dataclass
class View:
    """Everything a deep link restores. Field names are the URL parameter names."""

    source: str = "demo"
    task: str = DEMO_TASK
    folder: str = ""
    systems: list[str] = field(default_factory=lambda: list(DEFAULT_SYSTEMS))
    extra: list[str] = field(default_factory=list)  # dense models the user typed in
    rewrite: str = ""  # "hyde:<llm>" when a rewrite is switched on, else ""
    system: str = ""  # the explorer's system
    q: str = ""  # the explorer's query
    fail: bool = False  # the explorer's filters: nDCG@10 = 0 only, a gold document missed, text search
    missed: bool = False
    search: str = ""
    depth: int = 10  # the explorer's "Show top"
    oracle: str = ""  # the failure diagnosis's answer oracle ("" = r2med_core.analysis.diagnosis.DEFAULT_ORACLE)
    diag: list[str] = field(default_factory=list)  # the explorer's failure-class filter ([] = every query)
    compare: list[str] | None = None  # None: not chosen yet (defaults apply); []: the user removed them all
    ask: str = ""  # the what-if page's typed query
    ask_systems: list[str] = field(default_factory=list)  # … and the systems it is run through
    rerank: str = ""  # cross-encoder preset or model id ("" = no reranking)
    rerank_k: int = 10
    annotator: str = ""  # kept for the session, never put in the URL
    flash: str = ""  # a confirmation to show once after a rerun
    flash_error: str = ""  # … or why an action failed (what the user typed is kept)
    source_error: str = ""  # why the data source did not load, shown in the main area too
    llm_url: str = ""  # live LLM endpoint: session only, never in the URL
    llm_model: str = ""
    llm_key: str = ""  # typed in a password field; never logged, cached or put in a URL
    llm_temperature: float = 0.0
    llm_max_tokens: int = 10240  # the benchmark's budget (PROTOCOL: live generation)

    _LISTS = ("systems", "extra", "compare", "ask_systems", "diag")
    _PRIVATE = (
        "annotator",
        "flash",
        "flash_error",
        "source_error",
        "llm_url",
        "llm_model",
        "llm_key",
        "llm_temperature",
        "llm_max_tokens",
    )
    _ALWAYS = ("source", "task", "systems")  # written even at their defaults, so a reload never guesses

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
                if isinstance(getattr(view, name), bool):
                    value = value.strip().lower() in ("1", "true", "yes", "on")
                elif isinstance(getattr(view, name), int):
                    value = int(value) if value.isdigit() else getattr(view, name)
                setattr(view, name, value)
        return view

    def to_params(self) -> dict[str, Any]:
        defaults = View()
        params: dict[str, Any] = {}
        for k, v in asdict(self).items():
            if k in self._PRIVATE or v is None or (k == "task" and self.source == "local"):
                continue
            if k == "compare" and v == []:
                params[k] = [""]  # "compare=": the user removed every system (not "use the defaults")
            elif isinstance(v, bool):
                if v:
                    params[k] = "1"
            elif (v != getattr(defaults, k) or k in self._ALWAYS) and v not in ("", []):
                params[k] = v
        return params


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


def scope(*parts: object) -> str:
    """A short stable tag for what a widget's options depend on (a dataset, a query): widgets keyed
    with it are new widgets when that changes, so a stale selection can never be shown or saved."""
    return hashlib.sha1("\x1f".join(map(str, parts)).encode()).hexdigest()[:10]


def widget_key(name: str, within: str = "") -> str:
    return f"w_{name}.{within}" if within else f"w_{name}"


def bound(name: str, options: Sequence[Any] | None = None, default: Any = None, within: str = "") -> str:
    """Seed widget ``w_<name>`` (``w_<name>.<within>`` with a ``scope``) from the view, and return its key.

    A value that is not among ``options`` (a stale deep link, another source's task) falls back to
    ``default`` or the first option, and the view is corrected too, so the URL never lies.
    """
    key = widget_key(name, within)
    wanted = getattr(view(), name)
    if options is None:
        value = wanted
    elif isinstance(wanted, list) or (wanted is None and isinstance(default, list)):
        value = [v for v in (wanted if wanted is not None else default) if v in options]
    elif wanted in options:
        value = wanted
    else:
        value = default if default in options else (options[0] if options else None)
    setattr(view(), name, value)
    # Set every run, not only when it differs: a widget with the same key on another page (another widget
    # id) would otherwise start from its default instead of the view's value.
    st.session_state[key] = value
    return key


def store(name: str, within: str = "") -> Callable[[], None]:
    """An on_change callback copying widget ``w_<name>`` (or its scoped key) into the view."""

    def callback() -> None:
        setattr(view(), name, st.session_state[widget_key(name, within)])

    return callback


def switch_task() -> None:
    """on_change of a task picker: the new task, and no selected query (an id of the old task names
    another question, or none, in the new one), so the explorer opens on its query table."""
    v = view()
    v.task = st.session_state[widget_key("task")]
    v.q = ""


def show_flash() -> None:
    """Show, once, the confirmation or the failure an action (a button callback) left in the view."""
    v = view()
    if v.flash:
        st.success(v.flash)
        v.flash = ""
    if v.flash_error:
        st.error(v.flash_error)
        v.flash_error = ""


def systems_in_play(include_rewrites: bool = True) -> list[str]:
    """The selected systems, plus their rewritten variants when a rewrite is on."""
    v = view()
    out = list(v.systems)
    if include_rewrites and v.rewrite:
        out += [rewritten_name(s, v.rewrite) for s in v.systems]
    return list(dict.fromkeys(out))  # an imported run has no rewritten variant: it is listed once


def explorer_link(query_id: str, system: str) -> str:
    """A relative URL opening the explorer on one query (the view's other settings kept)."""
    params = view().to_params()
    params.update({"q": query_id, "system": system})
    return "explorer?" + urlencode(params, doseq=True)


def save_once() -> SaveOnce:
    """The session's ``list_judging.SaveOnce``: grade events already handled, so each is saved once."""
    if "list_judging_events" not in st.session_state:
        st.session_state["list_judging_events"] = SaveOnce()
    return st.session_state["list_judging_events"]
