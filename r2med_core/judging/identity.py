"""Who is acting: sign-in, roles and what each role may do with labels.

Without sign-in configured the app is one trusted team: people type their name, and the name is what
their labels and reviews record (``Person.typed``). When the operator configures sign-in — Streamlit's
``st.login`` (OpenID Connect, an ``[auth]`` section in ``.streamlit/secrets.toml``) or a reverse proxy
that authenticates people and names them in a header — the recorded name is the signed-in identity,
never typed, and roles from an operator file decide who may label, review or manage the store.

| variable | meaning | default |
|---|---|---|
| ``R2MED_PROXY_USER_HEADER`` | header naming the person a trusted proxy signed in (``X-Forwarded-User``) | unset |
| ``R2MED_TRUSTED_PROXIES`` | proxy addresses/networks (comma-separated, ``127.0.0.1/32``) it is accepted from | none |
| ``R2MED_ROLES_FILE`` | TOML file mapping identities (email or subject) to roles | unset |

The header is believed only from a trusted proxy's address: from any other address it is ignored, so a
visitor who reaches the app directly cannot name themselves. The proxy must set (overwrite) the header
on every request it forwards. The address is the one Streamlit's server (uvicorn) reports, and uvicorn
replaces the socket's address with one taken from ``X-Forwarded-For`` when the socket's peer is in
``FORWARDED_ALLOW_IPS`` (default ``127.0.0.1,::1``: any process on the host). So a proxy header is
refused unless every address in ``FORWARDED_ALLOW_IPS`` is itself a trusted proxy: then the header is
believed only when the socket's peer is a trusted proxy, and nobody can name the proxy through
``X-Forwarded-For``. Set ``FORWARDED_ALLOW_IPS=`` (empty) so the address is always the socket's; listing a
hop there (and in ``R2MED_TRUSTED_PROXIES``) is the operator's explicit opt-in to a chain of proxies.
Trusting ``127.0.0.1`` or ``::1`` trusts every process on the host (Streamlit reports both alike).

The roles file maps an identity to a role or a list of roles::

    "alice@example.org" = "annotator"
    "bob@example.org" = ["annotator", "reviewer"]
    "carol@example.org" = "admin"

Identities are compared case-insensitively, by email or by OIDC subject. Without a roles file every
signed-in person is an annotator and a reviewer. Nobody reviews their own label, whatever their role.

Several servers share one OIDC sign-in (a team behind a load balancer) when each has the same
``cookie_secret`` and, as ``redirect_uri``, the address people open: Streamlit binds its login cookie
to that address's origin (``signin_origin_problem`` says so to a page opened elsewhere).

This module never imports streamlit: the views pass it the request's headers, its peer address and
``st.user``.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

PROXY_HEADER_ENV = "R2MED_PROXY_USER_HEADER"
TRUSTED_PROXIES_ENV = "R2MED_TRUSTED_PROXIES"
ROLES_FILE_ENV = "R2MED_ROLES_FILE"
#: uvicorn's setting: the peers whose ``X-Forwarded-For`` it takes as the client's address.
FORWARDED_ENV = "FORWARDED_ALLOW_IPS"
#: What uvicorn uses when ``FORWARDED_ALLOW_IPS`` is unset.
_UVICORN_FORWARDED_DEFAULT = "127.0.0.1,::1"
_LOOPBACK_HOSTS = (ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("::1/128"))

Role = Literal["annotator", "reviewer", "admin"]
ROLES: tuple[str, ...] = ("annotator", "reviewer", "admin")
Action = Literal["label", "review", "manage"]
#: What each role may do. ``manage``: delete labels and import them (the store as a whole).
GRANTS: dict[str, frozenset[str]] = {
    "annotator": frozenset({"label"}),
    "reviewer": frozenset({"review"}),
    "admin": frozenset({"label", "review", "manage"}),
}
#: Roles of a signed-in person when the operator gives no roles file.
DEFAULT_ROLES: frozenset[str] = frozenset({"annotator", "reviewer"})
_ACTION_WORDS = {"label": "save labels", "review": "review labels", "manage": "delete or import labels"}
#: The peer address of a loopback connection (Streamlit reports 127.0.0.1 and ::1 alike, as no address).
LOOPBACK = "loopback"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class IdentityError(ValueError):
    """The sign-in configuration cannot be used; the message names the variable, or the file and line."""


class PermissionDenied(PermissionError):
    """The person may not do this; the message says why, for the person to read."""


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class AuthConfig:
    """The operator's sign-in settings. ``oidc``: secrets.toml has an ``[auth]`` section (``st.login``)."""

    oidc: bool = False
    proxy_header: str = ""
    trusted_proxies: tuple[Network, ...] = ()
    roles_file: Path | None = None

    @property
    def enabled(self) -> bool:
        """Sign-in is configured: names are never typed, and roles apply."""
        return self.oidc or bool(self.proxy_header)


def load_auth_config(
    environ: Mapping[str, str] | None = None, extra: Mapping[str, object] | None = None, *, oidc: bool = False
) -> AuthConfig:
    """Read the sign-in settings; ``extra`` (``st.secrets``) fills what the environment leaves unset.

    Raises IdentityError naming the variable when a value cannot be used.
    """
    env = dict(os.environ if environ is None else environ)
    for name, value in (extra or {}).items():
        if name in (PROXY_HEADER_ENV, TRUSTED_PROXIES_ENV, ROLES_FILE_ENV) and name not in env:
            env[name] = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    header = env.get(PROXY_HEADER_ENV, "").strip()
    if header and not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", header):
        raise IdentityError(f"{PROXY_HEADER_ENV} must be an HTTP header name, got {header!r}")
    networks = []
    for item in env.get(TRUSTED_PROXIES_ENV, "").split(","):
        if not item.strip():
            continue
        try:
            networks.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError:
            raise IdentityError(
                f"{TRUSTED_PROXIES_ENV}: {item.strip()!r} is not an IP address or network (e.g. 127.0.0.1/32)"
            ) from None
    if header and not networks:
        raise IdentityError(
            f"{PROXY_HEADER_ENV} is set but {TRUSTED_PROXIES_ENV} is empty: name the proxy's address "
            "(e.g. 127.0.0.1/32), or the header could be sent by anyone"
        )
    if header:
        _check_forwarding(env.get(FORWARDED_ENV), networks)
    roles = env.get(ROLES_FILE_ENV, "").strip()
    return AuthConfig(
        oidc=oidc,
        proxy_header=header,
        trusted_proxies=tuple(networks),
        roles_file=Path(roles).expanduser() if roles else None,
    )


def _check_forwarding(setting: str | None, trusted: list[Network]) -> None:
    """Refuse (IdentityError) a ``FORWARDED_ALLOW_IPS`` (``setting``; None: unset) that lets a peer which
    is not a trusted proxy pose as one: uvicorn reports such a peer's ``X-Forwarded-For`` as its address."""
    items = [item.strip() for item in (_UVICORN_FORWARDED_DEFAULT if setting is None else setting).split(",")]
    for item in filter(None, items):
        if item == "*":
            raise IdentityError(
                f"{PROXY_HEADER_ENV} is set and {FORWARDED_ENV} is '*': any visitor could pose as a trusted "
                f"proxy through X-Forwarded-For; set {FORWARDED_ENV} to an empty value ({FORWARDED_ENV}=)"
            )
        try:  # parsed as uvicorn parses it
            hop = ipaddress.ip_network(item) if "/" in item else ipaddress.ip_network(ipaddress.ip_address(item))
        except ValueError:
            raise IdentityError(
                f"{FORWARDED_ENV}: {item!r} is not an IP address or network; set {FORWARDED_ENV} to an empty "
                f"value ({FORWARDED_ENV}=) unless a chain of proxies forwards to the app"
            ) from None
        if _covered(hop, trusted):
            continue
        if setting is None:
            raise IdentityError(
                f"{PROXY_HEADER_ENV} is set and {FORWARDED_ENV} is unset, so Streamlit's server takes the "
                "X-Forwarded-For of any process on this host (127.0.0.1, ::1) as its address and anyone on "
                f"the host could pose as the proxy; set {FORWARDED_ENV} to an empty value "
                f"({FORWARDED_ENV}= streamlit run streamlit_app.py) so the proxy is judged by the connection's "
                "own address"
            )
        raise IdentityError(
            f"{FORWARDED_ENV} lists {item}, which is not in {TRUSTED_PROXIES_ENV}: a peer there could pose as "
            f"the proxy through X-Forwarded-For; set {FORWARDED_ENV} to an empty value ({FORWARDED_ENV}=), or "
            f"list only proxies you trust to name people, in both {FORWARDED_ENV} and {TRUSTED_PROXIES_ENV}"
        )


def _covered(hop: Network, trusted: list[Network]) -> bool:
    """Whether every address in ``hop`` is a trusted proxy; 127.0.0.1 and ::1 count as one (``LOOPBACK``)."""
    if hop in _LOOPBACK_HOSTS:
        return peer_trusted(LOOPBACK, trusted)
    return any(_subnet_of(hop, net) for net in trusted)


def _subnet_of(hop: Network, net: Network) -> bool:
    """``hop.subnet_of(net)``, False across IP versions (where ``subnet_of`` raises TypeError)."""
    if isinstance(hop, ipaddress.IPv4Network) and isinstance(net, ipaddress.IPv4Network):
        return hop.subnet_of(net)
    if isinstance(hop, ipaddress.IPv6Network) and isinstance(net, ipaddress.IPv6Network):
        return hop.subnet_of(net)
    return False


# --------------------------------------------------------------------------- the roles file


@dataclass(frozen=True)
class RoleTable:
    """Roles by identity (lower-cased email or subject), read from the operator's file ``source``."""

    source: str = ""
    entries: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def roles_of(self, *identities: str | None) -> frozenset[str]:
        """Every role granted to any of ``identities`` (an email and a subject of one person)."""
        found: set[str] = set()
        for identity in identities:
            if identity:
                found |= self.entries.get(identity.strip().lower(), frozenset())
        return frozenset(found)


def parse_roles(text: str, name: str) -> RoleTable:
    """Parse a roles file's text; IdentityError naming ``name`` and the line of the first problem.

    Linear in the file's size: the file is parsed once, and a key's line is looked for (one pass over the
    lines) only when that key is refused."""
    data = _toml(text, name)
    entries: dict[str, frozenset[str]] = {}
    for identity, value in data.items():
        problem = _entry_problem(identity, value, entries)
        if problem:
            raise IdentityError(f"{name}:{_line_of(text.splitlines(), identity)}: {problem}")
        entries[identity.strip().lower()] = frozenset(_granted(value) or ())
    return RoleTable(source=name, entries=entries)


def _toml(text: str, name: str) -> dict[str, object]:
    """``tomllib.loads``, with every way it can fail (nesting deeper than Python recurses, an integer longer
    than ``int`` reads) as IdentityError naming the file and, where it can be found, the line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        line = getattr(err, "lineno", None) or _line_from_message(str(err))
        message = getattr(err, "msg", None) or re.sub(r"\s*\(at line \d+, column \d+\)", "", str(err))
        raise IdentityError(f"{_where(name, line)}: not valid TOML: {message}") from None
    except RecursionError:
        raise IdentityError(f"{_where(name, _deep_line(text))}: a value is nested too deeply to read") from None
    except ValueError:  # int() refuses more digits than sys.get_int_max_str_digits()
        limit = sys.get_int_max_str_digits()
        line = _long_number_line(text, limit)
        raise IdentityError(f"{_where(name, line)}: a number with more than {limit} digits") from None


def _entry_problem(identity: str, value: object, entries: Mapping[str, frozenset[str]]) -> str:
    """What is wrong with one ``identity = value`` line given the entries before it ("" when nothing)."""
    if isinstance(value, dict):
        return f'[{identity}] is a table; write "identity" = "role" or a list of roles'
    granted = _granted(value)
    if granted is None:
        return f"the roles of {identity!r} must be a role or a list of roles"
    unknown = [r for r in granted if r not in ROLES]
    if unknown:
        return f"unknown role(s) {', '.join(map(repr, unknown))} for {identity!r}; roles are {', '.join(ROLES)}"
    if not identity.strip():
        return "an identity must not be empty"
    if identity.strip().lower() in entries:
        return f"{identity!r} is listed twice (identities ignore case)"
    return ""


def _granted(value: object) -> list[str] | None:
    """The roles one line grants: a role or a list of roles; None when ``value`` is neither."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(r, str) for r in value):
        return value
    return None


def load_roles(path: str | Path) -> RoleTable:
    """Read the operator's roles file; IdentityError naming the file (and line) when it cannot be used."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise IdentityError(f"{path}: cannot read the roles file ({err.strerror or err})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise IdentityError(f"{path}:{line}: not UTF-8 text") from None
    return parse_roles(text, str(path))


def _line_from_message(message: str) -> int | None:
    found = re.search(r"at line (\d+)", message)
    return int(found.group(1)) if found else None


def _where(name: str, line: int | None) -> str:
    return f"{name}:{line}" if line else name


def _long_number_line(text: str, limit: int) -> int | None:
    """The first line holding a run of more than ``limit`` digits (TOML's ``_`` separators left out)."""
    for number, line in enumerate(text.splitlines(), start=1):
        if any(len(run.replace("_", "")) > limit for run in re.findall(r"[0-9_]+", line)):
            return number
    return None


#: Brackets open at once beyond which a roles file's value is taken to be the one nested too deeply.
_DEEP = 100


def _deep_line(text: str) -> int | None:
    """The line where more than ``_DEEP`` brackets are open at once (brackets in strings count too: only
    used to point at the line once tomllib gave up on the nesting)."""
    depth = 0
    for number, line in enumerate(text.splitlines(), start=1):
        for char in line:
            depth += (char in "[{") - (char in "]}")
            if depth > _DEEP:
                return number
    return None


def _line_of(lines: list[str], key: str) -> int:
    """The line where a top-level key is defined (bare or quoted), for the error message."""
    for number, line in enumerate(lines, start=1):
        found = re.match(r"\s*(\"(?:[^\"\\]|\\.)*\"|'[^']*'|[A-Za-z0-9_.@+-]+)\s*=", line)
        if not found:
            continue
        written = found.group(1)
        if written[0] in "\"'":
            try:
                written = tomllib.loads(f"k = {written}")["k"]
            except tomllib.TOMLDecodeError:
                continue
        if written == key:
            return number
    return 1


# --------------------------------------------------------------------------- who is acting


@dataclass(frozen=True)
class Person:
    """Who is acting. ``name`` is what labels and reviews record; ``source`` how it was learned."""

    name: str
    source: Literal["typed", "oidc", "proxy"]
    roles: frozenset[str]

    @property
    def verified(self) -> bool:
        """The name comes from sign-in, not typed."""
        return self.source != "typed"

    def may(self, action: Action) -> bool:
        return any(action in GRANTS.get(role, frozenset()) for role in self.roles)


def typed_person(name: str) -> Person | None:
    """Without sign-in: the typed name, with every role (one trusted team); None when nothing is typed."""
    name = name.strip()
    return Person(name, "typed", frozenset(ROLES)) if name else None


def peer_trusted(peer: str | None, networks: Iterable[Network]) -> bool:
    """Whether the connection's peer address is one of the trusted proxies. ``LOOPBACK`` (Streamlit's
    report of 127.0.0.1 and ::1) matches a network holding either; an unknown peer matches nothing."""
    if not peer:
        return False
    networks = list(networks)
    if peer == LOOPBACK:
        candidates = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    else:
        try:
            address = ipaddress.ip_address(peer.strip().strip("[]"))
        except ValueError:
            return False
        mapped = getattr(address, "ipv4_mapped", None)
        candidates = [address, *([mapped] if mapped else [])]
    return any(a.version == n.version and a in n for a in candidates for n in networks)


def header_values(headers: Iterable[tuple[str, str]], name: str) -> list[str]:
    """Every value of header ``name`` (case-insensitive) among ``(name, value)`` pairs."""
    wanted = name.lower()
    return [value for key, value in headers if key.lower() == wanted]


def resolve_identity(
    config: AuthConfig,
    *,
    headers: Iterable[tuple[str, str]] = (),
    peer: str | None = None,
    user: Mapping[str, object] | None = None,
    roles: RoleTable | None = None,
) -> Person | None:
    """The signed-in person, or None (not signed in). Only for ``config.enabled``.

    The proxy header counts only from a trusted peer, and only when it holds exactly one non-empty value
    (a request carrying it twice is ambiguous and ignored). Otherwise ``user`` (``st.user``) counts when
    its login is valid; its email (else its subject) is the recorded name.
    """
    if config.proxy_header and peer_trusted(peer, config.trusted_proxies):
        values = [v.strip() for v in header_values(headers, config.proxy_header)]
        if len(values) == 1 and values[0] and values[0].isprintable():
            return Person(values[0], "proxy", _roles(roles, values[0]))
    if config.oidc and user and user.get("is_logged_in") is True:
        email, subject = user.get("email"), user.get("sub")
        email = email.strip() if isinstance(email, str) else ""
        subject = subject.strip() if isinstance(subject, str) else ""
        if email or subject:
            return Person(email or subject, "oidc", _roles(roles, email, subject))
    return None


def signin_origin_problem(redirect_uri: object, page_origin: str | None) -> str:
    """Why a sign-in cannot hold on a page opened at ``page_origin`` (the browser's ``Origin``), or "".

    Streamlit's login cookie is signed with ``cookie_secret`` and records the origin (scheme, host and
    port) of ``redirect_uri``; a server accepts it only on a page of that very origin. So every server
    of one deployment (behind one load balancer) signs people in once for all when each has the same
    ``cookie_secret`` and the same ``redirect_uri`` — the address people open — and a page opened at any
    other address (a server's own port, say) signs nobody in, silently. This says so, in words, where
    that happens (the origins compared as Streamlit compares them); "" when they match or are unknown."""
    if not isinstance(redirect_uri, str) or not page_origin:
        return ""
    target = urlsplit(redirect_uri)
    seen = urlsplit(page_origin)
    if not target.scheme or not target.netloc or not seen.scheme or not seen.netloc:
        return ""
    expected, origin = f"{target.scheme}://{target.netloc}", f"{seen.scheme}://{seen.netloc}"
    if expected == origin:
        return ""
    return (
        f"Sign-in here cannot hold: this server signs people in at {expected} (its redirect_uri), and this page "
        f"is open at {origin[:200]}. Open the app at {expected}. Operators: give every server of one deployment "
        "the address people open as redirect_uri, and the same cookie_secret."
    )


def _roles(table: RoleTable | None, *identities: str) -> frozenset[str]:
    return DEFAULT_ROLES if table is None else table.roles_of(*identities)


# --------------------------------------------------------------------------- permission checks


def authorize(person: Person | None, action: Action, *, config: AuthConfig | None = None) -> Person:
    """The person, when they may do ``action``; PermissionDenied saying why otherwise."""
    what = _ACTION_WORDS[action]
    if person is None:
        if config is not None and config.enabled:
            raise PermissionDenied(f"sign in to {what}")
        raise PermissionDenied(f"type your name under 'Your name' to {what}: it is recorded with them")
    if not person.may(action):
        held = ", ".join(sorted(person.roles)) or "no role"
        raise PermissionDenied(
            f"{person.name} ({held}) may not {what}; the operator grants roles in the roles file ({ROLES_FILE_ENV})"
        )
    return person


class SelfReview(PermissionDenied):
    """A review (accepting, rejecting or adjudicating) by someone who made one of the labels: nobody reviews
    their own label, another reviewer does."""


def is_own(name: str, annotators: Iterable[object]) -> bool:
    """Whether ``name`` made one of the labels of ``annotators``: the one test of "their own label", which
    the store applies to every review and adjudication (signed in or a typed name: the recorded name is
    what is compared) and the pages ask to offer the buttons. Names compare case-insensitively, spaces
    around them ignored; an empty name is nobody's."""
    mine = name.strip().lower() if isinstance(name, str) else ""
    return bool(mine) and any(isinstance(a, str) and a.strip().lower() == mine for a in annotators)
