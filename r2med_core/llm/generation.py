"""Live query rewriting: ask an LLM for HyDE / query2doc / LaMer documents, cached per query on disk.

Any OpenAI-compatible chat-completions server works (OpenAI, vLLM, llama.cpp, Ollama, TGI …): an
``Endpoint`` names it. Every reply is cached under ``cache_root()/generations`` keyed by what
produced it (server, model, method, prompt version, sampling settings, query text, LaMer passages)
and never by the API key, so re-running costs nothing and a stopped or crashed batch resumes where
it stopped. Failures never raise: they end up in the batch's ``BatchReport`` with a message a user can
act on, and the API key never appears in a message, a log line or a cache file.

The output enters retrieval exactly like a precomputed rewrite: ``with_rewrites`` registers it on a
``Dataset`` (``run_system(dataset, "bm25+hyde:<llm_name>")``) and ``save_rewrites`` writes the
benchmark's ``query_with_hydoc.jsonl``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from r2med_core.cache import ReplyCache, atomic_write_text, cache_root, fingerprint
from r2med_core.data import REWRITE_FILE, Dataset
from r2med_core.llm import speed
from r2med_core.llm.batch import DEFAULT_RETRY, BatchReport, RetryPolicy, Usage, run_batch, total_usage
from r2med_core.llm.client import AnyEndpoint, ChatClient, Endpoint, LLMFailure, StreamWatch
from r2med_core.llm.prompts import (
    EXPLORER_PROMPTS,
    GENERATION_METHODS,
    LAMER_PASSAGES,
    OFFICIAL_PROMPTS,
    GenerationError,
    Prompts,
    build_messages,
    load_examples,
    official_system,
)
from r2med_core.progress import Progress, format_seconds
from r2med_core.runs import Run
from r2med_core.tasks import REWRITE_METHODS, Family

#: Bump when a prompt's wording changes: cached generations of the old wording are then not reused.
#: (Cache keys also hold the prompt set, official or explorer, and the query2doc examples' digest.)
#: 4: LaMer passages cut with str.split(), sky-32b's system prompt, API-class models without max_tokens,
#: replies kept raw (unstripped).
PROMPT_VERSION = "r2med-explorer-prompts-4"

_LLM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

__all__ = [  # what the prompts module defines, re-exported here where generation is used
    "EXPLORER_PROMPTS",
    "GENERATION_METHODS",
    "LAMER_PASSAGES",
    "OFFICIAL_PROMPTS",
    "GenerationError",
    "Prompts",
    "build_messages",
    "load_examples",
]


def check_llm_name(name: str) -> str:
    """LLM names become folder names and parts of system names (``bm25+hyde:NAME``): keep them plain."""
    if not _LLM_NAME.fullmatch(name):
        raise GenerationError(
            f"LLM name {name!r} must start with a letter or digit and use only letters, digits, '.', '_' or '-'"
        )
    return name


def new_set_name(dataset: Dataset, method: str, endpoint: AnyEndpoint) -> str:
    """The name a new generation is saved under unless one is given: the model's name, or ``NAME-live``
    when a precomputed set of this dataset already has that name (the demo's ``hyde/smollm2-135m``,
    written by the model the local server serves under that name): a shipped file wins over a live
    generation of the same name, so the new set would be hidden behind it."""
    name = check_llm_name(endpoint.default_llm_name())
    return f"{name}-live" if is_shipped_set(dataset, method, name) else name


def is_shipped_set(dataset: Dataset, method: str, llm_name: str) -> bool:
    """Whether ``(method, llm_name)`` is a precomputed rewrite file of the dataset (not a live generation)."""
    shipped = dataset.rewrites.get((method, llm_name))
    return shipped is not None and live_rewrites(dataset, method, llm_name) != shipped


# --------------------------------------------------------------------------- prompts


def lamer_passages(dataset: Dataset, first_stage: Run, query_id: str, k: int = LAMER_PASSAGES) -> list[str]:
    """The texts of a first-stage run's top ``k`` for a query (documents unknown to the corpus skipped)."""
    return [dataset.corpus[doc] for doc, _ in first_stage.top(query_id, k) if doc in dataset.corpus]


# --------------------------------------------------------------------------- tokens


# --------------------------------------------------------------------------- the per-query cache


#: Every reply, keyed by what produced it (``generation_key``).
REPLIES = ReplyCache("generations/replies", "generation")


def _cache_dir() -> Path:
    return cache_root() / "generations"


def generation_key(
    endpoint: AnyEndpoint,
    method: str,
    query: str,
    family: Family | None,
    passages: list[str],
    *,
    task: str | None = None,
    prompts: Prompts = OFFICIAL_PROMPTS,
    llm_name: str | None = None,
) -> str:
    """The cache key of one reply: server, model, sampling, method, prompt version and set (with the
    examples' digest), the system message (the benchmark's own for some LLM names), the task whose
    wording is used, query, passages."""
    return REPLIES.key(
        endpoint.identity(),
        method,
        PROMPT_VERSION,
        prompts.identity(),
        task,
        family.value if family else None,
        query,
        passages,
        official_system(llm_name) if prompts.name == "official" else None,
    )


def _cache_get(key: str) -> tuple[str, Usage] | None:
    """The cached text and the tokens spent making it (0 for an entry older than usage metering)."""
    payload = REPLIES.get(key)
    text = payload.get("hy_doc") if payload else None
    if not payload or not isinstance(text, str) or not text.strip():
        return None
    return text, Usage.from_json(payload.get("usage"))


def _cache_put(key: str, text: str, endpoint: AnyEndpoint, method: str, usage: Usage, seconds: float = 0.0) -> None:
    """Keep a reply raw, with what made it (model, method, prompt version), its tokens and its wall time."""
    payload = {"hy_doc": text, "model": endpoint.identity()["model"], "method": method, "prompt": PROMPT_VERSION}
    REPLIES.put(key, {**payload, "usage": usage.to_json(), "seconds": round(seconds, 3), "made_at": time.time()})


# --------------------------------------------------------------------------- what a server has shown it does

#: A reply's length when this server has sent none yet (only its speed was probed): a HyDE passage.
TYPICAL_REPLY = 300
#: What an unmeasured server's reply is guessed to take (shown only as "not measured yet").
GUESS_PER_REPLY = 30.0


def _model(endpoint: AnyEndpoint) -> str:
    return str(endpoint.identity()["model"])


def _budget(endpoint: AnyEndpoint) -> int | None:
    return endpoint.token_budget() if isinstance(endpoint, Endpoint) else endpoint.max_tokens


def _expected(endpoint: AnyEndpoint, method: str, prompts: list[int], workers: int) -> speed.Timing:
    """The time ``prompts`` (cl100k_base tokens each) take on this server: ``speed.expected``, the
    product's one estimate of LLM time (measured rates, mean reply length of ``method``)."""
    return speed.expected(
        endpoint.url,
        _model(endpoint),
        method,
        prompts,
        reply_bound=_budget(endpoint),
        default_reply=TYPICAL_REPLY,
        guess_per_request=GUESS_PER_REPLY,
        workers=workers,
    )


@dataclass(frozen=True)
class GenerationEstimate:
    """What a Generate would do before it is clicked: replies to ask for, replies in the cache, and
    the time the server's measured speed predicts (None: not measured yet; the first reply measures it)."""

    to_send: int
    from_cache: int
    seconds: float | None
    basis: str

    def describe(self) -> str:
        if not self.to_send:
            return f"all {self.from_cache} replies are in the cache: nothing to send"
        cached = f" ({self.from_cache} from the cache)" if self.from_cache else ""
        replies = "1 reply" if self.to_send == 1 else f"{self.to_send} replies"
        if self.seconds is None:
            return f"{replies} to generate{cached}; {self.basis}"
        return f"{replies} to generate{cached}, about {format_seconds(self.seconds)} ({self.basis})"


def estimate_generation(
    dataset: Dataset,
    method: str,
    endpoint: AnyEndpoint,
    *,
    llm_name: str | None = None,
    first_stage: Run | None = None,
    query_ids: Iterable[str] | None = None,
    prompts: Prompts = OFFICIAL_PROMPTS,
    workers: int = 1,
) -> GenerationEstimate:
    """How many replies a ``generate_rewrites`` with these arguments would ask for, and how long the
    server's measured speed (``llm.speed``: its prompt and completion tokens/s, the mean reply length)
    says that takes at ``workers`` at once."""
    llm_name = check_llm_name(llm_name or new_set_name(dataset, method, endpoint))
    wanted = [q for q in (query_ids if query_ids is not None else dataset.queries) if q in dataset.queries]
    cached = 0
    sizes: list[int] = []
    for qid in wanted:
        passages = lamer_passages(dataset, first_stage, qid) if method == "lamer" and first_stage else []
        key = generation_key(
            endpoint, method, dataset.queries[qid], dataset.family, passages,
            task=dataset.name, prompts=prompts, llm_name=llm_name,
        )  # fmt: skip
        if _cache_get(key) is not None:
            cached += 1
            continue
        messages = build_messages(
            method, dataset.queries[qid], dataset.family, passages, task=dataset.name, prompts=prompts,
            llm_name=llm_name,
        )  # fmt: skip
        sizes.append(speed.prompt_tokens(messages))
    to_send = len(sizes)
    timing = _expected(endpoint, method, sizes, workers)
    if not timing.measured:
        return GenerationEstimate(to_send, cached, None, "time unknown until the first reply measures this server")
    return GenerationEstimate(to_send, cached, timing.seconds, timing.basis)


# --------------------------------------------------------------------------- the batch


class _Pace:
    """A batch's progress line: the reply being written (tokens so far, tokens per second) and an
    honest time left.

    Time left = the replies not started × the mean time of the replies finished in this batch (before
    the first, the server's measured speed; with neither, none is shown), plus what the mean leaves of
    the replies in flight. While a reply is pending the figure only counts down (floored at 0 for a
    reply running long, never growing); it is re-estimated when a reply finishes.
    """

    def __init__(self, prior: float | None, workers: int, jobs: int) -> None:
        self.lock = threading.Lock()
        self.workers, self.left = workers, jobs
        self.prior = prior  # seconds a reply takes, as the server was measured (None: not yet)
        self.durations: list[float] = []
        self.running: dict[str, tuple[float, int, float]] = {}  # qid → (started, tokens, seconds at last token)
        self.last_done = time.perf_counter()  # the batch's start, then the last reply's end

    def started(self, qid: str) -> Callable[[int, float], None]:
        with self.lock:
            self.running[qid] = (time.perf_counter(), 0, 0.0)
            self.left -= 1

        def on_token(tokens: int, seconds: float) -> None:
            with self.lock:
                if qid in self.running:
                    self.running[qid] = (self.running[qid][0], tokens, seconds)

        return on_token

    def finished(self, qid: str, seconds: float) -> float:
        """Record a reply's ``seconds``; returns the server's own time on it as ``speed.Countdown.reply``
        counts it (from the previous reply when it queued behind it), for ``speed.observe``."""
        with self.lock:
            self.running.pop(qid, None)
            self.durations.append(seconds)
            now = time.perf_counter()
            service = min(seconds, now - self.last_done)
            self.last_done = now
            return service

    def describe(self) -> str:
        with self.lock:
            now = time.perf_counter()
            mean = sum(self.durations) / len(self.durations) if self.durations else self.prior
            parts = []
            for qid, (_, tokens, seconds) in list(self.running.items())[:2]:
                rate = f" at {tokens / seconds:.0f} tokens/s" if tokens and seconds > 0 else ""
                parts.append(f"{qid}: {tokens} tokens{rate}")
            if mean is not None:
                pending = sum(max(0.0, mean - (now - begun)) for begun, _, _ in self.running.values())
                remaining = (max(0, self.left) * mean + pending) / self.workers
                parts.append(f"about {format_seconds(remaining)} left")
        return " · " + " · ".join(parts) if parts else ""


def generate_rewrites(
    dataset: Dataset,
    method: str,
    endpoint: AnyEndpoint,
    *,
    llm_name: str | None = None,
    first_stage: Run | None = None,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
    workers: int = 1,
    query_ids: Iterable[str] | None = None,
    record: bool = True,
    prompts: Prompts = OFFICIAL_PROMPTS,
) -> BatchReport:
    """Generate (or take from the cache) one rewrite per query; never raises for server trouble.

    The report's ``results`` hold every requested query's rewrite, in query order; its label is
    ``METHOD · LLM_NAME``. Requests are retried and the batch stopped as ``retry`` and
    ``r2med_core.llm.batch`` say: a wrong key, an unreachable server or a persistent rate limit stop
    it; an empty or malformed reply fails only its query. Unless ``record`` is False, the result is
    also recorded under ``llm_name`` so ``eval --rewrite METHOD:NAME`` and ``live_rewrites`` find it
    later. ``prompts``: the benchmark's per-task prompts by default (see ``r2med_core.llm.prompts``).
    """
    if method not in GENERATION_METHODS:
        raise GenerationError(f"cannot generate {method!r} rewrites: choose one of {', '.join(GENERATION_METHODS)}")
    if method == "lamer" and first_stage is None:
        raise GenerationError("lamer needs a first-stage run (first_stage=run_system(dataset, 'bm25'))")
    llm_name = check_llm_name(llm_name or new_set_name(dataset, method, endpoint))
    wanted = [q for q in (query_ids if query_ids is not None else dataset.queries) if q in dataset.queries]
    result = BatchReport(f"{method} · {llm_name}", endpoint.url, verb="generated")

    try:
        jobs: list[tuple[str, str, list[dict[str, str]]]] = []
        for qid in wanted:
            query = dataset.queries[qid]
            passages = lamer_passages(dataset, first_stage, qid) if method == "lamer" and first_stage else []
            key = generation_key(
                endpoint, method, query, dataset.family, passages, task=dataset.name, prompts=prompts, llm_name=llm_name
            )
            hit = _cache_get(key)
            if hit is not None:
                result.results[qid], result.usage[qid] = hit
                result.from_cache += 1
            else:
                messages = build_messages(
                    method, query, dataset.family, passages, task=dataset.name, prompts=prompts, llm_name=llm_name
                )
                jobs.append((qid, key, messages))
    except GenerationError as err:  # a local model that is not installed
        result.error, result.stopped, result.remaining = str(err), True, list(wanted)
        return result

    total = len(wanted)
    sizes = [speed.prompt_tokens(messages) for _, _, messages in jobs]
    timing = _expected(endpoint, method, sizes, 1)
    pace = _Pace(timing.seconds / len(jobs) if jobs and timing.measured else None, max(1, workers), len(jobs))
    cancel = threading.Event()  # set when the caller cancels: streamed replies close their connection
    # the caller cancelling (a UI's rerun, Ctrl-C) stops generating on the server too
    tell = result.ticker(progress, total, f"{method} · {llm_name}", pace.describe, cancelled=cancel.set)
    tell()
    if jobs:
        try:
            client = ChatClient(endpoint, retry)
        except LLMFailure as failure:  # the client refused its settings (message redacted)
            result.error = failure.message
            result.stopped, result.remaining = True, [qid for qid, _, _ in jobs]
            return result

        def stopping() -> bool:
            return cancel.is_set() or (should_stop is not None and should_stop())

        def ask(qid: str, key: str, messages: list[dict[str, str]]) -> str:
            watch = StreamWatch(stopping, pace.started(qid)) if isinstance(endpoint, Endpoint) else None
            reply = client.chat(messages, watch=watch)  # a reply echoing the key is already redacted
            _cache_put(key, reply.text, endpoint, method, reply.usage, reply.seconds)
            used = reply.usage
            service = pace.finished(qid, reply.seconds)
            speed.observe(
                endpoint.url, _model(endpoint), method, used.prompt_tokens, used.completion_tokens, service,
                speed.prompt_tokens(messages),
            )  # fmt: skip
            result.results[qid], result.usage[qid] = reply.text, reply.usage
            result.seconds[qid] = reply.seconds
            return reply.text

        units = [(qid, lambda q=qid, k=key, m=messages: ask(q, k, m)) for qid, key, messages in jobs]
        try:
            done = run_batch(
                units,
                result,
                policy=retry,
                fail_message=client.fail_message,
                workers=workers,
                should_stop=stopping,
                tick=tell,
            )
        finally:
            cancel.set()  # nothing runs past the batch (a cancelled one included)
        result.sent, result.tokens = len(done), client.usage
        result.results = {qid: result.results[qid] for qid in wanted if qid in result.results}
    result.spent = total_usage(result.usage[qid] for qid in result.results if qid in result.usage)
    if result.results and record:
        _record_set(dataset, method, llm_name, endpoint, result.results, prompts, result.usage)
    return result


# --------------------------------------------------------------------------- using the output


def with_rewrites(dataset: Dataset, method: str, llm_name: str, texts: dict[str, str]) -> Dataset:
    """A copy of ``dataset`` with ``texts`` as its ``(method, llm_name)`` rewrite, for ``run_system``.

    Run cache keys include a digest of the rewrite texts, so a changed generation is never served a
    stale run. Queries the texts lack are not retrieved with the rewrite, as with rewrite files.
    """
    if method not in REWRITE_METHODS:
        raise GenerationError(f"unknown rewrite method {method!r}: choose one of {', '.join(REWRITE_METHODS)}")
    check_llm_name(llm_name)
    known = {qid: texts[qid] for qid in dataset.queries if qid in texts}
    return replace(dataset, rewrites={**dataset.rewrites, (method, llm_name): known})


def rewrite_file(root: str | Path, method: str, llm_name: str) -> Path:
    """Where a rewrite lives in the R2MED layout: ``ROOT/<method>/<llm>/query_with_hydoc.jsonl``."""
    return Path(root) / method / check_llm_name(llm_name) / REWRITE_FILE


def rewrites_text(texts: dict[str, str], dataset: Dataset) -> str:
    """The official ``query_with_hydoc.jsonl`` content: ``{"id","text","hy_doc"}`` per query, in query order."""
    rows = [
        json.dumps({"id": qid, "text": text, "hy_doc": texts[qid]}, ensure_ascii=False)
        for qid, text in dataset.queries.items()
        if qid in texts
    ]
    return "".join(row + "\n" for row in rows)


def save_rewrites(texts: dict[str, str], dataset: Dataset, path: str | Path) -> Path:
    """Write the official ``query_with_hydoc.jsonl`` (atomically)."""
    path = Path(path)
    atomic_write_text(path, rewrites_text(texts, dataset))
    return path


_SET_NAMES: WeakKeyDictionary[Dataset, str] = WeakKeyDictionary()


def _set_dir(dataset: Dataset) -> Path:
    """Recorded live generations of a dataset, found again by its queries (not its source path)."""
    if dataset not in _SET_NAMES:  # the app asks on every rerun: digest the queries once per dataset
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", dataset.name).strip("_") or "dataset"
        _SET_NAMES[dataset] = f"{slug}-{fingerprint('queries', dataset.queries)[:16]}"
    return _cache_dir() / "sets" / _SET_NAMES[dataset]


def _record_set(
    dataset: Dataset,
    method: str,
    llm_name: str,
    endpoint: AnyEndpoint,
    texts: dict[str, str],
    prompts: Prompts = OFFICIAL_PROMPTS,
    usage: dict[str, Usage] | None = None,
) -> None:
    """Remember a batch under its LLM name; a later batch of the same endpoint and prompts adds to it.

    The tokens each text cost are kept beside it, so a run using the set says what it cost."""
    folder = _set_dir(dataset) / method / llm_name
    identity = {**endpoint.identity(), "prompt": PROMPT_VERSION, **prompts.identity()}
    merged = dict(texts)
    spent = {qid: u.to_json() for qid, u in (usage or {}).items() if qid in texts}
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        if meta.get("endpoint") == identity:
            merged = {**(live_rewrites(dataset, method, llm_name) or {}), **texts}
            earlier = meta.get("usage") if isinstance(meta.get("usage"), dict) else {}
            spent = {**{q: u for q, u in earlier.items() if q in merged}, **spent}
    except (OSError, ValueError, RecursionError, AttributeError):
        pass
    save_rewrites(merged, dataset, folder / REWRITE_FILE)
    meta = {"endpoint": identity, "queries": len(merged), "usage": spent}
    atomic_write_text(folder / "meta.json", json.dumps(meta, indent=1))


def live_generation_usage(dataset: Dataset, method: str, llm_name: str) -> Usage | None:
    """The tokens it cost to make a recorded live generation (summed over its texts), or None when
    none is recorded or the server reported no usage."""
    if not _LLM_NAME.fullmatch(llm_name):
        return None
    try:
        meta = json.loads((_set_dir(dataset) / method / llm_name / "meta.json").read_text(encoding="utf-8"))
        spent = meta.get("usage") if isinstance(meta, dict) else None
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(spent, dict):
        return None
    return total_usage(Usage.from_json(u) for u in spent.values()) or None


def live_generation_settings(dataset: Dataset, method: str, llm_name: str) -> dict[str, Any] | None:
    """How a recorded live generation was made (server, model, sampling, prompt set), or None."""
    if not _LLM_NAME.fullmatch(llm_name):
        return None
    try:
        meta = json.loads((_set_dir(dataset) / method / llm_name / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    endpoint = meta.get("endpoint") if isinstance(meta, dict) else None
    return endpoint if isinstance(endpoint, dict) else None


def rewrite_usage(dataset: Dataset, method: str, llm_name: str) -> dict[str, Any] | None:
    """The LLM use behind a dataset's ``(method, llm_name)`` rewrite when it is a recorded live
    generation of an API server (``Usage.record`` of its model: the tokens its texts cost, cached
    ones included), else None (a precomputed rewrite file, a local model, no such rewrite)."""
    texts = dataset.rewrites.get((method, llm_name))
    if not texts:
        return None
    settings = live_generation_settings(dataset, method, llm_name)
    if not settings or settings.get("base_url") == "local" or live_rewrites(dataset, method, llm_name) != texts:
        return None
    try:
        meta = json.loads((_set_dir(dataset) / method / llm_name / "meta.json").read_text(encoding="utf-8"))
        spent = meta.get("usage") if isinstance(meta.get("usage"), dict) else {}
    except (OSError, ValueError, RecursionError, AttributeError):
        spent = {}
    usage = total_usage(Usage.from_json(u) for qid, u in spent.items() if qid in texts)
    return usage.record(str(settings.get("model", llm_name)), f"{method} rewriting ({llm_name})")


def live_rewrites(dataset: Dataset, method: str, llm_name: str) -> dict[str, str] | None:
    """Texts generated earlier for this dataset under ``llm_name`` (None when there are none)."""
    if not _LLM_NAME.fullmatch(llm_name):
        return None
    path = _set_dir(dataset) / method / llm_name / REWRITE_FILE
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        texts = {str(row["id"]): row["hy_doc"] for row in rows if isinstance(row.get("hy_doc"), str)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return {qid: text for qid, text in texts.items() if qid in dataset.queries} or None


def live_rewrite_options(dataset: Dataset) -> list[tuple[str, str]]:
    """``(method, llm_name)`` of every live generation recorded for this dataset."""
    root = _set_dir(dataset)
    found = [
        (method, folder.name)
        for method in GENERATION_METHODS
        if (root / method).is_dir()
        for folder in sorted((root / method).iterdir())
        if (folder / REWRITE_FILE).is_file()
    ]
    return found


def attach_live_rewrites(dataset: Dataset, wanted: Iterable[tuple[str, str]]) -> tuple[Dataset, list[str]]:
    """Add recorded live generations for the wanted rewrites the dataset lacks; notes say what was used.

    Precomputed rewrite files win over live generations of the same name.
    """
    notes: list[str] = []
    for method, llm_name in dict.fromkeys(wanted):
        if (method, llm_name) in dataset.rewrites:
            continue
        texts = live_rewrites(dataset, method, llm_name)
        if texts:
            dataset = with_rewrites(dataset, method, llm_name, texts)
            # what made the set, where every page reads it (``systems.rewrite_words`` / ``rewrite_origin``)
            made = live_generation_settings(dataset, method, llm_name) or {}
            record = {"made_by": "llm", "live": True, "model": str(made.get("model") or llm_name)}
            dataset = replace(dataset, rewrite_provenance={**dataset.rewrite_provenance, (method, llm_name): record})
            notes.append(
                f"using live {method}:{llm_name} generations from the cache ({len(texts)} of {len(dataset.queries)} "
                "queries)"
            )
    return dataset, notes


def _typed(dataset: Dataset, text: str) -> Dataset:
    """A query typed by the user as a one-query dataset of the task (its prompt wording; nothing is
    recorded under this name)."""
    return Dataset(
        name=dataset.name, corpus={}, queries={"typed": text}, qrels={}, source="typed", family=dataset.family
    )


def cached_hypothetical_document(dataset: Dataset, text: str, endpoint: AnyEndpoint) -> str | None:
    """The HyDE document ``hypothetical_document`` would return from its cache alone (None: it would
    ask the server), so a page can ask for a click before sending a request a link asked for."""
    key = generation_key(
        endpoint,
        "hyde",
        text,
        dataset.family,
        [],
        task=dataset.name,
        llm_name=check_llm_name(endpoint.default_llm_name()),
    )
    hit = _cache_get(key)
    return hit[0] if hit else None


def hypothetical_document(
    dataset: Dataset, text: str, endpoint: AnyEndpoint, progress: Progress | None = None
) -> tuple[str | None, str | None]:
    """A HyDE document for a query typed by the user (not one of the dataset's): ``(text, None)`` or
    ``(None, what went wrong)``. Cached like every generation, so asking again costs nothing; the
    reply streams, so ``progress`` hears its tokens per second as it is written."""
    report = generate_rewrites(
        _typed(dataset, text), "hyde", endpoint, retry=replace(DEFAULT_RETRY, max_retries=2), record=False,
        progress=progress,
    )  # fmt: skip
    return report.results.get("typed"), report.problem()
