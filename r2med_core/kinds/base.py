"""The system-kind contract, the registry that finds kinds, and the one cached way a system runs.

A ``SystemSpec`` is a parsed system name; what its ``kind`` means (grammar, label, how it computes a
Run, what its cache key holds, whether it ranks typed text) is answered by the ``SystemKind``
registered under that name. ``parse_system`` asks every registered kind, in ``priority`` order,
whether a name is theirs, so a new kind is one module that defines a subclass and decorates it with
``@register`` (see the package docstring for a walk-through).

Kept here because every kind shares them: the query texts a system retrieves for (the dataset's, or
a precomputed rewrite's, as the benchmark uses them), ``run_system`` (the disk cache around a kind's
``compute``) and ``search_text`` (typed free text).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from r2med_core.cache import cached, entry_path, fingerprint
from r2med_core.data import Dataset
from r2med_core.llm.rewrite import ANSWER_RULES_VERSION, is_reasoning_llm
from r2med_core.progress import Progress, notify
from r2med_core.retrieval.tokenize import ANALYZER_VERSION
from r2med_core.runs import Ranking, Run
from r2med_core.tasks import REWRITE_METHODS

#: Bump when retrieval code changes what a cached run would contain.
RUN_FORMAT_VERSION = 2

#: The cache kind of every stored run (``run_system``), whatever its system.
RUNS_CACHE = "runs"

#: Loading a model before its first batch (for estimates).
MODEL_LOAD_SECONDS = 3.0

#: How deeply ``rrf(...)`` may nest (``rrf(rrf(a,b),c)`` is 2): names come from URLs too.
MAX_FUSION_DEPTH = 3
#: How many kinds may wrap one another in a name (``a>rerank:m@10>rerank:n@5`` is 2 deep).
MAX_WRAPPING = 6

Rewrite = tuple[str, str]
#: A kind's parser gets this to parse the systems inside its own name (members, a base system).
Parse = Callable[[str], "SystemSpec"]


class SpecError(ValueError):
    """A system name that cannot be parsed or run here; the message says what is accepted."""


@dataclass(frozen=True)
class SystemSpec:
    """A parsed system name. ``kind`` names its ``SystemKind``; the other fields mean what that kind
    says: ``name`` (a BM25 engine alias, a dense preset or model id, a run name), ``rewrite`` the
    ``(method, llm)`` of a precomputed rewrite, ``members`` the systems it combines or wraps, and
    ``params`` any further settings of the kind (e.g. a reranker's depth), as sorted pairs."""

    kind: str
    name: str = ""
    rewrite: Rewrite | None = None
    members: tuple[SystemSpec, ...] = ()
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def system_kind(self) -> SystemKind:
        return kind_named(self.kind)

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    def __str__(self) -> str:
        suffix = f"+{self.rewrite[0]}:{self.rewrite[1]}" if self.rewrite else ""
        return self.system_kind.format(self) + suffix

    @property
    def label(self) -> str:
        """A human name for charts and tables."""
        suffix = f" + {self.rewrite[0]} ({self.rewrite[1]})" if self.rewrite else ""
        return self.system_kind.label(self) + suffix

    def with_rewrite(self, rewrite: Rewrite | None) -> SystemSpec:
        """The same system on a (different) rewrite; kinds that combine systems pass it on."""
        return self.system_kind.with_rewrite(self, rewrite)

    @property
    def searches_text(self) -> bool:
        """Whether it ranks typed text (an imported run ranks only the dataset's own queries)."""
        return self.system_kind.searches_text(self)

    @property
    def base(self) -> SystemSpec:
        return self.with_rewrite(None)

    def models(self) -> tuple[tuple[str, str], ...]:
        """The models it would load or ask, as ``(role, model)``; the ``ModelRole`` registered under
        the role (``kinds.roles``: "dense", "reranker", "llm" built in) says whether a server may run it."""
        return self.system_kind.models(self)


@dataclass(frozen=True)
class Explanations:
    """A system's reasons for one query's documents: ``texts[doc]`` is a model's untrusted text
    (escape it before rendering), ``details[doc]`` a short line (its answer and score); ``by`` names
    the model and ``note`` says what the texts are (and whether that is the benchmark's setting)."""

    by: str
    note: str
    texts: dict[str, str]
    details: dict[str, str]


class SystemKind(ABC):
    """One kind of system. Subclass, set the class attributes, implement the four abstract methods,
    decorate with ``@register``; override the others where the defaults (which combine ``members``)
    do not fit."""

    #: The ``SystemSpec.kind`` this class answers for (a short word; it never appears in names).
    name: ClassVar[str]
    #: The accepted form(s), for the message that lists every kind when a name matches none.
    grammar: ClassVar[str]
    #: Parse order, low first: a kind whose grammar could contain another's must come before it
    #: (fusions and wrappers before the plain retrievers, which validate any ``+`` suffix strictly).
    priority: ClassVar[int] = 50
    #: Whether ``run_system`` keeps the computed run in the "runs" disk cache (False when the run is
    #: read from a file, or the kind caches its own costly part).
    stores_run: ClassVar[bool] = True
    #: Whether it can rank typed text (``search``); combined kinds also need every member to.
    typed_text: ClassVar[bool] = False
    #: Whether computing it holds the GIL for most of its time (Python tokenizing): the server's background
    #: jobs of such kinds take turns (``compute.jobs``), since two sharing one process's GIL cost more.
    holds_gil: ClassVar[bool] = False
    #: The disk-cache kinds it makes itself (a BM25 index), besides the stored run and its models'
    #: entries (their roles say): they may travel between machines (``server.portable``).
    cache_kinds: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def parse(self, text: str, parse: Parse) -> SystemSpec | None:
        """The spec when ``text`` is this kind's, None when it is not; ``SpecError`` when it is this
        kind's form but wrong. ``parse`` parses a system named inside this one."""

    @abstractmethod
    def format(self, spec: SystemSpec) -> str:
        """The canonical name (without a ``+METHOD:LLM`` suffix, which ``SystemSpec`` appends)."""

    @abstractmethod
    def label(self, spec: SystemSpec) -> str:
        """The human name (without the rewrite, which ``SystemSpec`` appends)."""

    @abstractmethod
    def compute(self, dataset: Dataset, spec: SystemSpec, k: int, progress: Progress | None) -> Run:
        """The top ``k`` of every query it retrieves for; ``run_system`` caches the result."""

    def key_parts(self, dataset: Dataset, spec: SystemSpec, k: int) -> dict[str, Any]:
        """What the run's cache key holds besides name, k, corpus and queries (whatever else changes
        the run: a model as it runs, a member's key, an imported file's digest)."""
        return {}

    def check(self, dataset: Dataset, spec: SystemSpec) -> None:
        """Fail fast (``SpecError``) when the dataset cannot run it, before any work starts."""
        if spec.rewrite:
            rewritten_texts(dataset, spec.rewrite)
        for member in spec.members:
            member.system_kind.check(dataset, member)

    def with_rewrite(self, spec: SystemSpec, rewrite: Rewrite | None) -> SystemSpec:
        if spec.members:
            return replace(spec, members=tuple(m.with_rewrite(rewrite) for m in spec.members))
        return spec  # a kind that takes no rewrite has no variant on one

    def searches_text(self, spec: SystemSpec) -> bool:
        return self.typed_text and all(m.searches_text for m in spec.members)

    def search(
        self, dataset: Dataset, spec: SystemSpec, text: str, k: int, hy_doc: str | None, progress: Progress | None
    ) -> Ranking:
        """Rank the corpus for typed text (only when ``typed_text``)."""
        raise SpecError(f"{spec.label} cannot search typed text")

    def no_text_reason(self, spec: SystemSpec) -> str:
        """Why it cannot rank typed text (when ``searches_text`` is False)."""
        for member in spec.members:
            if not member.searches_text:
                return member.system_kind.no_text_reason(member)
        return f"{spec.label} cannot search typed text"

    def models(self, spec: SystemSpec) -> tuple[tuple[str, str], ...]:
        return tuple(m for member in spec.members for m in member.models())

    def published_kind(self, spec: SystemSpec) -> str | None:
        """The kind of the paper's metric set that applies ("bm25", "dense", "reranker"), if any."""
        return None

    def differences(self, spec: SystemSpec, dataset_name: str | None) -> list[str]:
        """How it departs from the benchmark's protocol (empty: it is the benchmark's setting)."""
        out: list[str] = []
        for member in spec.members:
            out += [d for d in member.system_kind.differences(member, dataset_name) if d not in out]
        return out

    def estimate_seconds(self, dataset: Dataset, spec: SystemSpec, k: int) -> float:
        """How long computing it would take here when its run is not cached."""
        return sum(estimate_seconds(dataset, m, k) for m in spec.members)

    def asks_llm(self, dataset: Dataset, spec: SystemSpec, k: int) -> bool:
        """Whether computing its run, when it is not on disk, may send requests to an LLM API: such
        work is started only by a click, however cheap it looks (a link never spends the operator's
        key). ``needs_click`` asks this first, then whether the run is on disk."""
        return any(needs_click(dataset, m, max(k, 100)) for m in spec.members)

    def cost_notes(self, dataset: Dataset, spec: SystemSpec, k: int) -> list[str]:
        """What computing it would cost besides time (requests, tokens), shown before the click."""
        return [note for m in spec.members for note in cost_notes(dataset, m, max(k, 100))]

    def explanations(self, dataset: Dataset, spec: SystemSpec, query_id: str) -> Explanations | None:
        """Why it placed a query's documents where it did, per document, when it can say (None)."""
        return None

    def link_refusal(self, spec: SystemSpec, offered: set[str], refuse: Callable[[str], str | None]) -> str | None:
        """Why a link may not name it, given how a plain system is refused (``refuse``); the models it
        loads are vetted separately."""
        for member in spec.members:
            if str(member) not in offered and (reason := refuse(str(member))):
                return reason
        return None


# --------------------------------------------------------------------------- registry

T = TypeVar("T")


class Registry(Generic[T]):
    """One instance of each registered class, by its ``name`` (system kinds here, model roles in
    ``roles``): a second class claiming a name is an error, an unknown name a ``SpecError``."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.found: dict[str, T] = {}

    def add(self, cls: type[T]) -> None:
        name: str = cls.name  # type: ignore[attr-defined]
        existing = self.found.get(name)
        if existing is not None and type(existing).__qualname__ != cls.__qualname__:
            raise ValueError(f"{self.what} {name!r} is registered already ({type(existing).__qualname__})")
        self.found[name] = cls()

    def named(self, name: str) -> T:
        try:
            return self.found[name]
        except KeyError:
            raise SpecError(f"no {self.what} {name!r} is registered") from None


_KINDS: Registry[SystemKind] = Registry("system kind")
K = TypeVar("K", bound=type[SystemKind])


def register(cls: K) -> K:
    """Class decorator: make a kind known to ``parse_system`` (one instance per kind name)."""
    _KINDS.add(cls)
    return cls


def unregister(name: str) -> None:
    """Forget a kind (for tests that register one of their own)."""
    _KINDS.found.pop(name, None)


def registered_kinds() -> list[SystemKind]:
    """Every registered kind, in parse order."""
    return sorted(_KINDS.found.values(), key=lambda kind: (kind.priority, kind.name))


def kind_named(name: str) -> SystemKind:
    return _KINDS.named(name)


def accepted_forms() -> str:
    """Every kind's grammar, for the message of a name that matches none."""
    forms = [kind.grammar for kind in registered_kinds()]
    return "; ".join(forms)


# --------------------------------------------------------------------------- parsing


def split_top_level(text: str, separator: str = ",") -> list[str]:
    """``text`` split at ``separator`` outside parentheses (``rrf(a,b),c`` → ``rrf(a,b)``, ``c``)."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == separator and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += (char == "(") - (char == ")")
        current += char
    parts.append(current)
    return [p.strip() for p in parts]


def rfind_top_level(text: str, marker: str) -> int:
    """The last index of ``marker`` outside parentheses, or -1."""
    depth, found = 0, -1
    for i, char in enumerate(text):
        depth += (char == "(") - (char == ")")
        if depth == 0 and text.startswith(marker, i):
            found = i
    return found


def split_rewrite(text: str) -> tuple[str, Rewrite | None]:
    """``bm25+hyde:gpt4`` → ``("bm25", ("hyde", "gpt4"))``; a malformed suffix is a ``SpecError``."""
    if "+" not in text:
        return text, None
    text, _, suffix = text.rpartition("+")
    method, _, llm = suffix.partition(":")
    if method not in REWRITE_METHODS or not llm:
        raise SpecError(f"rewrite {suffix!r} must be METHOD:LLM with METHOD one of {', '.join(REWRITE_METHODS)}")
    return text, (method, llm)


def _nesting(text: str) -> int:
    deepest = depth = 0
    for char in text:
        depth += (char == "(") - (char == ")")
        deepest = max(deepest, depth)
    return deepest


def parse_system(text: str) -> SystemSpec:
    """Parse a system name; raises ``SpecError`` listing the accepted forms."""
    if _nesting(text.strip()) > MAX_FUSION_DEPTH:
        raise SpecError(f"rrf(...) may nest at most {MAX_FUSION_DEPTH} levels deep")
    return _parse(text, 0)


def _parse(text: str, depth: int) -> SystemSpec:
    text = text.strip()
    if depth > MAX_WRAPPING:
        raise SpecError(f"a system name may combine or wrap systems at most {MAX_WRAPPING} levels deep")
    for kind in registered_kinds():
        spec = kind.parse(text, lambda inner: _parse(inner, depth + 1))
        if spec is not None:
            return spec
    raise SpecError(f"unknown system {text!r}: use {accepted_forms()}")


# --------------------------------------------------------------------------- query texts


def rewritten_texts(dataset: Dataset, rewrite: Rewrite) -> dict[str, str]:
    """The precomputed hypothetical documents of a rewrite; a clear error if the dataset lacks it."""
    if rewrite not in dataset.rewrites:
        available = ", ".join(f"{m}:{llm}" for m, llm in dataset.rewrite_options()) or "none"
        raise SpecError(f"{dataset.name} has no precomputed {rewrite[0]}:{rewrite[1]} rewrite (available: {available})")
    return dataset.rewrites[rewrite]


def retrieved_queries(dataset: Dataset, rewrite: Rewrite | None) -> dict[str, str]:
    """The queries a system retrieves for, with the query text it uses.

    Without a rewrite: every query, as in the query file. With one, as the benchmark: only the
    queries the rewrite file holds (the others are not retrieved, so not evaluated), with the
    file's own ``text`` field as the query text.
    """
    if rewrite is None:
        return dict(dataset.queries)
    hy_docs = rewritten_texts(dataset, rewrite)
    texts = dataset.rewrite_queries.get(rewrite, {})
    return {qid: texts.get(qid, text) for qid, text in dataset.queries.items() if qid in hy_docs}


def queries_left_out(dataset: Dataset, rewrite: Rewrite | None) -> int:
    """How many queries a rewrite leaves out (absent from its file: not retrieved, as in the benchmark)."""
    if rewrite is None or rewrite not in dataset.rewrites:
        return 0
    return len(dataset.queries) - len(retrieved_queries(dataset, rewrite))


# --------------------------------------------------------------------------- running


def run_key(dataset: Dataset, spec: SystemSpec, k: int) -> dict[str, Any]:
    """The disk-cache key of a system's run: its name, k, the data it reads, and its kind's parts."""
    key: dict[str, Any] = {
        "system": str(spec),
        "k": k,
        "corpus": dataset.fingerprint,
        "queries": fingerprint(dataset.queries),
        "version": RUN_FORMAT_VERSION,
        "analyzer": ANALYZER_VERSION,
    }
    if spec.rewrite:
        key["rewrite"] = fingerprint(
            dataset.rewrites.get(spec.rewrite, {}), dataset.rewrite_queries.get(spec.rewrite, {})
        )
        if is_reasoning_llm(spec.rewrite[1]):  # its texts are cut to the answer: the rules make the run
            key["answer_rules"] = ANSWER_RULES_VERSION
    key.update(spec.system_kind.key_parts(dataset, spec, k))
    return key


def scaled(progress: Progress | None, low: float, high: float) -> Progress | None:
    """A callback mapping [0, 1] to [low, high] of the parent's bar."""
    if progress is None:
        return None
    return lambda fraction, message: progress(low + (high - low) * fraction, message)


def _compute(dataset: Dataset, spec: SystemSpec, k: int, progress: Progress | None) -> Run:
    return spec.system_kind.compute(dataset, spec, k, progress)


def run_system(dataset: Dataset, spec: SystemSpec | str, k: int = 100, progress: Progress | None = None) -> Run:
    """Retrieve the top ``k`` for every query; cached on disk by dataset, system and k."""
    spec = parse_system(spec) if isinstance(spec, str) else spec
    kind = spec.system_kind
    kind.check(dataset, spec)
    if not kind.stores_run:
        return kind.compute(dataset, spec, k, progress)
    result: dict[str, Run] = {}

    def build(folder: Path) -> None:
        run = _compute(dataset, spec, k, progress)
        payload = {"name": run.name, "seconds": run.seconds, "rankings": run.rankings, "usage": list(run.usage)}
        (folder / "run.json").write_text(json.dumps(payload), encoding="utf-8")
        result["run"] = run

    def load(folder: Path) -> Run:
        if "run" in result:
            return result["run"]
        payload = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        rankings = {qid: [(doc, float(score)) for doc, score in r] for qid, r in payload["rankings"].items()}
        usage = tuple(u for u in payload.get("usage") or () if isinstance(u, dict))
        return Run(payload["name"], rankings, payload["seconds"], usage)

    return cached(RUNS_CACHE, run_key(dataset, spec, k), build, load)


def is_computed(dataset: Dataset, system: SystemSpec | str, k: int = 100) -> bool:
    """True when the system's run on this dataset is in the disk cache (loading it is cheap)."""
    spec = parse_system(system) if isinstance(system, str) else system
    return (entry_path(RUNS_CACHE, run_key(dataset, spec, k)) / "manifest.json").is_file()


def estimate_seconds(dataset: Dataset, system: SystemSpec | str, k: int = 100) -> float:
    """How long computing the system's run would take here (0 when it is on disk already)."""
    spec = parse_system(system) if isinstance(system, str) else system
    kind = spec.system_kind
    kind.check(dataset, spec)
    if kind.stores_run and is_computed(dataset, spec, k):
        return 0.0
    return kind.estimate_seconds(dataset, spec, k)


def needs_click(dataset: Dataset, system: SystemSpec | str, k: int = 100) -> bool:
    """True when computing the system's run may send LLM requests (it is not on disk): the app then
    shows its cost and a Compute button, never starting it from a link or by itself."""
    spec = parse_system(system) if isinstance(system, str) else system
    kind = spec.system_kind
    if not kind.asks_llm(dataset, spec, k):  # most systems: no LLM inside, no run key to build
        return False
    return not (kind.stores_run and is_computed(dataset, spec, k))


def cost_notes(dataset: Dataset, system: SystemSpec | str, k: int = 100) -> list[str]:
    """What computing the system's run would cost besides time (nothing when it is on disk)."""
    spec = parse_system(system) if isinstance(system, str) else system
    kind = spec.system_kind
    if kind.stores_run and is_computed(dataset, spec, k):
        return []
    return kind.cost_notes(dataset, spec, k)


def system_explanations(dataset: Dataset, system: SystemSpec | str, query_id: str) -> Explanations | None:
    """The system's per-document reasons for a query (a point-wise LLM judge's), or None."""
    spec = parse_system(system) if isinstance(system, str) else system
    return spec.system_kind.explanations(dataset, spec, query_id)


# --------------------------------------------------------------------------- free-text queries

_LOADED: OrderedDict[tuple[str, str], Any] = OrderedDict()
_LOADED_MAX = 8


def kept_loaded(dataset: Dataset, spec: SystemSpec, load: Callable[[], Any]) -> Any:
    """A retriever kept in memory for repeated free-text searches (its index comes from the disk
    cache), by corpus and system without rewrite; the least recently used goes first."""
    key = (dataset.fingerprint, str(spec.base))
    if key not in _LOADED:
        _LOADED[key] = load()
        while len(_LOADED) > _LOADED_MAX:
            _LOADED.popitem(last=False)
    _LOADED.move_to_end(key)
    return _LOADED[key]


def search_text(
    dataset: Dataset,
    spec: SystemSpec | str,
    text: str,
    k: int = 10,
    *,
    hy_doc: str | None = None,
    progress: Progress | None = None,
) -> Ranking:
    """Rank the corpus for a query typed by the user (the what-if page).

    A rewritten system (``+METHOD:LLM``) needs the hypothetical document for this text, generated
    live (``hy_doc``); it is combined with the query by the benchmark's rules, as for dataset queries.
    """
    spec = parse_system(spec) if isinstance(spec, str) else spec
    if not spec.searches_text:
        raise SpecError(spec.system_kind.no_text_reason(spec))
    if spec.rewrite and hy_doc is None:
        raise SpecError(f"{spec.label} needs a hypothetical document for a typed query (a live LLM endpoint)")
    return spec.system_kind.search(dataset, spec, text, k, hy_doc, progress)


def done(progress: Progress | None, spec: SystemSpec, verb: str = "done") -> None:
    """The final progress report every kind gives."""
    notify(progress, 1.0, f"{spec.label}: {verb}")
