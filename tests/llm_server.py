"""A real LLM server for the tests: llama-cpp-python's server with SmolLM2-135M, once per session.

``llama_server`` (session-scoped; conftest imports it) starts it through the product's own
``r2med_core.llm.local_server.start`` on a free 127.0.0.1 port and yields a ``LlamaServer``: its base
URL, the model name to send, its context, and ``endpoint()`` — an ``Endpoint`` sampling at
temperature 0 with a fixed seed, so a test's replies are the same on every run. It skips, naming the
extra to install, when llama-cpp-python's server or the GGUF is not installed (``.ci/run`` installs
both, so CI runs these tests).

Tests that must kill a server (a server dying mid-run) start their own with ``own_server()``; the
session's is shared and must stay up.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from r2med_core.llm import local_server
from r2med_core.llm.client import Endpoint

#: The seed every real-server test samples with (temperature 0 makes it greedy anyway).
SEED = 42
#: A context big enough for every prompt the tests send, small enough to start fast.
N_CTX = 8192


def skip_reason() -> str | None:
    """Why the real-server tests cannot run here, or None."""
    if not local_server.installed():
        return f"llama-cpp-python's server is not installed (the 'llm' extra: {local_server.INSTALL_COMMAND})"
    try:
        local_server.model_file(local_server.DEFAULT_MODEL)
    except local_server.ServerError as err:
        return str(err)
    return None


@dataclass(frozen=True)
class LlamaServer:
    """A running server as the tests use it."""

    base_url: str
    model: str
    n_ctx: int
    model_path: Path
    server: local_server.LocalServer

    def endpoint(self, **settings: Any) -> Endpoint:
        """An endpoint to this server: temperature 0, seed ``SEED``, ``settings`` on top (max_tokens …)."""
        chosen: dict[str, Any] = {"temperature": 0.0, "seed": SEED, "timeout": 120.0, **settings}
        return Endpoint(base_url=self.base_url, model=self.model, **chosen)


def own_server(tmp_path: Path, n_ctx: int = N_CTX) -> LlamaServer:
    """A server of the test's own (the caller stops it: ``.server.stop()``); skips like ``llama_server``."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    server = local_server.start(n_ctx=n_ctx, threads=2, log=tmp_path / "llama-server.log")
    return LlamaServer(server.base_url, server.model, n_ctx, server.model_path, server)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """The session's real LLM server (started on first use, stopped at the end)."""
    running = own_server(tmp_path_factory.mktemp("llama-server"))
    try:
        yield running
    finally:
        running.server.stop()
