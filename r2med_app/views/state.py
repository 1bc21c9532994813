"""The view: everything a page shows is decided by one ``View`` in the session, mirrored in the URL.

Widgets are seeded from it and write back to it, so a value survives page switches (Streamlit
forgets the state of widgets a page does not draw), and a copied address restores the same view.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from types import MappingProxyType, UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints
from urllib.parse import urlencode

import streamlit as st

from r2med_core.judging.list_judging import SaveOnce
from r2med_core.systems import rewritten_name

DEFAULT_SYSTEMS: tuple[str, ...] = ("bm25", "minilm")


#: The demo task the app opens on: clinical-case, where BM25 misses 8 of 12 questions for lack of a
#: diagnosis (the most telling failures; tests/test_verdicts.py keeps this true of the demo data).
DEMO_TASK = "clinical-case"


#: ``field(metadata=URL)`` puts a ``View`` field in the URL (every other field stays in the session only),
#: read back by its declared type (``_parse``); ``ALWAYS`` writes it even at its default, so a reload never
#: guesses.
URL: Mapping[str, bool] = MappingProxyType({"url": True, "always": False})
ALWAYS: Mapping[str, bool] = MappingProxyType({"url": True, "always": True})


@dataclass
class View:
    """Everything a deep link restores. Field names are the URL parameter names; only the fields declared
    with ``metadata=URL`` (or ``ALWAYS``) are put in and read from the URL, the rest are the session's."""

    source: str = field(default="demo", metadata=ALWAYS)
    task: str = field(default=DEMO_TASK, metadata=ALWAYS)
    folder: str = field(default="", metadata=URL)
    systems: list[str] = field(default_factory=lambda: list(DEFAULT_SYSTEMS), metadata=ALWAYS)
    extra: list[str] = field(default_factory=list, metadata=URL)  # dense models the user typed in
    rewrite: str = field(default="", metadata=URL)  # "hyde:<llm>" when a rewrite is switched on, else ""
    system: str = field(default="", metadata=URL)  # the explorer's system
    q: str = field(default="", metadata=URL)  # the explorer's query
    # the explorer's filters: nDCG@10 = 0 only, a gold document missed, text search
    fail: bool = field(default=False, metadata=URL)
    missed: bool = field(default=False, metadata=URL)
    search: str = field(default="", metadata=URL)
    depth: int = field(default=10, metadata=URL)  # the explorer's "Show top"
    # the failure diagnosis's answer oracle ("" = r2med_core.analysis.diagnosis.DEFAULT_ORACLE)
    oracle: str = field(default="", metadata=URL)
    diag: list[str] = field(default_factory=list, metadata=URL)  # the explorer's failure-class filter ([] = all)
    # None: not chosen yet (defaults apply); []: the user removed them all
    compare: list[str] | None = field(default=None, metadata=URL)
    ask: str = field(default="", metadata=URL)  # the what-if page's typed query
    ask_systems: list[str] = field(default_factory=list, metadata=URL)  # … and the systems it is run through
    ask_hyde: bool = field(default=False, metadata=URL)  # … rewritten with HyDE by the live LLM
    rerank: str = field(default="", metadata=URL)  # cross-encoder preset or model id ("" = no reranking)
    rerank_k: int = field(default=10, metadata=URL)
    marks: bool = field(default=False, metadata=URL)  # Judging: highlight the query's words (off: they can prime)
    annotator: str = ""  # kept for the session, never put in the URL
    flash: str = ""  # a confirmation to show once after a rerun
    flash_error: str = ""  # … or why an action failed (what the user typed is kept)
    source_error: str = ""  # why the data source did not load, shown in the main area too
    # the live LLM: an endpoint the operator named ("local", or NAME of R2MED_LLM_ENDPOINTS) and its model are
    # part of the address; a typed base URL and key stay in the session, never in the URL
    llm: str = field(default="", metadata=URL)
    llm_url: str = ""
    llm_model: str = field(default="", metadata=URL)
    llm_key: str = ""  # typed in a password field; never logged, cached or put in a URL
    llm_temperature: float = 0.0
    llm_max_tokens: int = 10240  # the benchmark's budget (PROTOCOL: live generation)

    @classmethod
    def from_params(cls, params: Any) -> View:
        """The view a URL asks for (``params``: anything with ``get_all``, like ``st.query_params``).

        Every value is untrusted: one its field's type refuses (``depth=abc``, a 5000-digit number, NaN)
        leaves the field at its default; unknown parameters are ignored; a repeated parameter of a
        single value counts its last value, as ``st.query_params`` reads it."""
        view = cls()
        for name, kind in _url_fields(cls).items():
            values = [str(v) for v in params.get_all(name)]
            if not values or (not _is_list(kind) and not values[-1]):
                continue  # absent, or "name=": the default (an empty list parameter is an empty list)
            try:
                setattr(view, name, _parse(kind, values))
            except ValueError:
                continue
        return view

    def to_params(self) -> dict[str, Any]:
        """The URL parameters of this view: each URL field that differs from its default (or is always
        written), as text; an optional list emptied by the user is written ``name=`` (not "the default")."""
        defaults = type(self)()
        params: dict[str, Any] = {}
        for f in fields(self):
            value, default = getattr(self, f.name), getattr(defaults, f.name)
            if not f.metadata.get("url") or value is None or (f.name == "task" and self.source == "local"):
                continue
            if isinstance(value, (list, tuple)):
                if value:
                    if list(value) != list(default or ()) or f.metadata["always"] or default is None:
                        params[f.name] = [str(v) for v in value]
                elif default is None:
                    params[f.name] = [""]
            elif (value != default or f.metadata["always"]) and value != "":
                params[f.name] = _text(value)
        return params


_TRUE = ("1", "true", "yes", "on")
_COUNT = re.compile(r"[0-9]{1,9}")  # a count: ASCII digits only ("²".isdigit() is True), never huge
_DECIMAL = re.compile(r"[-+]?(?:[0-9]{1,15}(?:\.[0-9]{0,15})?|\.[0-9]{1,15})(?:[eE][-+]?[0-9]{1,3})?")


def _is_list(kind: Any) -> bool:
    return get_origin(_unwrap(kind)) in (list, tuple)


def _unwrap(kind: Any) -> Any:
    """``X | None`` → ``X`` (None is the default's business, never a URL value)."""
    if get_origin(kind) in (Union, UnionType):
        args = [arg for arg in get_args(kind) if arg is not type(None)]
        if len(args) != 1:
            raise TypeError(f"a URL field must be one type or None, not {kind}")
        return args[0]
    return kind


def _parse(kind: Any, values: list[str]) -> Any:
    """URL text → the field's declared type; ValueError for a value that type refuses."""
    kind = _unwrap(kind)
    if get_origin(kind) in (list, tuple):
        kept = [v for v in values if v]
        return kept if get_origin(kind) is list else tuple(kept)
    value = values[-1]
    if kind is str:
        return value
    if kind is bool:
        return value.strip().lower() in _TRUE
    if kind is int and _COUNT.fullmatch(value.strip()):
        return int(value)
    if kind is float and _DECIMAL.fullmatch(value.strip()) and math.isfinite(number := float(value)):
        return number
    raise ValueError(f"{value[:40]!r} is not a {kind.__name__}")


def _text(value: Any) -> str:
    """A value as the URL writes it (``_parse`` reads it back): ``1``/``0`` for a bool."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(value) if isinstance(value, float) else str(value)


_SUPPORTED = (str, bool, int, float, list[str], tuple[str, ...])


@cache
def _url_fields(cls: type[View]) -> dict[str, Any]:
    """The URL fields of a view class and their declared types (checked: a type the URL cannot carry
    is a programming error, raised on first use, not a value silently read as text)."""
    hints = get_type_hints(cls)
    out = {f.name: hints[f.name] for f in fields(cls) if f.metadata.get("url")}
    for name, kind in out.items():
        if _unwrap(kind) not in _SUPPORTED:
            raise TypeError(f"View.{name}: a URL field cannot be a {kind}")
    return out


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
