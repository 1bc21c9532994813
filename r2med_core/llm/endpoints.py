"""Where the operator's LLM key may go: the endpoint policy of a shared server.

The operator (whoever starts the server) may set ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` in the
environment or ``.streamlit/secrets.toml``, and list more servers in ``R2MED_LLM_ENDPOINTS``. A
visitor may type a base URL, a model and a key in the app. The rule: **the operator's key is only
ever sent to an endpoint the operator configured** (OpenAI's own when no base URL is configured); a
visitor's own URL gets only a key the visitor typed. A URL carrying credentials
(``https://user:pass@host``), a query string or a fragment (``…/v1?api-key=…``) is refused, and the
refusal never repeats the URL, so a secret typed there is never shown, logged or stored. An
operator's URL that cannot be used stops the app with the setting's name rather than being skipped:
skipped, it would leave OpenAI's endpoint as the operator's, and the operator's key would go there.

**Named endpoints.** An entry ``NAME=URL`` (or ``NAME=URL MODEL``) of ``R2MED_LLM_ENDPOINTS`` is also
offered by its name, and ``local`` always names this machine's own server (``r2med llm-server``, on
127.0.0.1:8091; its key is none). A name is what a page address carries (``llm=local``): a visitor
picks among the operator's servers by name, and a URL never comes from a URL parameter.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from r2med_core.llm.client import OPENAI_DEFAULT_URL, Endpoint, base_url_refusal
from r2med_core.settings import Settings

#: What ``Resolved.credential_source`` says; shown in the app, never the key itself.
OPERATOR_KEY = "operator key"
VISITOR_KEY = "your key"
NO_KEY = "no key"

_DEFAULT_PORTS = {"http": 80, "https": 443}


class EndpointError(ValueError):
    """A base URL that cannot be used; the message never contains the URL."""


def normalize_url(url: str) -> str:
    """The canonical form of an http(s) base URL (lower-case scheme and host, no default port, no
    trailing slash), so ``HTTPS://Host:443/v1/`` and ``https://host/v1`` are the same server.

    Raises ``EndpointError`` for anything else — including a URL with a user name or password, a
    query string or a fragment (``base_url_refusal``).
    """
    text = url.strip()
    refusal = base_url_refusal(text)
    if refusal:
        raise EndpointError(refusal)
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise EndpointError("the base URL is not a valid http(s) URL") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise EndpointError("the base URL must start with http:// or https:// and name a server")
    if any(ch.isspace() for ch in text):
        raise EndpointError("the base URL must not contain spaces")
    host = parts.hostname.lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), "", ""))


@dataclass(frozen=True)
class OperatorLLM:
    """The operator's endpoints (normalized; the first is the default) and key (never shown)."""

    endpoints: tuple[str, ...] = (OPENAI_DEFAULT_URL,)
    api_key: str | None = field(default=None, repr=False, compare=False)

    @property
    def default_url(self) -> str:
        return self.endpoints[0]

    def owns(self, url: str) -> bool:
        """True when ``url`` (already normalized) is one of the operator's endpoints."""
        return url in self.endpoints


def operator_llm(
    settings: Settings, environ: Mapping[str, str] | None = None, secrets: Mapping[str, object] | None = None
) -> OperatorLLM:
    """The operator's LLM configuration from the environment, then secrets (the environment wins).

    When no URL is configured, OpenAI's own endpoint is the operator's. Raises ``EndpointError``
    naming the setting (never the URL's text) for a configured URL that cannot be used.
    """
    env = os.environ if environ is None else environ
    found = secrets or {}

    def value(name: str) -> str | None:
        text = env.get(name) or found.get(name)
        return str(text).strip() if isinstance(text, str) and str(text).strip() else None

    configured = [("OPENAI_BASE_URL", value("OPENAI_BASE_URL"))]
    configured += [("R2MED_LLM_ENDPOINTS", split_named(entry)[1]) for entry in settings.llm_endpoints]
    urls: list[str] = []
    for name, url in configured:
        if url:
            try:
                urls.append(normalize_url(url))
            except EndpointError as err:
                raise EndpointError(f"{name}: {err}") from None
    endpoints = tuple(dict.fromkeys(urls)) or (OPENAI_DEFAULT_URL,)
    return OperatorLLM(endpoints=endpoints, api_key=value("OPENAI_API_KEY"))


#: The name of this machine's own LLM server (``r2med_core.llm.local_server``).
LOCAL = "local"
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")


def split_named(entry: str) -> tuple[str | None, str, str | None]:
    """``NAME=URL MODEL`` → ``(name, url, model)``; a bare URL has no name, an entry without MODEL no model."""
    text = entry.strip()
    name: str | None = None
    head, sep, rest = text.partition("=")
    if sep and _NAME.fullmatch(head.strip()) and "://" not in head:
        name, text = head.strip(), rest.strip()
    url, _, model = text.partition(" ")
    return name, url.strip(), model.strip() or None


@dataclass(frozen=True)
class Named:
    """An endpoint offered by name: its URL, its default model (None: the server's first), and whether
    the operator's key goes with it (the built-in ``local`` server gets none)."""

    url: str
    model: str | None = None
    keyed: bool = True


def named_endpoints(settings: Settings) -> dict[str, Named]:
    """The endpoints a visitor may pick by name: ``local`` (this machine's ``r2med llm-server``) and the
    operator's ``NAME=URL`` entries (an operator's own ``local`` wins over the built-in one)."""
    from r2med_core.llm.local_server import DEFAULT_PORT

    named = {LOCAL: Named(f"http://127.0.0.1:{DEFAULT_PORT}/v1", None, keyed=False)}
    for entry in settings.llm_endpoints:
        name, url, model = split_named(entry)
        if name:
            try:
                named[name] = Named(normalize_url(url), model)
            except EndpointError as err:
                raise EndpointError(f"R2MED_LLM_ENDPOINTS ({name}): {err}") from None
    return named


_LISTED: dict[str, tuple[float, list[str] | None]] = {}


def server_models(url: str, timeout: float = 3.0) -> list[str] | None:
    """The model names an OpenAI-compatible server lists (``GET /models``), or None when it does not answer.
    Asked at most every 15 s per server (pages ask on every rerun)."""
    import time

    now = time.monotonic()
    if url in _LISTED and now - _LISTED[url][0] < 15.0:
        return _LISTED[url][1]
    listed = _list_models(url, timeout)
    _LISTED[url] = (now, listed)
    return listed


def _list_models(url: str, timeout: float) -> list[str] | None:
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/models", timeout=timeout) as reply:
            listed = json.loads(reply.read(1 << 20))
    except (OSError, ValueError):
        return None
    data = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(data, list):
        return None
    return [str(m["id"]) for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


def resolve_named(name: str, model: str, operator: OperatorLLM, settings: Settings, **sampling: Any) -> Resolved:
    """The endpoint a name leads to (``model`` empty: the endpoint's own, else the server's first).

    ``local`` not answering says how to start it (or, without the ``llm`` extra, how to install it)."""
    from r2med_core.llm import local_server

    found = named_endpoints(settings).get(name)
    if found is None:
        return Resolved(
            None, note=f"No LLM endpoint is named {name[:40]!r}: 'local' or a NAME=URL entry of R2MED_LLM_ENDPOINTS."
        )
    chosen = model.strip() or found.model
    if not chosen:
        listed = server_models(found.url)
        if listed is None:
            if name == LOCAL and found == named_endpoints(Settings()).get(LOCAL):
                hint = (
                    "start it with `r2med llm-server` (or `python -m r2med_core llm-server`)"
                    if local_server.installed()
                    else local_server.install_hint()
                )
                return Resolved(None, note=f"No local LLM server answers at {found.url}: {hint}.")
            return Resolved(None, note=f"The LLM endpoint {name!r} does not answer at {found.url}.")
        if not listed:
            return Resolved(None, note=f"The LLM endpoint {name!r} lists no model.")
        chosen = listed[0]
    key = operator.api_key if found.keyed and operator.owns(found.url) else None
    endpoint = Endpoint(base_url=found.url, model=chosen, api_key=key, **sampling)
    return Resolved(endpoint, OPERATOR_KEY if key else NO_KEY)


@dataclass(frozen=True)
class Resolved:
    """The endpoint to use (None: none usable), whose key it carries, and a note for the visitor."""

    endpoint: Endpoint | None
    credential_source: str = NO_KEY
    note: str | None = None


def resolve_endpoint(
    visitor_url: str,
    visitor_key: str,
    model: str,
    operator: OperatorLLM,
    **sampling: Any,
) -> Resolved:
    """The endpoint a visitor's settings lead to, following the key rule in the module docstring.

    No URL typed: the operator's default endpoint, with the visitor's key if typed, else the
    operator's. A URL typed: the visitor's key if typed; the operator's key only when the URL is one
    of the operator's endpoints; otherwise no key at all. ``sampling`` (temperature, max_tokens,
    timeout …) goes to the ``Endpoint`` as given.
    """
    model = model.strip()
    visitor_key = visitor_key.strip()
    if not model:
        return Resolved(None)
    if visitor_url.strip():
        try:
            url = normalize_url(visitor_url)
        except EndpointError as err:
            return Resolved(None, NO_KEY, f"Base URL not used: {err}.")
    else:
        url = operator.default_url
    note = None
    if visitor_key:
        key, source = visitor_key, VISITOR_KEY
    elif operator.owns(url) and operator.api_key:
        key, source = operator.api_key, OPERATOR_KEY
    else:
        key, source = None, NO_KEY
        if operator.api_key:
            note = (
                "This base URL is not one the server's operator configured, so the server's key is not sent "
                "to it; type your own key if it needs one."
            )
    endpoint = Endpoint(base_url=url, model=model, api_key=key, **sampling)
    return Resolved(endpoint, source, note)
