"""One way to run a batch of LLM requests: rewriting, LLM reranking and the LLM judge all use it.

A batch is a list of jobs, one per unit (a query to rewrite, a query or (query, document) to rerank,
a pair to grade). ``run_batch`` runs them at most ``workers`` at a time in order, reports progress,
and stops cleanly: asked to (``should_stop``), on a failure that dooms the batch (``LLMFailure``
with ``batch``: a wrong key, an unreachable server, a lasting rate limit), or after
``RetryPolicy.max_consecutive_failures`` failed units in a row. Requests already running finish
(and are cached); nothing new starts. ``BatchReport`` says what happened — sent, from the cache,
failed, unparsable, not tried, tokens, why it stopped — in the same words for every caller.

**Unparsable replies do not count toward the stop rule.** A job raises ``Unparsable`` for a reply
that arrived but cannot be used (a judge's reply with no 0-3 grade, a list-wise reply with no JSON
list, a point-wise reply with no verdict); the rewriter has none (any non-empty text is a rewrite;
an empty reply is a failed request). The stop rule is there to stop hammering a server that is
failing — a timeout or a 5xx predicts the next — whereas an unusable reply comes from a server that
works, and whether the next reply is usable depends on the next query, not on the server. What
such a batch costs was shown before it was started (each caller's estimate), so finishing it spends
nothing unexpected; stopping would instead end the offline demo model's batches (it often gives no
grade) and would depart from the benchmark's reranker, which keeps going with first-stage order.
A received reply, usable or not, resets the count of failures in a row. Unparsable units are
counted (``BatchReport.unparsable``) and shown; what becomes of the unit is the method's: the
judge fails the pair (not cached, so a rerun asks again), a reranker keeps its fallback.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from r2med_core.progress import Progress, notify

#: A job's ``Unparsable`` without a fallback: the unit fails.
_NO_FALLBACK: Any = object()


@dataclass(frozen=True)
class RetryPolicy:
    """How hard a batch tries: per request, 429 and 5xx are retried up to ``max_retries`` times with
    exponential backoff from ``base_delay`` s (Retry-After honoured, at most ``max_delay`` s each;
    timeouts and refused connections at most twice), and ``max_consecutive_failures`` failed units
    in a row stop the batch. ``sleep`` waits between tries (tests pass their own)."""

    max_retries: int = 5
    base_delay: float = 1.0
    max_delay: float = 60.0
    max_consecutive_failures: int = 3
    sleep: Callable[[float], None] = time.sleep

    def delay(self, attempt: int) -> float:
        """The backoff before try ``attempt + 2`` when the server names none."""
        return min(self.base_delay * (2**attempt), self.max_delay)


#: The policy of a batch or request that names none.
DEFAULT_RETRY = RetryPolicy()


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


class LLMFailure(Exception):
    """One request could not be answered; ``message`` says why (the key already redacted).
    ``batch``: stop the whole batch (wrong key, server down), not just this request. ``context``:
    ``(context length, prompt tokens)`` (each None where unknown) when the server's context cannot hold
    the prompt, so a caller whose every prompt is alike can stop at once (the client decides it)."""

    def __init__(
        self, message: str, *, batch: bool = False, context: tuple[int | None, int | None] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.batch = batch
        self.context = context


class Unparsable(Exception):
    """A job's reply arrived but cannot be used (``message`` says why). With a ``fallback`` the unit
    is done with it (a reranker's first-stage order); without, the unit fails. Never counts toward
    the stop rule (module docstring)."""

    def __init__(self, message: str, fallback: Any = _NO_FALLBACK) -> None:
        super().__init__(message)
        self.message = message
        self.fallback = fallback


class Stopped(Exception):
    """A job was asked to stop before sending its request (``should_stop``)."""


def _unit(unit: Hashable) -> str:
    """A unit as messages name it: ``query q1, doc7`` for a (query, document) pair, else itself."""
    if isinstance(unit, tuple) and len(unit) == 2:
        return f"query {unit[0]}, {unit[1]}"
    return str(unit)


@dataclass
class BatchReport:
    """What a batch did, for every LLM batch (rewriting, reranking, judging).

    ``results`` holds each finished unit's product (a rewrite's text, a grade, a reranked list),
    cached ones included; ``failed`` the units that failed, with why; ``unparsable`` the units whose
    reply could not be used (failed too, unless the method has a fallback). ``stopped`` is True when
    the batch ended before every unit was tried — asked to, or because of ``error`` (wrong key,
    unreachable server, failures in a row); ``remaining`` lists the units not tried, which the next
    run picks up. ``sent`` counts requests answered now, ``from_cache`` replies taken from the cache;
    ``tokens`` is what this batch spent (cache hits cost nothing new), ``spent`` what every reply
    used cost to make, cached ones included. ``label`` starts the summary (what ran and who), ``noun``
    names the units in messages and ``verb`` what was done to the ones sent ("generated", "judged"),
    so each caller's summary reads as it always did.
    """

    label: str
    endpoint: str
    noun: str = "queries"
    verb: str = "sent"
    results: dict[Any, Any] = field(default_factory=dict)
    sent: int = 0
    from_cache: int = 0
    failed: dict[Any, str] = field(default_factory=dict)
    unparsable: dict[Any, str] = field(default_factory=dict)
    stopped: bool = False
    error: str | None = None
    remaining: list[Any] = field(default_factory=list)
    notes: dict[Any, str] = field(default_factory=dict)
    usage: dict[Any, Usage] = field(default_factory=dict)  # per unit: what making its result cost
    tokens: Usage = field(default_factory=Usage)
    spent: Usage = field(default_factory=Usage)
    seconds: dict[Any, float] = field(default_factory=dict)  # per unit sent now: its reply's wall time

    @property
    def complete(self) -> bool:
        """Every unit is done."""
        return not self.failed and not self.remaining and not self.stopped and self.error is None

    def summary(self) -> str:
        parts = [f"{self.sent} {self.verb}", f"{self.from_cache} from cache"]
        if self.failed:
            parts.append(f"{len(self.failed)} failed")
        if self.unparsable:
            parts.append(f"{len(self.unparsable)} unparsable")
        if self.remaining:
            parts.append(f"{len(self.remaining)} not tried")
        if self.notes:
            parts.append(f"{len(self.notes)} {self.noun} with notes")
        if self.tokens:
            parts.append(self.tokens.describe())
        return f"{self.label} ({self.endpoint}): " + ", ".join(parts)

    def problem(self) -> str | None:
        """One line saying what went wrong and what to do (None when complete), for the CLI and the app."""
        resume = f"run again to resume (finished {self.noun} are cached)"
        if self.error:
            return self.error if "run again" in self.error else f"{self.error}; {resume}"
        if self.failed:
            unit, message = next(iter(self.failed.items()))
            more = f" (and {len(self.failed) - 1} more)" if len(self.failed) > 1 else ""
            return f"{len(self.failed)} {self.noun} failed — {_unit(unit)}: {message}{more}; run again to retry them"
        if self.stopped:
            return f"stopped with {len(self.remaining)} {self.noun} left; {resume}"
        return None

    def ticker(
        self,
        progress: Progress | None,
        total: int,
        what: str,
        eta: Callable[[], str],
        cancelled: Callable[[], None] | None = None,
    ) -> Callable[[], None]:
        """A ``run_batch`` tick that tells ``progress`` "``what``: done/total noun" and the ETA ``eta()``
        says, counting finished and failed units (cached ones included). ``progress`` may raise to cancel
        (the app's Cancel, a UI's rerun, Ctrl-C): ``cancelled`` is called first (say, to close the
        streamed replies), then the error goes on and stops the batch."""

        def tell() -> None:
            done = len(self.results) + len(self.failed)
            try:
                notify(progress, done / max(total, 1), f"{what}: {done}/{total} {self.noun}{eta()}")
            except BaseException:
                if cancelled is not None:
                    cancelled()
                raise

        return tell


def run_batch(
    jobs: Sequence[tuple[Hashable, Callable[[], Any]]],
    report: BatchReport,
    *,
    policy: RetryPolicy,
    fail_message: Callable[[Exception], str],
    workers: int = 1,
    should_stop: Callable[[], bool] | None = None,
    tick: Callable[[], None] | None = None,
) -> dict[Any, Any]:
    """Run ``(unit, job)`` pairs, at most ``workers`` at a time, in order; returns each finished
    unit's result (an ``Unparsable``'s fallback included) and fills ``report``'s failed,
    unparsable, stopped, error and remaining. ``fail_message`` says what an unexpected error in a
    job was (the key redacted): a bug must not lose the finished work. ``tick`` reports progress,
    from this thread only (a UI's progress widget may not be told from a worker); it may raise to
    cancel, and running requests still finish."""
    done: dict[Any, Any] = {}
    queue = list(reversed(jobs))
    running: dict[Future[Any], Hashable] = {}
    consecutive = 0
    slots = max(1, workers)
    with ThreadPoolExecutor(max_workers=slots, thread_name_prefix="r2med-llm") as pool:
        while queue or running:
            while queue and len(running) < slots and not report.stopped:
                if should_stop is not None and should_stop():
                    report.stopped = True
                    break
                unit, job = queue.pop()
                running[pool.submit(job)] = unit
            if not running:
                break
            finished, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in finished:
                unit = running.pop(future)
                failure: LLMFailure | None = None
                try:
                    done[unit] = future.result()
                    consecutive = 0
                except Stopped:
                    report.stopped = True
                except Unparsable as unusable:
                    consecutive = 0  # the server answered: not a failure in a row
                    report.unparsable[unit] = unusable.message
                    if unusable.fallback is _NO_FALLBACK:
                        report.failed[unit] = unusable.message
                    else:
                        done[unit] = unusable.fallback
                except LLMFailure as err:
                    failure = err
                except Exception as err:  # a bug in a job must not lose the finished units
                    failure = LLMFailure(fail_message(err))
                if failure is not None:
                    report.failed[unit] = failure.message
                    consecutive += 1
                    _stop_rule(report, failure, consecutive, policy)
            if tick is not None:
                tick()
            if report.stopped:
                queue.clear()  # running requests still finish (and are cached); nothing new starts
    report.remaining = [unit for unit, _ in jobs if unit not in done and unit not in report.failed]
    return done


def _stop_rule(report: BatchReport, failure: LLMFailure, consecutive: int, policy: RetryPolicy) -> None:
    """Stop on a failure that dooms the batch, or after ``max_consecutive_failures`` in a row."""
    if failure.batch and not report.error:
        report.error, report.stopped = failure.message, True
    elif consecutive >= policy.max_consecutive_failures and not report.stopped:
        report.error = f"{consecutive} {report.noun} in a row failed, stopping — last: {failure.message}"
        report.stopped = True
