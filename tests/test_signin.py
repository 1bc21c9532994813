"""Sign-in end to end: a real OpenID Connect provider (oidc-provider-mock), a real ``streamlit run`` server
configured to use it (``[auth]`` in a temporary secrets.toml), and headless Chromium signing in through
the provider's own form; and a reverse-proxy header, accepted from a trusted address (as the socket sees
it) and ignored from any other, whatever X-Forwarded-For says. Labels and reviews must record the
signed-in identity, and roles must hold.

    python -m pytest tests/test_signin.py -q
"""

from __future__ import annotations

import json
import re
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager as ContextManager
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from itsdangerous import TimestampSigner, URLSafeTimedSerializer
from oidc_provider_mock import run_server_in_thread
from playwright.sync_api import Browser, BrowserContext, Page, expect

from r2med_core import load_demo, run_system
from r2med_core.judging.annotations import AnnotationStore
from tests.test_browser import VIEWPORT, _choose, _free_port, browser, chromium, settle, streamlit_server

__all__ = ["browser", "chromium"]  # the fixtures, shared with test_browser.py
pytestmark = pytest.mark.browser

TASK = "clinical-case"
COOKIE_SECRET = "a-test-cookie-secret-of-some-length"
USER_COOKIE = "_streamlit_user"
ROLES = """\
# who may do what on the test server
"alice@example.org" = "annotator"
"rob@example.org" = "reviewer"
"rita@example.org" = ["annotator", "reviewer"]
"carol@example.org" = "admin"
"""


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    """A real OpenID Connect provider on localhost (any client id is accepted; people type their subject)."""
    with run_server_in_thread(port=0) as server:
        yield f"http://localhost:{server.server_port}"


@pytest.fixture(scope="module")
def oidc_app(provider: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The app with ``st.login`` on the provider and a roles file; (base URL, annotation store path)."""
    work = tmp_path_factory.mktemp("oidc-app")
    with oidc_server(work, provider, ROLES) as base:
        yield base, work / "data" / "annotations.sqlite"


def oidc_server(
    work: Path, provider: str, roles: str, env: dict[str, str] | None = None, *, public: str | None = None
) -> ContextManager[str]:
    """``streamlit_server`` in ``work`` with ``st.login`` on ``provider`` (``[auth]`` in its own secrets.toml,
    its redirect on its own port, or at ``public``: the address people open, a load balancer's) and
    ``roles`` as the operator's roles file; the base URL."""
    port = _free_port()
    public = public or f"http://127.0.0.1:{port}"
    secrets = work / "secrets.toml"
    secrets.write_text(
        "[auth]\n"
        f'redirect_uri = "{public}/oauth2callback"\n'
        f'cookie_secret = "{COOKIE_SECRET}"\n'
        'client_id = "r2med-test"\n'
        'client_secret = "r2med-test-secret"\n'
        f'server_metadata_url = "{provider}/.well-known/openid-configuration"\n',
        encoding="utf-8",
    )
    (work / "roles.toml").write_text(roles, encoding="utf-8")
    return streamlit_server(work, {"R2MED_ROLES_FILE": str(work / "roles.toml"), **(env or {})}, secrets, port)


def _context(browser: Browser, base: str, **kwargs: object) -> BrowserContext:
    context = browser.new_context(viewport=VIEWPORT, base_url=base, **kwargs)
    context.set_default_timeout(30_000)
    return context


def _sign_in(page: Page, subject: str) -> None:
    """Click "Sign in", type the subject on the provider's own form, and come back signed in."""
    page.goto("/overview")
    settle(page, "Sign in to label and review")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"^http://localhost:\d+/oauth2/authorize"))
    page.locator("input[name=sub]").fill(subject)
    page.get_by_role("button", name="Authorize").click()
    page.wait_for_url(re.compile(r"^http://127\.0\.0\.1:\d+/"))
    settle(page, f"Signed in as {subject}")


def _explorer(page: Page, qid: str) -> None:
    page.goto(f"/explorer?task={TASK}&systems=bm25&system=bm25&q={qid}")
    settle(page, "Grade a document, or label a failure")


def _label(page: Page, failure: str, doc: str, note: str, *, field: str = "Failure type") -> None:
    _choose(page, field, failure)
    _choose(page, "Document", re.compile(rf"^{re.escape(doc)}$"))
    page.get_by_label("Note").fill(note)
    page.get_by_role("button", name="Save label").click()


def _unjudged(qid: str, nth: int = 0) -> str:
    dataset = load_demo(TASK)
    docs = [d for d, _ in run_system(dataset, "bm25").top(qid, 10) if d not in dataset.positives(qid)]
    return docs[nth]


@pytest.fixture(scope="module")
def qid() -> str:
    dataset = load_demo(TASK)
    return next(q for q in dataset.queries if dataset.positives(q))


# --------------------------------------------------------------------------- OpenID Connect


def test_oidc_labels_record_the_signed_in_identity_and_roles_hold(
    browser: Browser, oidc_app: tuple[str, Path], qid: str
) -> None:
    base, store_path = oidc_app
    doc = _unjudged(qid)

    # Alice (annotator) signs in through the provider and labels; there is no name to type.
    alice = _context(browser, base)
    page = alice.new_page()
    _sign_in(page, "alice@example.org")
    assert page.get_by_text("Signed in as alice@example.org (annotator)").is_visible()
    _explorer(page, qid)
    assert page.get_by_label("Your name").count() == 0  # an annotator cannot act as another
    assert page.get_by_text("Saved as alice@example.org (signed in)").is_visible()
    _label(page, "Grade 1: relevant", doc, "answers it; never judged", field="Relevance grade")
    settle(page, f"Saved: Grade 1: relevant on {doc}")
    (saved,) = AnnotationStore(store_path).list()
    assert (saved.annotator, saved.doc_id, saved.status) == ("alice@example.org", doc, "proposed")
    # An annotator does not review: the Annotations page offers no name field, and no review.
    page.goto("/annotations")
    settle(page, "alice@example.org (annotator) may not review labels")
    assert page.get_by_role("textbox", name="Your name").count() == 0
    assert page.get_by_role("button", name="Accept").first.is_disabled()
    assert AnnotationStore(store_path).get(saved.id).status == "proposed"
    alice.close()

    # Rob (reviewer only) may not label: the refused save keeps everything he chose and typed.
    rob = _context(browser, base)
    page = rob.new_page()
    _sign_in(page, "rob@example.org")
    _explorer(page, qid)
    _label(page, "Lexical trap", _unjudged(qid, 1), "shares the words, not the answer")
    settle(page, "Not saved: rob@example.org (reviewer) may not save labels")
    assert page.get_by_label("Note").input_value() == "shares the words, not the answer"
    assert page.get_by_role("combobox", name="Failure type").input_value() == "Lexical trap"
    assert len(AnnotationStore(store_path)) == 1
    # … and he reviews Alice's label: the review records him.
    page.goto("/annotations")
    settle(page, "Review queue")
    page.get_by_role("button", name="Accept").first.click()
    settle(page, "as rob@example.org")
    reviewed = AnnotationStore(store_path).get(saved.id)
    assert (reviewed.status, reviewed.reviewer) == ("accepted", "rob@example.org")
    rob.close()


def test_nobody_reviews_their_own_label(browser: Browser, oidc_app: tuple[str, Path], qid: str) -> None:
    base, store_path = oidc_app
    doc = _unjudged(qid, 2)
    context = _context(browser, base)
    page = context.new_page()
    _sign_in(page, "rita@example.org")  # annotator and reviewer
    _explorer(page, qid)
    _label(page, "Grade 1: relevant", doc, "mine", field="Relevance grade")
    settle(page, f"Saved: Grade 1: relevant on {doc}")
    mine = next(a for a in AnnotationStore(store_path).list() if a.annotator == "rita@example.org")
    page.goto("/annotations")
    settle(page, "nobody reviews their own label")
    accept = page.get_by_role("button", name="Accept")
    # The innermost block holding this document's queue item and its buttons.
    item = page.locator('[data-testid="stVerticalBlock"]').filter(has_text=f"document {doc}").filter(has=accept).last
    expect(item.get_by_text("You labelled this")).to_be_visible(timeout=30_000)  # a loaded machine draws late
    assert item.get_by_role("button", name="Accept").is_disabled()
    assert item.get_by_role("button", name="Reject").is_disabled()
    assert AnnotationStore(store_path).get(mine.id).status == "proposed"
    context.close()


def _resign(value: str, *, secret: str = COOKIE_SECRET, age_days: float = 0.0) -> str:
    """Sign ``value`` the way Streamlit signs its login cookie, dated ``age_days`` ago."""

    class Dated(TimestampSigner):
        def get_timestamp(self) -> int:
            return int(time.time() - age_days * 86400)

    return URLSafeTimedSerializer(secret, salt=USER_COOKIE, signer=Dated).dumps(value)


def test_an_expired_or_tampered_login_cookie_is_refused(browser: Browser, oidc_app: tuple[str, Path], qid: str) -> None:
    base, store_path = oidc_app
    context = _context(browser, base)
    page = context.new_page()
    _sign_in(page, "alice@example.org")
    (cookie,) = [c for c in context.cookies() if c["name"] == USER_COOKIE]
    payload = URLSafeTimedSerializer(COOKIE_SECRET, salt=USER_COOKIE).loads(cookie["value"])
    claims = json.loads(payload)
    assert claims["email"] == "alice@example.org" and claims["is_logged_in"] is True
    context.close()
    as_admin = json.dumps({**claims, "email": "rita@example.org", "sub": "rita@example.org"})

    def shown_identity(value: str) -> str:
        fresh = _context(browser, base)
        fresh.add_cookies([{**cookie, "value": value}])
        page = fresh.new_page()
        page.goto("/overview")
        settle(page, "Overview")
        page.locator('[data-testid="stSidebarContent"]').get_by_text(re.compile("Sign")).first.wait_for()
        settle(page, "Overview")
        text = page.locator('[data-testid="stSidebarContent"]').inner_text()
        fresh.close()
        return text

    # The control: a cookie signed with the server's secret is believed (so the forgeries below are real).
    assert "Signed in as rita@example.org" in shown_identity(_resign(as_admin))
    assert "Signed in as alice@example.org" in shown_identity(cookie["value"])
    # Signed with the right secret but dated beyond the login's lifetime: refused.
    assert "Sign in to label and review" in shown_identity(_resign(payload, age_days=40))
    # Tampered: the identity changed under the original signature, or signed with another secret.
    _, stamp, signature = cookie["value"].rsplit(".", 2)
    forged_body = URLSafeTimedSerializer(COOKIE_SECRET, salt=USER_COOKIE).dumps(as_admin).rsplit(".", 2)[0]
    assert "Sign in to label and review" in shown_identity(f"{forged_body}.{stamp}.{signature}")
    assert "Sign in to label and review" in shown_identity(_resign(as_admin, secret="not-the-server-secret"))
    assert all(a.annotator != "rita@example.org" or a.note == "mine" for a in AnnotationStore(store_path).list())


def test_a_signed_in_reviewer_adjudicates_but_not_a_unit_they_labelled(
    browser: Browser, oidc_app: tuple[str, Path], qid: str
) -> None:
    from r2med_core.judging.adjudication import history
    from r2med_core.judging.annotations import Annotation

    base, store_path = oidc_app
    doc = _unjudged(qid, 3)
    store = AnnotationStore(store_path)
    common = {"dataset": f"demo:{TASK}", "task": TASK, "query_id": qid, "doc_id": doc, "blind": True}
    before = [
        store.add(Annotation(**common, failure_type="relevant_unjudged", annotator="rita@example.org")),
        store.add(Annotation(**common, failure_type="grade_0", annotator="alice@example.org")),
    ]  # the two grades differ
    # Rita (annotator and reviewer) labelled the unit: she may not decide it.
    context = _context(browser, base)
    page = context.new_page()
    _sign_in(page, "rita@example.org")
    page.goto(f"/adjudication?task={TASK}")
    settle(page, "Every decision with history (CSV)")  # the raw labels are for admins only
    item = page.locator('[data-testid="stVerticalBlock"]').filter(has_text=f"document {doc}")
    assert item.get_by_text("You labelled this unit").first.is_visible()
    assert page.get_by_role("button", name="Record decision").is_disabled()
    context.close()
    # Rob (reviewer) decides it; the decision records his signed-in identity, the labels stay.
    context = _context(browser, base)
    page = context.new_page()
    _sign_in(page, "rob@example.org")
    page.goto(f"/adjudication?task={TASK}")
    settle(page, "Every decision with history (CSV)")  # the raw labels are for admins only
    _choose(page, "Adjudicated grade", "Grade 0: not relevant")
    page.get_by_label("Reason (optional)").fill("shares the words, not the answer")
    page.get_by_role("button", name="Record decision").click()
    settle(page, "The labels are kept as they were")
    (decision,) = history(AnnotationStore(store_path), unit=(f"demo:{TASK}", TASK, qid, doc))
    assert (decision.reviewer, decision.failure_type, decision.grade, decision.reason) == (
        "rob@example.org",
        "grade_0",
        0,
        "shares the words, not the answer",
    )
    assert [a for a in AnnotationStore(store_path).list() if a.doc_id == doc] == before
    context.close()


class _Balancer:
    """A TCP load balancer standing in for a team's, at ``url``: each new connection goes to the next
    server in turn (no sticky sessions), so a sign-in's steps and a page's requests reach either server;
    ``only`` sends every new connection to one server and drops the open ones."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self.served: dict[int, int] = {}
        self._turn = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        balancer = self

        class Relay(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with socket.create_connection(("127.0.0.1", balancer._next())) as upstream:
                    pair = {self.request, upstream}
                    with balancer._lock:
                        balancer._open |= pair
                    back = threading.Thread(target=_pump, args=(upstream, self.request), daemon=True)
                    back.start()
                    _pump(self.request, upstream)
                    back.join()
                    with balancer._lock:
                        balancer._open -= pair

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Relay)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _next(self) -> int:
        with self._lock:
            port = self.ports[self._turn % len(self.ports)]
            self._turn += 1
            self.served[port] = self.served.get(port, 0) + 1
            return port

    def only(self, base: str) -> None:
        with self._lock:
            self.ports = [int(base.rsplit(":", 1)[1])]
            for sock in self._open:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_one_sign_in_holds_on_every_server_behind_a_load_balancer(
    browser: Browser, provider: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Two servers with the same cookie_secret and, as redirect_uri, the address people open (the load
    balancer's): a person signs in once, whichever server each step reaches, and is signed in on both.
    A server opened at another address (its own port) says why a sign-in cannot hold there."""
    balancer = _Balancer()
    try:
        with ExitStack() as stack:
            one, two = (
                stack.enter_context(
                    oidc_server(tmp_path_factory.mktemp(f"balanced-{n}"), provider, ROLES, public=balancer.url)
                )
                for n in (1, 2)
            )
            balancer.ports = [int(base.rsplit(":", 1)[1]) for base in (one, two)]
            context = _context(browser, balancer.url)
            page = context.new_page()
            _sign_in(page, "alice@example.org")  # the login, the provider's callback, the page: either server
            assert page.get_by_text("Sign-in here cannot hold").count() == 0
            for base in (two, one, two):
                balancer.only(base)
                before = dict(balancer.served)
                page.goto("/overview")
                settle(page, "Signed in as alice@example.org (annotator)")
                others = {port: n for port, n in balancer.served.items() if port != balancer.ports[0]}
                assert others == {port: n for port, n in before.items() if port != balancer.ports[0]}
                assert balancer.served[balancer.ports[0]] > before.get(balancer.ports[0], 0)  # this server served it
            context.close()

            direct = _context(browser, one).new_page()
            direct.goto("/overview")
            settle(direct, "Sign-in here cannot hold")
            # The address as written, never a link: markup.md breaks bare links with an invisible word joiner.
            scheme, rest = balancer.url.split("//", 1)
            shown = re.compile(re.escape(f"Open the app at {scheme}") + "\u2060?" + re.escape(f"//{rest}"))
            assert direct.get_by_text(shown).is_visible()
            assert direct.locator(f'a[href^="{balancer.url}"]').count() == 0
            direct.context.close()
    finally:
        balancer.close()


# --------------------------------------------------------------------------- reverse proxy and the roles file


def _proxy_app(tmp_path: Path, trusted: str, roles: str = ROLES, forwarded: str | None = "") -> Iterator[str]:
    """The app signing people in by the proxy header from ``trusted``; ``forwarded``: FORWARDED_ALLOW_IPS
    (empty by default, as the README advises; None leaves it as the environment has it)."""
    (tmp_path / "roles.toml").write_text(roles, encoding="utf-8")
    env = {
        "R2MED_PROXY_USER_HEADER": "X-Forwarded-User",
        "R2MED_TRUSTED_PROXIES": trusted,
        "R2MED_ROLES_FILE": str(tmp_path / "roles.toml"),
        **({} if forwarded is None else {"FORWARDED_ALLOW_IPS": forwarded}),
    }
    return streamlit_server(tmp_path, env)


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
        target.shutdown(socket.SHUT_WR)
    except OSError:
        pass


@contextmanager
def _relay(base: str, address: str) -> Iterator[str]:
    """A TCP relay standing in for a proxy at ``address`` (a loopback address other than 127.0.0.1): it
    passes each connection on to the app at ``base`` from ``address``, so the app's socket sees the
    proxy there; the relay's own base URL, for the browser."""
    app = ("127.0.0.1", int(base.rsplit(":", 1)[1]))

    class Relay(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            with socket.create_connection(app, source_address=(address, 0)) as upstream:
                back = threading.Thread(target=_pump, args=(upstream, self.request), daemon=True)
                back.start()
                _pump(self.request, upstream)
                back.join()

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Relay)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _no_labels(work: Path) -> bool:
    store = work / "data" / "annotations.sqlite"
    return not store.exists() or not AnnotationStore(store).list()


#: A visitor on the app's host naming the admin, and the trusted proxy (127.0.0.2) as the client address.
FORGED = {"X-Forwarded-User": "carol@example.org", "X-Forwarded-For": "127.0.0.2"}


def test_proxy_header_from_the_proxys_own_address_names_the_annotator(
    browser: Browser, tmp_path: Path, qid: str
) -> None:
    """The proxy is at 127.0.0.2 (the browser goes through a relay there): its header is believed. The same
    header straight from 127.0.0.1, with X-Forwarded-For naming the proxy, names nobody."""
    with _proxy_app(tmp_path, "127.0.0.2/32") as base, _relay(base, "127.0.0.2") as proxy:
        forged = _context(browser, base, extra_http_headers=FORGED)
        page = forged.new_page()
        _explorer(page, qid)
        settle(page, "Sign in through this server's proxy")
        assert page.get_by_text("Signed in as").count() == 0
        forged.close()
        context = _context(browser, proxy, extra_http_headers={"X-Forwarded-User": "alice@example.org"})
        page = context.new_page()
        _explorer(page, qid)
        settle(page, "Signed in as alice@example.org (annotator)")
        assert page.get_by_label("Your name").count() == 0
        assert page.get_by_role("button", name="Sign out").count() == 0  # the proxy signs people out
        _label(page, "Lexical trap", _unjudged(qid), "shares the words")
        settle(page, "Saved: Lexical trap")
        context.close()
    (saved,) = AnnotationStore(tmp_path / "data" / "annotations.sqlite").list()
    assert saved.annotator == "alice@example.org"


def test_sign_in_is_refused_while_anyone_on_the_host_could_name_the_proxy(
    browser: Browser, tmp_path: Path, qid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FORWARDED_ALLOW_IPS unset: Streamlit's server takes the X-Forwarded-For of a peer at 127.0.0.1 as its
    address. A visitor there naming the proxy (127.0.0.2) and the admin is not signed in as the admin: the
    page says sign-in is misconfigured and what to set, and the save is refused, the label kept."""
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    with _proxy_app(tmp_path, "127.0.0.2/32", forwarded=None) as base:
        context = _context(browser, base, extra_http_headers=FORGED)
        page = context.new_page()
        _explorer(page, qid)
        settle(page, "Sign-in is misconfigured: R2MED_PROXY_USER_HEADER is set and FORWARDED_ALLOW_IPS is unset")
        assert page.get_by_text("set FORWARDED_ALLOW_IPS to an empty value").count() == 1
        assert page.get_by_text("Signed in as").count() == 0
        _label(page, "Lexical trap", _unjudged(qid), "not as the admin")
        settle(page, "Not saved: sign-in is misconfigured")
        assert page.get_by_label("Note").input_value() == "not as the admin"
        context.close()
    assert _no_labels(tmp_path)


def test_blind_first_hides_judgements_until_the_annotators_own_label(browser: Browser, tmp_path: Path) -> None:
    """Alice labels a query blind: no gold documents, scores or grades until she labelled the whole query;
    grading a gold document is saved like any grade (nothing tells her it is gold), and the rest of the
    query stays hidden."""
    dataset = load_demo(TASK)
    qid, gold_doc = next(
        (q, d) for q in dataset.queries for d, _ in run_system(dataset, "bm25").top(q, 10) if d in dataset.positives(q)
    )
    with _proxy_app(tmp_path, "127.0.0.1/32") as base:
        context = _context(browser, base, extra_http_headers={"X-Forwarded-User": "alice@example.org"})
        page = context.new_page()
        _explorer(page, qid)
        settle(page, "Blind first.")
        page.get_by_text(re.compile("^All queries")).click()
        settle(page, "queries you have not labelled as a whole yet show no scores")
        body = page.locator("section.main, [data-testid='stMain']").first.inner_text()
        assert "Gold documents (" not in body and not re.search(r"grade \d|✓ gold", body), body
        _label(page, "Grade 1: relevant", gold_doc, "answers the case", field="Relevance grade")
        settle(page, f"Saved: Grade 1: relevant on {gold_doc}")
        assert page.get_by_text("Blind first.").is_visible()  # one document labelled: the query stays hidden
        _label(page, "Missing reasoning step", "(the whole query)", "no bridge to the diagnosis")
        settle(page, f"Gold documents ({len(dataset.positives(qid))})")  # the whole query labelled: now she sees
        assert page.get_by_text("Blind first.").count() == 0
        context.close()
    saved = AnnotationStore(tmp_path / "data" / "annotations.sqlite").list()
    assert [(a.annotator, a.doc_id, a.blind, a.note) for a in saved] == [
        ("alice@example.org", gold_doc, True, "answers the case"),
        ("alice@example.org", None, True, "no bridge to the diagnosis"),
    ]


def test_a_forged_proxy_header_is_ignored_and_the_refused_save_keeps_the_label(
    browser: Browser, tmp_path: Path, qid: str
) -> None:
    """Only 10.9.9.9 is a trusted proxy: the header straight from 127.0.0.1 names nobody, even with an
    X-Forwarded-For naming the proxy."""
    with _proxy_app(tmp_path, "10.9.9.9/32") as base:
        headers = {"X-Forwarded-User": "rita@example.org", "X-Forwarded-For": "10.9.9.9"}
        context = _context(browser, base, extra_http_headers=headers)
        page = context.new_page()
        _explorer(page, qid)
        settle(page, "Sign in through this server's proxy")
        assert page.get_by_text("Signed in as").count() == 0
        assert page.get_by_label("Your name").count() == 0  # nor can a name be typed instead
        _label(page, "Lexical trap", _unjudged(qid), "kept after the refusal")
        settle(page, "Not saved: sign in to save labels")
        assert page.get_by_label("Note").input_value() == "kept after the refusal"
        assert page.get_by_role("combobox", name="Failure type").input_value() == "Lexical trap"
        context.close()
    assert _no_labels(tmp_path)


def test_a_roles_file_naming_an_unknown_role_is_refused_with_file_and_line(
    browser: Browser, tmp_path: Path, qid: str
) -> None:
    roles = '"alice@example.org" = "annotator"\n"rob@example.org" = "reveiwer"\n'
    with _proxy_app(tmp_path, "127.0.0.1/32", roles) as base:
        context = _context(browser, base, extra_http_headers={"X-Forwarded-User": "alice@example.org"})
        page = context.new_page()
        _explorer(page, qid)
        roles_file = tmp_path / "roles.toml"
        settle(page, f"{roles_file}:2: unknown role(s) 'reveiwer'")
        _label(page, "Lexical trap", _unjudged(qid), "not lost")
        settle(page, "Not saved: sign-in is misconfigured")
        assert page.get_by_label("Note").input_value() == "not lost"
        context.close()
