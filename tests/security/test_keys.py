"""Issue 9 item 1: the operator's API key goes only to the operator's endpoints, never to a URL a
visitor types; credentials in a URL are refused unrepeated; a reply echoing a key is redacted before
it is cached or written. Issue 29 items 1 and 2: a redirect is never followed (so the key never
reaches the host it points to), and a query string or fragment in a base URL is refused like
credentials. Real local HTTP servers record the Authorization header they receive."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from r2med_core import load_demo
from r2med_core.llm.batch import RetryPolicy
from r2med_core.llm.client import Endpoint, LLMFailure, chat
from r2med_core.llm.endpoints import (
    NO_KEY,
    OPERATOR_KEY,
    VISITOR_KEY,
    EndpointError,
    normalize_url,
    operator_llm,
    resolve_endpoint,
)
from r2med_core.llm.generation import GenerationError, generate_rewrites, hypothetical_document, save_rewrites
from r2med_core.retrieval.dense import DenseModelUnavailable, openai_endpoint
from r2med_core.settings import load_settings

from ..test_app import open_app
from ..test_cli import cli
from ..test_generation import FakeLLM
from ._app import shown_text

OPERATOR_SECRET = "sk-operator-SECRET-0f9e8d7c6b5a"
VISITOR_SECRET = "sk-visitor-own-1a2b3c"
ASK = "why do fingertips wrinkle in water"


def _keys_seen(server: FakeLLM) -> list[str | None]:
    return [r["auth"] for r in server.requests]


def _operator(env: dict[str, str]):  # type: ignore[no-untyped-def]
    return operator_llm(load_settings(env), environ=env)


def test_core_never_sends_the_operator_key_to_a_visitor_url() -> None:
    demo = load_demo("qa-reference")
    with FakeLLM() as operator_server, FakeLLM() as visitor_server:
        env = {"OPENAI_API_KEY": OPERATOR_SECRET, "OPENAI_BASE_URL": operator_server.url}
        operator = _operator(env)

        typed = resolve_endpoint(visitor_server.url, "", "fake-gpt", operator)
        assert typed.credential_source == NO_KEY and typed.note and OPERATOR_SECRET not in typed.note
        text, problem = hypothetical_document(demo, ASK, typed.endpoint)
        assert text and problem is None
        assert visitor_server.requests, "the visitor's server was asked"
        assert all(OPERATOR_SECRET not in (auth or "") for auth in _keys_seen(visitor_server))

        own = resolve_endpoint(visitor_server.url, VISITOR_SECRET, "fake-gpt", operator)
        assert own.credential_source == VISITOR_KEY
        hypothetical_document(demo, ASK + "?", own.endpoint)
        assert _keys_seen(visitor_server)[-1] == f"Bearer {VISITOR_SECRET}"

        # Left empty, the URL is the operator's, and the operator's key goes there (and only there).
        default = resolve_endpoint("", "", "fake-gpt", operator)
        assert default.credential_source == OPERATOR_KEY
        hypothetical_document(demo, ASK, default.endpoint)
        assert _keys_seen(operator_server) == [f"Bearer {OPERATOR_SECRET}"]
        # The same server spelled differently is still the operator's.
        spelled = operator_server.url.replace("127.0.0.1", "127.0.0.1:").replace("::", ":") + "/"
        assert resolve_endpoint(spelled.upper().replace("/V1/", "/v1/"), "", "m", operator).credential_source == (
            OPERATOR_KEY
        )
    assert OPERATOR_SECRET not in repr(operator) + repr(default.endpoint)


def test_operator_endpoint_list_from_secrets_and_openai_default() -> None:
    nothing = _operator({"OPENAI_API_KEY": OPERATOR_SECRET})
    assert nothing.endpoints == ("https://api.openai.com/v1",)
    assert resolve_endpoint("https://api.openai.com/v1/", "", "gpt", nothing).credential_source == OPERATOR_KEY
    assert resolve_endpoint("https://api.openai.com.evil.example/v1", "", "gpt", nothing).credential_source == NO_KEY

    secrets = {"OPENAI_API_KEY": OPERATOR_SECRET, "R2MED_LLM_ENDPOINTS": ["http://vllm.lab:8000/v1", "http://b/v1"]}
    listed = operator_llm(load_settings({}, extra=secrets), environ={}, secrets=secrets)
    assert listed.endpoints == ("http://vllm.lab:8000/v1", "http://b/v1")
    assert resolve_endpoint("http://B/v1", "", "m", listed).endpoint.api_key == OPERATOR_SECRET
    assert resolve_endpoint("http://vllm.lab:8001/v1", "", "m", listed).endpoint.api_key is None


@pytest.mark.parametrize(
    "url", ["https://alice:pa55word@api.example/v1", "http://pa55word@127.0.0.1:9/v1", "http://u:pa55word@[::1]/v1"]
)
def test_credentials_in_a_url_are_refused_without_repeating_them(url: str) -> None:
    with pytest.raises(EndpointError) as err:
        normalize_url(url)
    assert "pa55word" not in str(err.value)
    resolved = resolve_endpoint(url, VISITOR_SECRET, "m", _operator({}))
    assert resolved.endpoint is None and "pa55word" not in (resolved.note or "")


IN_THE_URL = ["http://127.0.0.1:9/v1?api-key=pa55word", "https://api.example/v1/?key=pa55word", "http://h/v1#pa55word"]


@pytest.mark.parametrize("url", IN_THE_URL)
def test_a_query_string_or_fragment_in_a_base_url_is_refused_without_repeating_it(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29 item 2: a key pasted as ``?api-key=…`` is refused like a password in the URL, by every
    way a base URL comes in: typed in the app, ``--base-url`` / an ``Endpoint``, the embeddings server."""
    with pytest.raises(EndpointError) as err:
        normalize_url(url)
    assert "must not contain a query string or fragment" in str(err.value) and "pa55word" not in str(err.value)
    resolved = resolve_endpoint(url, VISITOR_SECRET, "m", _operator({}))
    assert resolved.endpoint is None and "query string" in (resolved.note or "")
    assert "pa55word" not in (resolved.note or "")
    with pytest.raises(GenerationError) as refused:
        Endpoint(url, "m")
    assert "query string" in str(refused.value) and "pa55word" not in str(refused.value)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    with pytest.raises(DenseModelUnavailable) as embeddings:
        openai_endpoint()
    assert "query string" in str(embeddings.value) and "pa55word" not in str(embeddings.value)


@pytest.mark.parametrize("url", [IN_THE_URL[0], "http://alice:pa55word@127.0.0.1:9/v1"])
@pytest.mark.parametrize("variable", ["OPENAI_BASE_URL", "R2MED_LLM_ENDPOINTS"])
def test_an_operator_base_url_that_cannot_be_used_is_named_not_skipped(variable: str, url: str) -> None:
    """Skipped, it would leave OpenAI's endpoint as the operator's, and the operator's key would go there."""
    with pytest.raises(EndpointError) as err:
        _operator({"OPENAI_API_KEY": OPERATOR_SECRET, variable: url})
    assert variable in str(err.value) and "pa55word" not in str(err.value)


def test_the_app_names_an_operator_base_url_with_a_query_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", IN_THE_URL[0])
    at = open_app()
    assert not at.exception
    assert any("OPENAI\\_BASE\\_URL" in e.value and "misconfigured" in e.value for e in at.error)
    assert "pa55word" not in shown_text(at)
    assert not at.sidebar.radio  # nothing opens with it


@pytest.mark.parametrize("source", ["--base-url", "OPENAI_BASE_URL"])
def test_cli_refuses_a_query_string_in_the_base_url_without_printing_or_storing_it(
    source: str, tmp_path: Path, _isolated_cache: Path
) -> None:
    with FakeLLM() as server:
        url = f"{server.url}?api-key=pa55word"
        given, env = (["--base-url", url], {}) if source == "--base-url" else ([], {"OPENAI_BASE_URL": url})
        done = cli(
            "generate", "--method", "hyde", "--demo", "qa-reference", "--model", "m", "--limit", "1",
            "--output", str(tmp_path / "out"), *given, env=env,
        )  # fmt: skip
        assert not server.requests
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "must not contain a query string or fragment" in done.stderr
    assert "pa55word" not in done.stdout + done.stderr
    stored = [p for p in tmp_path.rglob("*") if p.is_file() and b"pa55word" in p.read_bytes()]
    assert not stored and not (tmp_path / "out").exists()


def test_the_app_sends_the_operator_key_only_to_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Operator key in the environment, visitor types their own URL and turns HyDE on (What-if page):
    the visitor's server never sees the operator key, the sidebar says "no key", nothing shows the key."""
    with FakeLLM() as operator_server, FakeLLM() as visitor_server:
        monkeypatch.setenv("OPENAI_API_KEY", OPERATOR_SECRET)
        monkeypatch.setenv("OPENAI_BASE_URL", operator_server.url)
        at = open_app("whatif", task="qa-reference", systems=["bm25"], ask=ASK)
        at.text_input(key="w_llm_url").input(visitor_server.url).run()
        at.text_input(key="w_llm_model").input("fake-gpt").run()
        at.toggle(key="w_ask_hyde").set_value(True).run()
        assert not at.exception
        assert any("Hypothetical document" in m.value for m in at.markdown)
        assert len(visitor_server.requests) == 1
        assert OPERATOR_SECRET not in (visitor_server.requests[0]["auth"] or "")
        assert any("Key in use: **no key**" in c.value for c in at.sidebar.caption)
        assert any("not sent" in w.value for w in at.sidebar.warning)
        assert OPERATOR_SECRET not in shown_text(at)

        # Base URL left empty: the operator's endpoint, with the operator's key.
        at.text_input(key="w_llm_url").input("").run()
        assert not at.exception
        assert [r["auth"] for r in operator_server.requests] == [f"Bearer {OPERATOR_SECRET}"]
        assert any("Key in use: **operator key**" in c.value for c in at.sidebar.caption)
        assert OPERATOR_SECRET not in shown_text(at)
        assert len(visitor_server.requests) == 1


def test_endpoints_listed_in_secrets_get_the_operator_key_from_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeLLM() as listed, FakeLLM() as other:
        secrets = {"OPENAI_API_KEY": OPERATOR_SECRET, "R2MED_LLM_ENDPOINTS": [listed.url]}
        at = open_app("whatif", secrets=secrets, task="qa-reference", systems=["bm25"], ask=ASK)
        at.text_input(key="w_llm_model").input("fake-gpt").run()
        at.text_input(key="w_llm_url").input(listed.url + "/").run()
        at.toggle(key="w_ask_hyde").set_value(True).run()
        assert [r["auth"] for r in listed.requests] == [f"Bearer {OPERATOR_SECRET}"]
        at.text_input(key="w_llm_url").input(other.url).run()
        assert len(other.requests) == 1 and OPERATOR_SECRET not in (other.requests[0]["auth"] or "")
        assert not at.exception and OPERATOR_SECRET not in shown_text(at)


@pytest.mark.parametrize(
    ("typed", "refusal"),
    [
        (lambda url: url.replace("http://", "http://alice:pa55word@"), "must not contain a user name or password"),
        (lambda url: url + "?api-key=pa55word", "must not contain a query string or fragment"),  # issue 29 item 2
    ],
)
def test_credentials_typed_in_the_base_url_are_never_shown_sent_or_stored(
    typed: Callable[[str], str], refusal: str, _isolated_cache: Path
) -> None:
    with FakeLLM() as server:
        url = typed(server.url)
        at = open_app("rewriting", task="qa-reference", systems=["bm25"])
        at.text_input(key="w_llm_url").input(url).run()
        at.text_input(key="w_llm_model").input("fake-gpt").run()
        assert not at.exception
        assert any(refusal in w.value for w in at.sidebar.warning)
        assert "pa55word" not in shown_text(at).replace(url, "")  # only the visitor's own field holds it
        assert not [b for b in at.button if b.key == "w_gen_start"]  # nothing to start with that URL
        assert not server.requests
    stored = [p for p in _isolated_cache.rglob("*") if p.is_file() and b"pa55word" in p.read_bytes()]
    assert not stored


def test_cli_refuses_credentials_in_the_base_url_without_printing_them() -> None:
    done = cli(
        "generate", "--method", "hyde", "--demo", "qa-reference", "--model", "m",
        "--base-url", "http://alice:pa55word@127.0.0.1:9/v1",
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "must not contain a user name or password" in done.stderr
    assert "pa55word" not in done.stdout + done.stderr


def test_a_reply_that_echoes_the_key_is_redacted_before_it_is_cached_or_written(
    tmp_path: Path, _isolated_cache: Path
) -> None:
    demo = load_demo("qa-reference")
    echo = {text: f"Sure. Your key is {VISITOR_SECRET}; now the passage." for text in demo.queries.values()}
    with FakeLLM(echo) as server:
        endpoint = resolve_endpoint(server.url, VISITOR_SECRET, "fake-gpt", _operator({})).endpoint
        report = generate_rewrites(demo, "hyde", endpoint, llm_name="echo")
        assert report.sent == len(demo.queries)
    assert all(VISITOR_SECRET not in text and "***" in text for text in report.results.values())
    written = save_rewrites(report.results, demo, tmp_path / "query_with_hydoc.jsonl")
    files = [p for p in [*_isolated_cache.rglob("*"), written] if p.is_file()]
    assert len(files) > len(demo.queries)  # every reply, the recorded set and the written file
    assert not [p for p in files if VISITOR_SECRET.encode() in p.read_bytes()]


def _redirecting_to_another_host(target: FakeLLM, status: int) -> FakeLLM:
    """The operator's endpoint (127.0.0.1:P) answering every request with a redirect to ``target``
    spelled as localhost:Q: another origin, which must never see the operator's key."""
    port = target.url.rsplit(":", 1)[1].split("/")[0]
    server = FakeLLM()
    server.script = [(status, {"Location": f"http://localhost:{port}/v1/chat/completions"}, {})] * 20
    return server


@pytest.mark.parametrize("status", [307, 308, 302])
def test_a_redirect_never_takes_the_operator_key_to_another_host(status: int) -> None:
    """Issue 29 item 1, through the client the app's live features use (the What-if page's HyDE, LLM
    reranking and judging all go through ``ChatClient``): the redirect is refused and said so."""
    demo = load_demo("qa-reference")
    with FakeLLM() as elsewhere, _redirecting_to_another_host(elsewhere, status) as operator_server:
        operator = _operator({"OPENAI_API_KEY": OPERATOR_SECRET, "OPENAI_BASE_URL": operator_server.url})
        resolved = resolve_endpoint("", "", "fake-gpt", operator)
        assert resolved.credential_source == OPERATOR_KEY
        text, problem = hypothetical_document(demo, ASK, resolved.endpoint)
        assert _keys_seen(operator_server) == [f"Bearer {OPERATOR_SECRET}"]  # the endpoint's own origin only
        assert not elsewhere.requests, "the redirect was followed"
        assert text is None and problem and "redirect" in problem and OPERATOR_SECRET not in problem
        with pytest.raises(LLMFailure) as failed:
            chat(resolved.endpoint, [{"role": "user", "content": ASK}], retry=RetryPolicy(max_retries=0))
        assert failed.value.batch and "redirect" in failed.value.message
        assert not elsewhere.requests


def test_the_cli_never_follows_a_redirect_with_the_key(tmp_path: Path) -> None:
    """Issue 29 item 1 through ``generate --base-url``: exit 3 with the reason; the other host sees nothing."""
    with FakeLLM() as elsewhere, _redirecting_to_another_host(elsewhere, 307) as server:
        done = cli(
            "generate", "--method", "hyde", "--demo", "qa-reference", "--model", "m", "--limit", "1",
            "--base-url", server.url, "--output", str(tmp_path / "out"), env={"OPENAI_API_KEY": OPERATOR_SECRET},
        )  # fmt: skip
        assert not elsewhere.requests, "the redirect was followed"
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert "redirect" in done.stderr.splitlines()[-1]
    assert OPERATOR_SECRET not in done.stdout + done.stderr
    assert not (tmp_path / "out").exists()
