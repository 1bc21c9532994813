"""Issue 9 item 10: a hostile or broken LLM server cannot hold a query past ``--timeout`` or fill the
disk, output files get normal permissions, and usage mistakes are usage errors (exit 2).

Every test talks to a real HTTP server on 127.0.0.1 that misbehaves on purpose."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from r2med_core import load_demo
from r2med_core.llm import generation as gen
from r2med_core.llm.batch import RetryPolicy
from r2med_core.llm.client import Endpoint
from r2med_core.llm.generation import generate_rewrites

from ..test_cli import cli
from ..test_generation import _choice

ROOT = Path(__file__).resolve().parents[2]
TICK = 0.25  # seconds between two dribbled bytes


def _completion(content: str) -> bytes:
    body = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m", "choices": [_choice(content)]}
    return json.dumps(body).encode()


class HostileLLM:
    """``POST /v1/chat/completions`` answered by ``mode``: "dribble-body", "dribble-headers", "huge" or "ok"."""

    def __init__(self, mode: str, huge_bytes: int = 5 << 20) -> None:
        self.mode = mode
        self.huge_bytes = huge_bytes
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.requests += 1
                try:
                    owner._respond(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up, as it should

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    def _dribble(self, handler: BaseHTTPRequestHandler, data: bytes, seconds: float = 60) -> None:
        end = time.monotonic() + seconds
        for byte in data:
            if time.monotonic() > end:
                return
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(TICK)

    def _respond(self, handler: BaseHTTPRequestHandler) -> None:
        if self.mode == "dribble-headers":
            handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
            self._dribble(handler, b"X-Slow: " + b"a" * 1000 + b"\r\n")
            return
        data = _completion("A hypothetical passage." if self.mode != "huge" else "x" * self.huge_bytes)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if self.mode == "dribble-body":
            self._dribble(handler, data)
        else:
            handler.wfile.write(data)

    def __enter__(self) -> HostileLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def demo():
    import openai  # noqa: F401  (imported before any timing: it takes seconds on a busy machine)

    getattr(gen, "_ssl_context", lambda: None)()
    return load_demo("clinical-case")


def _one(demo) -> list[str]:
    return [next(iter(demo.queries))]


@pytest.mark.parametrize("mode", ["dribble-body", "dribble-headers"])
def test_timeout_is_a_total_deadline_per_request(demo, mode: str) -> None:
    """A byte every 0.25 s never trips a per-read timeout; the 1.5 s deadline must still hold."""
    with HostileLLM(mode) as server:
        started = time.monotonic()
        result = generate_rewrites(
            demo, "hyde", Endpoint(server.url, "m", timeout=1.5), query_ids=_one(demo), retry=RetryPolicy(max_retries=0)
        )
        elapsed = time.monotonic() - started
    assert elapsed < 6, f"one request held the query {elapsed:.1f} s with a 1.5 s timeout"
    assert not result.results and result.problem()
    assert "no reply within 1.5 s" in result.problem()


def test_retries_also_respect_the_deadline(demo) -> None:
    with HostileLLM("dribble-body") as server:
        started = time.monotonic()
        result = generate_rewrites(
            demo,
            "hyde",
            Endpoint(server.url, "m", timeout=1.0),
            query_ids=_one(demo),
            retry=RetryPolicy(max_retries=5, base_delay=0.01, max_delay=0.01),
        )
        elapsed = time.monotonic() - started
    assert server.requests == 3  # a timeout is retried twice, each attempt within its deadline
    assert elapsed < 3 * 1.0 + 4
    assert not result.results


def test_an_oversized_reply_fails_its_query_and_writes_nothing(demo, monkeypatch: pytest.MonkeyPatch) -> None:
    with HostileLLM("huge", huge_bytes=5 << 20) as server:
        once = RetryPolicy(max_retries=0)
        result = generate_rewrites(demo, "hyde", Endpoint(server.url, "m"), query_ids=_one(demo), retry=once)
        assert not result.results and result.sent == 0
        [message] = result.failed.values()
        assert "larger than 1 MB" in message and "R2MED_LLM_REPLY_MAX_MB" in message
        # The operator's setting raises the cap.
        monkeypatch.setenv("R2MED_LLM_REPLY_MAX_MB", "8")
        allowed = generate_rewrites(demo, "hyde", Endpoint(server.url, "m"), query_ids=_one(demo), retry=once)
    assert allowed.sent == 1 and len(next(iter(allowed.results.values()))) == 5 << 20


def test_generated_and_evaluated_files_get_normal_permissions(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)  # the child processes inherit it
    try:
        with HostileLLM("ok") as server:
            out = tmp_path / "hyde.jsonl"
            done = cli(
                "generate", "--method", "hyde", "--demo", "clinical-case", "--model", "m", "--base-url", server.url,
                "--output", str(out), "--limit", "2", env={"OPENAI_API_KEY": ""},
            )  # fmt: skip
        evaluated = cli(
            "eval", "--retriever", "bm25", "--demo", "clinical-case", "--output-dir", str(tmp_path / "runs")
        )
    finally:
        os.umask(old_umask)
    assert done.returncode == 0, done.stderr
    assert out.stat().st_mode & 0o777 == 0o644
    assert evaluated.returncode == 0, evaluated.stderr
    for written in (tmp_path / "runs").iterdir():
        assert written.stat().st_mode & 0o777 == 0o644, written


GENERATE = [
    "generate",
    "--method",
    "hyde",
    "--demo",
    "clinical-case",
    "--model",
    "m",
    "--base-url",
    "http://127.0.0.1:9/v1",
]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--timeout", "-5"),
        ("--timeout", "0"),
        ("--timeout", "nan"),
        ("--temperature", "nan"),
        ("--temperature", "-1"),
        ("--max-tokens", "0"),
        ("--workers", "0"),
        ("--max-retries", "-1"),
        ("--limit", "0"),
    ],
)
def test_generate_usage_mistakes_exit_2_with_a_clear_message(option: str, value: str, capsys) -> None:
    from r2med_core.cli import main

    with pytest.raises(SystemExit) as stopped:
        main([*GENERATE, option, value])
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert f"error: argument {option}: " in err and value in err


def test_a_negative_timeout_is_a_usage_error_in_a_real_process() -> None:
    done = cli(*GENERATE, "--timeout", "-5")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: argument --timeout: must be a finite number > 0, got '-5'" in done.stderr
    assert "Traceback" not in done.stderr and "malformed response" not in done.stderr + done.stdout


def test_a_planted_deeply_nested_reply_in_the_cache_is_a_miss_not_a_crash(demo, _isolated_cache: Path) -> None:
    with HostileLLM("ok") as server:
        first = generate_rewrites(demo, "hyde", Endpoint(server.url, "m"), query_ids=_one(demo), llm_name="w")
        assert first.sent == 1
        [reply] = (_isolated_cache / "generations" / "replies").rglob("*.json")
        reply.write_text('{"hy_doc": ' + "[" * 100_000 + "]" * 100_000 + "}")
        for recorded in (_isolated_cache / "generations" / "sets").rglob("*.jsonl"):
            recorded.write_text('{"id": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
        again = generate_rewrites(demo, "hyde", Endpoint(server.url, "m"), query_ids=_one(demo), llm_name="w")
    assert again.sent == 1 and again.results == first.results
