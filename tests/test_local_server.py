"""The local LLM server's command, named endpoints and what a server says it can take — without a server.

The real server's behaviour is tested in test_llm_real_server.py; these are the parts a user meets
when it is missing or misconfigured, and the readers of other servers' answers (llama.cpp's
llama-server, vLLM), which CI has no copy of.
"""

from __future__ import annotations

import pytest

from r2med_core.cli import main
from r2med_core.llm import local_server
from r2med_core.llm.client import context_error, context_from_listing
from r2med_core.llm.endpoints import (
    LOCAL,
    EndpointError,
    Named,
    named_endpoints,
    operator_llm,
    resolve_named,
    split_named,
)
from r2med_core.settings import Settings, load_settings


def test_llm_server_without_the_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(local_server, "installed", lambda: False)
    assert main(["llm-server"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the local LLM server needs llama-cpp-python")
    assert '"llama-cpp-python[server]==0.3.36"' in err and "-DGGML_NATIVE=OFF" in err and "--no-cache-dir" in err
    assert "Traceback" not in err


def test_generate_with_the_local_endpoint_not_running_says_how_to_start_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(local_server, "DEFAULT_PORT", local_server.free_port())  # nothing listens there
    monkeypatch.delenv("R2MED_LLM_ENDPOINTS", raising=False)
    assert main(["generate", "--method", "hyde", "--demo", "clinical-case", "--endpoint", "local"]) == 2
    err = capsys.readouterr().err
    assert "No local LLM server answers at http://127.0.0.1:" in err
    assert ("r2med llm-server" in err) if local_server.installed() else ("pip install" in err)
    assert main(["generate", "--method", "hyde", "--demo", "clinical-case", "--endpoint", "nope"]) == 2
    assert "No LLM endpoint is named 'nope'" in capsys.readouterr().err


def test_named_endpoints_come_from_the_operator_and_local_gets_no_key() -> None:
    assert split_named("gpu=http://gpu-box:8000/v1 Qwen/Qwen2.5-7B-Instruct") == (
        "gpu",
        "http://gpu-box:8000/v1",
        "Qwen/Qwen2.5-7B-Instruct",
    )
    assert split_named("https://example.org/v1") == (None, "https://example.org/v1", None)
    settings = load_settings({"R2MED_LLM_ENDPOINTS": "gpu=http://GPU-box:8000/v1/ Qwen,http://other/v1"})
    named = named_endpoints(settings)
    assert named["gpu"] == Named("http://gpu-box:8000/v1", "Qwen")
    assert named[LOCAL].url == f"http://127.0.0.1:{local_server.DEFAULT_PORT}/v1" and not named[LOCAL].keyed
    operator = operator_llm(settings, {"OPENAI_API_KEY": "sk-operator"})
    assert operator.owns("http://gpu-box:8000/v1")  # a named entry is one of the operator's endpoints
    resolved = resolve_named("gpu", "", operator, settings, temperature=0.0)
    assert resolved.endpoint is not None and resolved.endpoint.api_key == "sk-operator"
    assert resolved.endpoint.model == "Qwen"
    with pytest.raises(EndpointError, match=r"R2MED_LLM_ENDPOINTS \(bad\)"):
        named_endpoints(load_settings({"R2MED_LLM_ENDPOINTS": "bad=http://user:pw@host/v1"}))


def test_concurrency_is_an_operator_setting() -> None:
    assert Settings().llm_concurrency == 1 and load_settings({}).llm_concurrency == 1
    assert load_settings({"R2MED_LLM_CONCURRENCY": "8"}).llm_concurrency == 8
    with pytest.raises(ValueError, match="R2MED_LLM_CONCURRENCY"):
        load_settings({"R2MED_LLM_CONCURRENCY": "0"})


def test_what_servers_say_about_their_context_is_read() -> None:
    # llama-cpp-python, vLLM / OpenAI, llama.cpp's llama-server
    assert context_error({"error": {"message": "Requested tokens (3012) exceed context window of 2048"}}) == (
        2048,
        3012,
    )
    vllm = (
        "This model's maximum context length is 8192 tokens. However, you requested 12000 tokens "
        "(1760 in the messages, 10240 in the completion). Please reduce the length."
    )
    assert context_error({"message": vllm}) == (8192, 1760)
    server = {"error": {"type": "exceed_context_size_error", "n_ctx": 4096, "n_prompt_tokens": 5000}}
    assert context_error(server) == (4096, 5000)
    assert context_error({"error": {"message": "model not found"}}) is None
    assert context_from_listing({"default_generation_settings": {"n_ctx": 16384}}, None, "m") == 16384
    models = {"data": [{"id": "a", "max_model_len": 4096}, {"id": "m", "max_model_len": 32768}]}
    assert context_from_listing(None, models, "m") == 32768
    assert context_from_listing(None, {"data": [{"id": "x", "owned_by": "me"}]}, "x") is None  # llama-cpp-python
    assert context_from_listing("<html>", ["odd"], "m") is None


def test_the_server_command_is_local_only_and_waits_its_turn() -> None:
    command = local_server.server_command(
        local_server.Path("/m.gguf"), port=8091, n_ctx=16384, alias="smollm2-135m"
    )
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command[command.index("--n_ctx") + 1] == "16384"
    assert command[command.index("--interrupt_requests") + 1] == "False"
