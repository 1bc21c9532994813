"""Sign-in in the app: who is acting on this session (``r2med_core.judging.identity`` decides), and the sidebar
panel to sign in and out. Without sign-in configured the typed name is used, as before."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from r2med_app.views import serving
from r2med_app.views.markup import md
from r2med_app.views.state import bound, store, view, widget_key
from r2med_core.judging.identity import (
    LOOPBACK,
    Action,
    AuthConfig,
    IdentityError,
    PermissionDenied,
    Person,
    RoleTable,
    authorize,
    load_auth_config,
    load_roles,
    resolve_identity,
    signin_origin_problem,
    typed_person,
)
from r2med_core.judging.visibility import Sight


@dataclass(frozen=True)
class Acting:
    """This session's sign-in state: the config, the person (None: nobody), and a configuration error."""

    config: AuthConfig
    person: Person | None
    error: str = ""

    @property
    def signed_in_mode(self) -> bool:
        """Names come from sign-in (also when its configuration is broken: then nobody may act)."""
        return self.config.enabled or bool(self.error)

    @property
    def sight(self) -> Sight:
        """What this session may see of the labels (``r2med_core.judging.visibility`` decides)."""
        return Sight(self.person, self.signed_in_mode)


def _auth_section() -> Mapping[str, object]:
    section = serving._secrets().get("auth")
    return section if isinstance(section, Mapping) else {}


def providers() -> list[str | None]:
    """The ``st.login`` providers in secrets.toml: None for a bare ``[auth]``, else ``[auth.<name>]``."""
    section = _auth_section()
    named = [name for name, value in section.items() if isinstance(value, Mapping)]
    return ([None] if "client_id" in section else []) + named


@st.cache_data(show_spinner=False, max_entries=4)
def _roles(path: str, signature: tuple[int, int]) -> RoleTable:
    del signature  # part of the cache key only: an edited file is read again
    return load_roles(path)


def _roles_table(config: AuthConfig) -> RoleTable | None:
    if config.roles_file is None:
        return None
    path = Path(config.roles_file)
    try:
        stat = path.stat()
    except OSError as err:
        raise IdentityError(f"{path}: cannot read the roles file ({err.strerror or err})") from None
    return _roles(str(path), (stat.st_mtime_ns, stat.st_size))


def _peer() -> str | None:
    """The connection's peer address as Streamlit's server reports it: the socket's, unless uvicorn took it
    from X-Forwarded-For (``load_auth_config`` allows that only from trusted proxies); a loopback peer
    comes as no address."""
    address = st.context.ip_address
    if address:
        return address
    return LOOPBACK if len(st.context.headers) else None


def _user() -> dict[str, object]:
    try:
        return st.user.to_dict()
    except Exception:
        return {}


def acting() -> Acting:
    """Who acts on this session (worked out on every run: a sign-out or an expired login counts at once)."""
    try:
        config = load_auth_config(extra=serving._secrets(), oidc=bool(providers()))
    except IdentityError as err:
        return Acting(AuthConfig(), None, str(err))
    if not config.enabled:
        return Acting(config, typed_person(view().annotator))
    try:
        roles = _roles_table(config)
    except IdentityError as err:
        return Acting(config, None, str(err))
    headers = st.context.headers
    pairs = [(name, value) for name in headers for value in headers.get_all(name)]
    person = resolve_identity(config, headers=pairs, peer=_peer(), user=_user(), roles=roles)
    return Acting(config, person)


def permitted(action: Action, *, off: str, records: str) -> Person | None:
    """Who may do ``action`` now, or None with the reason left in the flash (the one permission gate).

    ``off`` is what a read-only demo says; ``records`` names what a typed name is recorded on. The
    decision is the core's :func:`authorize`; without sign-in, ``review`` needs a typed name and
    ``manage`` needs nothing (as before)."""
    v = view()
    if serving.read_only():
        v.flash_error = off
        return None
    who = acting()
    if who.error:
        v.flash_error = f"Not done: sign-in is misconfigured ({md(who.error)})."
        return None
    if not who.signed_in_mode:
        if action == "manage":
            return who.person or Person("", "typed", frozenset({"admin"}))
        if who.person is None:
            v.flash_error = f"Type your name under 'Your name' first: {records} record who made them."
        return who.person
    try:
        return authorize(who.person, action, config=who.config)
    except PermissionDenied as err:
        v.flash_error = f"Not done: {md(err)}."
        return None


def name_field() -> None:
    """The keyboard pages' "Your name" (without sign-in, outside any form: a key grades at once with it).

    Seeded from the session only when it holds a name: a tab that reconnects in place to a restarted
    server (a new session, no name) keeps the name its box still shows, and its kept keys are saved
    with it (``keylist``)."""
    if not acting().signed_in_mode and not serving.read_only():
        v = view()
        typed = st.text_input(
            "Your name",
            key=bound("annotator") if v.annotator else widget_key("annotator"),
            on_change=store("annotator"),
            placeholder="recorded with every grade",
            help="Asked once and kept for this session.",
        )
        if not v.annotator:
            v.annotator = typed


def grader(who: Acting) -> tuple[str, str]:
    """The name a keyboard grade is recorded with, or "" and why nobody may grade now (the keyboard
    pages' rule: a read-only demo, a broken sign-in, no typed name, no right to label)."""
    if serving.read_only():
        return "", "Grading is off in this read-only demo."
    if who.error:
        return "", f"Sign-in is misconfigured ({who.error}): nobody can grade until the operator fixes it."
    if not who.signed_in_mode and who.person is None:
        return "", "Type your name under 'Your name' first: it is recorded with every grade."
    try:
        return authorize(who.person, "label", config=who.config).name, ""
    except PermissionDenied as err:
        return "", f"{err}."


#: Prefix of the uploader recorded for a browser session when sign-in is off (a typed name proves nothing).
SESSION_UPLOADER = "session:"


def uploader() -> str:
    """Who is uploading, as recorded with an upload: the signed-in identity, else this browser session's
    own random token (so "your runs" are this tab's when anyone may type any name)."""
    person = acting().person
    if person is not None and person.verified:
        return person.name
    if "uploader_token" not in st.session_state:
        st.session_state["uploader_token"] = SESSION_UPLOADER + secrets.token_hex(8)
    return st.session_state["uploader_token"]


def uploader_words(who: str) -> str:
    """How another uploader is named: their signed-in identity, or "another visitor" for a session."""
    return "another visitor" if who.startswith(SESSION_UPLOADER) else who


def panel() -> None:
    """The sidebar's sign-in panel (nothing without sign-in configured)."""
    state = acting()
    if not state.signed_in_mode:
        return
    if state.error:
        st.error(
            f"Sign-in is misconfigured: {md(state.error)}. Nobody can label or review until the operator fixes it."
        )
        return
    person = state.person
    if person is not None:
        roles = ", ".join(sorted(person.roles)) or "no role"
        st.markdown(f"Signed in as **{md(person.name)}** ({md(roles)})")
        if person.source == "oidc":
            st.button("Sign out", key="w_sign_out", on_click=st.logout)
        return
    found = providers()
    if not found:
        st.caption("Sign in through this server's proxy to label and review.")
        return
    st.caption("Sign in to label and review.")
    problem = signin_origin_problem(_auth_section().get("redirect_uri"), st.context.headers.get("Origin"))
    if problem:
        st.warning(md(problem))
    for provider in found:
        label = "Sign in" if provider is None else f"Sign in with {provider}"
        st.button(label, key=f"w_sign_in_{provider or ''}", on_click=st.login, args=(provider,) if provider else ())


def reviewer_line(who: Acting, *, verb: str, recorded: str, own: str, placeholder: str, name_help: str) -> None:
    """Who reviews on this page: the typed name without sign-in, else the signed-in person (``recorded``
    as them; nobody ``own``) or why they may not ``verb``. Shared by the Annotations and Adjudication pages."""
    if not who.signed_in_mode:
        st.text_input(
            "Your name",
            key=bound("annotator"),
            on_change=store("annotator"),
            placeholder=placeholder,
            help=name_help,
        )
    elif who.person is None:
        st.info(f"Sign in (in the sidebar) to {verb}.")
    elif not who.person.may("review"):
        roles = ", ".join(sorted(who.person.roles)) or "no role"
        st.info(f"{md(who.person.name)} ({md(roles)}) may not {verb}: it needs the reviewer or admin role.")
    else:
        st.caption(f"{recorded} as **{md(who.person.name)}**; nobody {own}.")
