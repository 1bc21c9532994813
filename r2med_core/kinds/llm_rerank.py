"""``<system>>llmrerank:list:<model>@<k>`` and ``<system>>llmrerank:point:<model>@<k>``: an LLM reranks
the top k of a first-stage system (see ``r2med_core.llm.llm_rerank``).

``list`` is the benchmark's list-wise GPT reranker (``RerankerGPT``: one prompt per query, the
listed ids scored k, k−1, …; the run holds only those), the benchmark's setting. ``list`` with a
``+window<size>-<step>`` suffix reranks in RankGPT's sliding windows, and ``point`` is the explorer's
point-wise reasoning judge (one request per document, scored by P(relevant)): neither is the
benchmark's setting, and both say so in their label and fidelity notes.

The grammar follows the cross-encoder's ``SYSTEM>rerank:MODEL@K``: the first stage is the cached run
of its base at depth 100 or more, and ``K`` the depth reranked. Which server answers is never in the
name: it is the operator's default LLM endpoint with the operator's key (``r2med_core.llm.endpoints``),
so a link can name a model but never a URL. The app passes its operator configuration (with
``.streamlit/secrets.toml``) through ``use_operator``; without it the environment's is used.

Computing sends requests that cost money, so ``asks_llm`` makes the app wait for a click however
small the job (a link shows the estimate and a Compute button). Every reply is cached
(``llm_rerank``'s reply cache) and the reranked run is stored, keyed by the first stage's key, the
endpoint's identity (URL, model, sampling; never the key) and the prompt version, so a cancelled or
failed job resumes from the cache and a changed first stage or endpoint never reuses a stale run.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from r2med_core.data import Dataset
from r2med_core.kinds.base import (
    Explanations,
    Parse,
    SpecError,
    SystemKind,
    SystemSpec,
    estimate_seconds,
    register,
    rfind_top_level,
    run_key,
    run_system,
    scaled,
)
from r2med_core.kinds.roles import ModelRole, register_role
from r2med_core.llm import llm_rerank as lr
from r2med_core.llm.client import Endpoint
from r2med_core.llm.endpoints import EndpointError, OperatorLLM, operator_llm
from r2med_core.progress import Progress
from r2med_core.runs import Run
from r2med_core.settings import Settings, load_settings

MARKER = ">llmrerank:"
MODES = {"list": "listwise", "point": "pointwise"}
#: The first stage is retrieved at least this deep (the depth the app's pages run a system at).
FIRST_STAGE_DEPTH = 100
#: A guess per request when nothing is measured (a reasoning reply over 10 passages).
SECONDS_PER_REQUEST = 20.0
#: How long one request may take before it is retried.
TIMEOUT = 300.0

_REST = re.compile(r"(?P<mode>[a-z]+):(?P<model>.+)@(?P<k>\d+)(?:\+window(?P<size>\d+)-(?P<step>\d+))?")

_OPERATOR: OperatorLLM | None = None
_SETTINGS: Settings | None = None


def use_operator(operator: OperatorLLM | None, settings: Settings | None = None) -> None:
    """The server's LLM configuration (the app's, secrets included) and its settings (how many
    requests at once, the reply bound); None: read the environment. It is the operator's, the same
    for every visitor, so one per process is right."""
    global _OPERATOR, _SETTINGS
    _OPERATOR, _SETTINGS = operator, settings


def _settings() -> Settings:
    return _SETTINGS if _SETTINGS is not None else load_settings()


def concurrency() -> int:
    """Requests in flight at once: the operator's ``R2MED_LLM_CONCURRENCY``, the one setting that
    generation, the CLI and these rerankers read (1 for llama-cpp-python's server, which serialises;
    more for vLLM or a multi-slot llama.cpp server). A hosted API's 429s are waited out."""
    return _settings().llm_concurrency


def operator_endpoint(model: str) -> Endpoint:
    """The endpoint a reranking by ``model`` uses: the operator's default one, with the operator's key."""
    try:
        operator = _OPERATOR if _OPERATOR is not None else operator_llm(load_settings())
    except EndpointError as err:
        raise SpecError(f"no LLM endpoint for {model!r}: {err}") from None
    resolved = lr.reranker_endpoint("", "", model, operator, timeout=TIMEOUT)
    if resolved.endpoint is None:
        raise SpecError(f"no LLM endpoint for {model!r}: {resolved.note or 'name a model'}")
    return resolved.endpoint


def reply_bound() -> int | None:
    """The operator's reply bound for LLM rerankings (``R2MED_LLM_RERANK_MAX_TOKENS``), or None: the
    reranker's own (10240 list-wise, as the benchmark's live generation; its reranker sends none)."""
    return _settings().llm_rerank_max_tokens


def llm_reranked_spec(
    base: SystemSpec, mode: str, model: str, k: int, window: tuple[int, int] | None = None
) -> SystemSpec:
    return SystemSpec("llmrerank", model, members=(base,), params=(("k", k), ("mode", mode), ("window", window)))


def _window(spec: SystemSpec) -> lr.Window | None:
    window = spec.param("window")
    return lr.Window(*window) if window else None


def _depths(spec: SystemSpec, k: int) -> tuple[int, int]:
    depth = spec.param("k")
    return depth, max(k, depth, FIRST_STAGE_DEPTH)


def outermost(text: str, marker: str) -> tuple[str, str] | None:
    """``(base, rest)`` when ``text`` is ``BASE{marker}REST`` with this wrapping the outermost, else None
    (no marker, or a later wrapper's name, ``…>llmrerank:…>rerank:…``, whose base is this text)."""
    at = rfind_top_level(text, marker)
    if at < 0:
        return None
    rest = text[at + len(marker) :]
    return None if ">" in rest else (text[:at], rest)


def endpoint_model(text: str, model: str) -> str:
    """``model`` as named in ``text``, refused when it looks like a path (it names a model the endpoint serves)."""
    if model.startswith(("/", ".", "~")) or "\\" in model or any(ch.isspace() for ch in model):
        raise SpecError(f"{text!r}: MODEL is the name an LLM endpoint knows the model by, not a path")
    return model


def _whole(text: str) -> int | None:
    return int(text) if text.isdigit() and text == str(int(text)) and int(text) >= 1 else None


@register_role
class LLMRole(ModelRole):
    """An LLM asked on the operator's endpoint with the operator's key: a link may name any model
    (the endpoint answers or refuses it, and nothing is sent before a click), except in the demo."""

    name = "llm"

    def refusal(self, model: str, settings: Settings) -> str | None:
        return "this read-only demo runs no LLM" if settings.demo_mode else None


@register
class LLMRerankKind(SystemKind):
    name = "llmrerank"
    grammar = (
        "SYSTEM>llmrerank:list:MODEL@K[+windowS-T] (an LLM reranks SYSTEM's top K list-wise, the benchmark's "
        "RerankerGPT) or SYSTEM>llmrerank:point:MODEL@K (one LLM judgement per document, not the benchmark's)"
    )
    priority = 9  # before the cross-encoder's rerank, which would read '…>llmrerank:…' as part of a model name

    def parse(self, text: str, parse: Parse) -> SystemSpec | None:
        wrapped = outermost(text, MARKER)
        if wrapped is None:
            return None
        base, rest = wrapped
        usage = (
            f"{text!r}: an LLM reranking is SYSTEM>llmrerank:list:MODEL@K[+windowS-T] or SYSTEM>llmrerank:point:MODEL@K"
        )
        found = _REST.fullmatch(rest)
        if found is None or found["mode"] not in MODES or not found["model"].strip():
            raise SpecError(usage + " with K a whole number of at least 1")
        model = endpoint_model(text, found["model"])
        depth = _whole(found["k"])
        if depth is None:
            raise SpecError(usage + " with K a whole number of at least 1")
        window = None
        if found["size"] is not None:
            size, step = _whole(found["size"]), _whole(found["step"])
            if found["mode"] != "list" or size is None or step is None:
                raise SpecError(f"{text!r}: only a list-wise reranking takes +windowS-T (S, T whole numbers)")
            try:
                lr.Window(size, step)
            except lr.LLMRerankError as err:
                raise SpecError(f"{text!r}: {err}") from None
            window = (size, step)
        return llm_reranked_spec(parse(base), found["mode"], model, depth, window)

    def format(self, spec: SystemSpec) -> str:
        window = spec.param("window")
        suffix = f"+window{window[0]}-{window[1]}" if window else ""
        return f"{spec.members[0]}{MARKER}{spec.param('mode')}:{spec.name}@{spec.param('k')}{suffix}"

    def label(self, spec: SystemSpec) -> str:
        depth = spec.param("k")
        if spec.param("mode") == "point":
            return f"{spec.members[0].label} → {lr.pointwise_label(spec.name, depth)}"
        return f"{spec.members[0].label} → {lr.listwise_label(spec.name, depth, _window(spec))}"

    def check(self, dataset: Dataset, spec: SystemSpec) -> None:
        if load_settings().demo_mode:
            raise SpecError("LLM reranking is off in this read-only demo")
        super().check(dataset, spec)

    def method(self, spec: SystemSpec) -> str:
        """The ``llm_rerank`` method it runs ("listwise", "pointwise"; "insertrank" in a subclass)."""
        return MODES[spec.param("mode")]

    def key_parts(self, dataset: Dataset, spec: SystemSpec, k: int) -> dict[str, Any]:
        parts: dict[str, Any] = {
            "base": run_key(dataset, spec.members[0], _depths(spec, k)[1]),
            "endpoint": operator_endpoint(spec.name).identity(),
            "prompt": lr.PROMPT_VERSIONS[self.method(spec)],
        }
        if reply_bound() is not None:
            parts["max_tokens"] = reply_bound()
        return parts

    def compute(self, dataset: Dataset, spec: SystemSpec, k: int, progress: Progress | None) -> Run:
        depth, first_k = _depths(spec, k)
        first = run_system(dataset, spec.members[0], k=first_k, progress=scaled(progress, 0.0, 0.05))
        endpoint = operator_endpoint(spec.name)
        rest = scaled(progress, 0.05, 1.0)
        method = self.method(spec)
        if method == "pointwise":
            run, _ = lr.pointwise_rerank(
                first, dataset, endpoint, depth, workers=concurrency(), progress=rest, max_tokens=reply_bound()
            )
        else:
            run = lr.listwise_rerank(
                first,
                dataset,
                endpoint,
                depth,
                window=_window(spec),
                workers=concurrency(),
                progress=rest,
                show_scores=method == "insertrank",
                max_tokens=reply_bound(),
            )
        return Run(str(spec), {q: r[:k] for q, r in run.rankings.items()}, run.seconds, run.usage)

    def asks_llm(self, dataset: Dataset, spec: SystemSpec, k: int) -> bool:
        return True  # unless its run is on disk (``needs_click`` checks), computing it may send requests

    def models(self, spec: SystemSpec) -> tuple[tuple[str, str], ...]:
        return (*super().models(spec), (LLMRole.name, spec.name))

    def differences(self, spec: SystemSpec, dataset_name: str | None) -> list[str]:
        out = super().differences(spec, dataset_name)
        if reply_bound() is not None and spec.param("mode") != "point":
            out.append(
                f"LLM replies bounded at {reply_bound()} tokens (R2MED_LLM_RERANK_MAX_TOKENS); the benchmark's "
                "list-wise reranker sends no bound"
            )
        if spec.param("mode") == "point":
            out.append("point-wise LLM reasoning reranker (the explorer's prompt), not the benchmark's list-wise one")
        elif spec.param("window"):
            out.append("list-wise reranking in sliding windows (RankGPT's), not the benchmark's one prompt per query")
        return out

    def _estimate(self, dataset: Dataset, spec: SystemSpec, k: int) -> lr.RerankEstimate | None:
        """The job's cost with cached replies counted, once the first stage is on disk or cheap enough
        to compute by itself (the operator's ``R2MED_COMPUTE_SECONDS``; else None)."""
        depth, first_k = _depths(spec, k)
        base = spec.members[0]
        if estimate_seconds(dataset, base, first_k) > load_settings().compute_seconds:
            return None
        first = run_system(dataset, base, k=first_k)
        return lr.estimate(
            first,
            dataset,
            operator_endpoint(spec.name),
            self.method(spec),
            depth,
            window=_window(spec),
            workers=concurrency(),
            seconds_per_request=SECONDS_PER_REQUEST,
            max_tokens=reply_bound(),
        )

    def _requests_without_run(self, dataset: Dataset, spec: SystemSpec) -> int:
        depth, window = spec.param("k"), _window(spec)
        per_query = depth if self.method(spec) == "pointwise" else len(window.spans(depth)) if window else 1
        return len(dataset.queries) * per_query

    def estimate_seconds(self, dataset: Dataset, spec: SystemSpec, k: int) -> float:
        first = estimate_seconds(dataset, spec.members[0], _depths(spec, k)[1])
        found = self._estimate(dataset, spec, k)
        if found is not None:
            return first + found.seconds
        return first + self._requests_without_run(dataset, spec) * SECONDS_PER_REQUEST / concurrency()

    def cost_notes(self, dataset: Dataset, spec: SystemSpec, k: int) -> list[str]:
        endpoint = operator_endpoint(spec.name)
        where = (
            f"Requests go to the operator's endpoint at {urlsplit(endpoint.url).hostname} (model {spec.name}); "
            "the cost is these tokens at that endpoint's price."
        )
        found = self._estimate(dataset, spec, k)
        if found is None:
            requests = self._requests_without_run(dataset, spec)
            return [
                f"Up to {requests} LLM requests for {len(dataset.queries)} queries (cached replies and prompt "
                "tokens are counted once the first stage is computed).",
                where,
            ]
        return [found.summary(), where]

    def explanations(self, dataset: Dataset, spec: SystemSpec, query_id: str) -> Explanations | None:
        if spec.param("mode") != "point":
            return None
        depth, first_k = _depths(spec, FIRST_STAGE_DEPTH)
        base = spec.members[0]
        if estimate_seconds(dataset, base, first_k) > 0.0:
            return None  # never compute a first stage to explain a run that was not computed
        first = run_system(dataset, base, k=first_k)
        found = lr.cached_explanations(first, dataset, operator_endpoint(spec.name), depth, query_ids=[query_id])
        judged = found.get(query_id, {})
        if not judged:
            return None
        return Explanations(
            by=spec.name,
            note="the point-wise LLM judge's reasoning (the explorer's prompt, not the benchmark's); an LLM's "
            "reply, not checked by anyone",
            texts={doc: item.reasoning for doc, item in judged.items()},
            details={
                doc: f"answer: {item.answer or 'none found'} · score {item.probability:.3f} "
                f"({lr.SCORE_SOURCES.get(item.source, item.source)})"
                for doc, item in judged.items()
            },
        )
