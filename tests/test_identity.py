"""Sign-in and roles (r2med_core.judging.identity): who the app believes, and what each role may do."""

from __future__ import annotations

from pathlib import Path

import pytest

from r2med_core.judging.identity import (
    LOOPBACK,
    AuthConfig,
    IdentityError,
    PermissionDenied,
    authorize,
    is_own,
    load_auth_config,
    load_roles,
    parse_roles,
    peer_trusted,
    resolve_identity,
    signin_origin_problem,
    typed_person,
)

PROXY = {"R2MED_PROXY_USER_HEADER": "X-Forwarded-User", "R2MED_TRUSTED_PROXIES": "10.0.0.5/32, 127.0.0.1/32"}
ROLES = parse_roles(
    '"alice@example.org" = "annotator"\n"Bob@Example.org" = ["annotator", "reviewer"]\n"carol" = "admin"\n',
    "roles.toml",
)


def test_nothing_configured_is_the_typed_single_team() -> None:
    config = load_auth_config({})
    assert not config.enabled
    person = typed_person("  Dana ")
    assert person is not None and person.name == "Dana" and not person.verified
    assert person.may("label") and person.may("review") and person.may("manage")
    assert typed_person("   ") is None
    with pytest.raises(PermissionDenied, match="type your name"):
        authorize(None, "label", config=config)


def test_proxy_header_is_believed_only_from_a_trusted_address() -> None:
    config = load_auth_config(PROXY)
    headers = [("x-forwarded-user", "alice@example.org")]
    trusted = resolve_identity(config, headers=headers, peer="10.0.0.5", roles=ROLES)
    assert trusted is not None and trusted.name == "alice@example.org" and trusted.source == "proxy"
    assert trusted.roles == {"annotator"}
    assert resolve_identity(config, headers=headers, peer=LOOPBACK, roles=ROLES) is not None
    # The same header from anyone else names nobody.
    for peer in ("10.0.0.6", "192.168.1.9", "::1", None, "not an address"):
        assert resolve_identity(config, headers=headers, peer=peer, roles=ROLES) is None, peer


def test_proxy_header_sent_twice_or_empty_is_ignored() -> None:
    config = load_auth_config(PROXY)
    twice = [("X-Forwarded-User", "alice@example.org"), ("x-forwarded-user", "carol")]
    assert resolve_identity(config, headers=twice, peer="10.0.0.5", roles=ROLES) is None
    assert resolve_identity(config, headers=[("X-Forwarded-User", " ")], peer="10.0.0.5", roles=ROLES) is None


def test_loopback_matches_only_a_trusted_loopback_network() -> None:
    config = load_auth_config({**PROXY, "R2MED_TRUSTED_PROXIES": "10.0.0.0/8", "FORWARDED_ALLOW_IPS": ""})
    assert not peer_trusted(LOOPBACK, config.trusted_proxies)
    assert peer_trusted("::ffff:10.1.2.3", config.trusted_proxies)
    assert peer_trusted(LOOPBACK, load_auth_config({**PROXY, "R2MED_TRUSTED_PROXIES": "::1"}).trusted_proxies)


def test_oidc_user_is_named_by_email_and_roles_match_email_or_subject() -> None:
    config = AuthConfig(oidc=True)
    bob = resolve_identity(config, user={"is_logged_in": True, "email": "bob@example.org", "sub": "b1"}, roles=ROLES)
    assert bob is not None and bob.name == "bob@example.org" and bob.roles == {"annotator", "reviewer"}
    carol = resolve_identity(config, user={"is_logged_in": True, "sub": "carol"}, roles=ROLES)
    assert carol is not None and carol.name == "carol" and carol.roles == {"admin"}
    assert resolve_identity(config, user={"is_logged_in": False, "email": "bob@example.org"}, roles=ROLES) is None
    assert resolve_identity(config, user={}, roles=ROLES) is None
    # A proxy header means nothing when only OIDC is configured.
    assert resolve_identity(config, headers=[("X-Forwarded-User", "carol")], peer=LOOPBACK, user={}) is None


def test_signed_in_without_roles_file_annotates_and_reviews_but_does_not_manage() -> None:
    person = resolve_identity(AuthConfig(oidc=True), user={"is_logged_in": True, "email": "x@example.org"})
    assert person is not None and person.may("label") and person.may("review") and not person.may("manage")


def test_roles_decide_what_each_person_may_do() -> None:
    config = AuthConfig(oidc=True)

    def who(email: str):
        return resolve_identity(config, user={"is_logged_in": True, "email": email}, roles=ROLES)

    alice, bob, carol, stranger = who("alice@example.org"), who("BOB@example.org"), who("carol"), who("eve@x.org")
    assert authorize(alice, "label") is alice
    with pytest.raises(PermissionDenied, match=r"alice@example.org \(annotator\) may not review"):
        authorize(alice, "review")
    assert authorize(bob, "review") is bob
    with pytest.raises(PermissionDenied, match="may not delete or import"):
        authorize(bob, "manage")
    assert authorize(carol, "manage") is carol
    assert stranger is not None and stranger.roles == frozenset()
    with pytest.raises(PermissionDenied, match="no role"):
        authorize(stranger, "label")
    with pytest.raises(PermissionDenied, match="sign in to save labels"):
        authorize(None, "label", config=config)


def test_reviewer_only_cannot_label() -> None:
    reviewer = resolve_identity(
        AuthConfig(oidc=True),
        user={"is_logged_in": True, "email": "r@example.org"},
        roles=parse_roles('"r@example.org" = "reviewer"', "roles.toml"),
    )
    with pytest.raises(PermissionDenied, match="may not save labels"):
        authorize(reviewer, "label")


def test_own_labels_compare_names_case_insensitively_and_an_empty_name_is_nobodys() -> None:
    assert is_own("bob@example.org", ["alice@example.org", " Bob@Example.org "])
    assert not is_own("bob@example.org", ["alice@example.org"])
    assert not is_own("  ", ["", "  "]) and not is_own("bob", [None, 3])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"a@x.org" = "annotator"\n\n"b@x.org" = "reviwer"\n', r"roles.toml:3: unknown role\(s\) 'reviwer'"),
        ('"a@x.org" = ["annotator",\n  "boss"]\n', r"roles.toml:1: unknown role\(s\) 'boss'"),
        ('a = "annotator"\nb = 3\n', r"roles.toml:2: the roles of 'b' must be"),
        ('a = "annotator"\n"A" = "admin"\n', r"roles.toml:2: 'A' is listed twice"),
        ('a = "annotator"\nb = = \n', r"roles.toml:2: not valid TOML"),
        ('[team]\na = "annotator"\n', r"roles.toml:1: \[team\] is a table"),
    ],
)
def test_a_bad_roles_file_is_refused_with_file_and_line(text: str, expected: str) -> None:
    with pytest.raises(IdentityError, match=expected):
        parse_roles(text, "roles.toml")


def test_load_roles_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "roles.toml"
    with pytest.raises(IdentityError, match="cannot read the roles file"):
        load_roles(path)
    path.write_bytes(b'a = "annotator"\nb = "\xff"\n')
    with pytest.raises(IdentityError, match=rf"{path}:2: not UTF-8"):
        load_roles(path)
    path.write_text('"a@x.org" = ["annotator", "admin"]\n', encoding="utf-8")
    assert load_roles(path).roles_of("A@X.org") == {"annotator", "admin"}


@pytest.mark.parametrize(
    ("hostile", "expected"),
    [
        pytest.param("[" * 5000 + "]" * 5000, "a value is nested too deeply", id="deep-list"),
        pytest.param("{ x = " * 3000 + "1" + " }" * 3000, "a value is nested too deeply", id="deep-table"),
        pytest.param("1" * 5000, r"a number with more than \d+ digits", id="long-int"),
        pytest.param("1_" * 4400 + "1", r"a number with more than \d+ digits", id="long-int-underscores"),
    ],
)
def test_a_hostile_roles_value_is_refused_with_file_and_line(tmp_path: Path, hostile: str, expected: str) -> None:
    """Python's own limits (recursion, int digits) surface as the usual IdentityError, never a crash."""
    text = f'"a@x.org" = "annotator"\n\n"b@x.org" = {hostile}\n"c@x.org" = "admin"\n'
    with pytest.raises(IdentityError, match=rf"^roles.toml:3: {expected}"):
        parse_roles(text, "roles.toml")
    path = tmp_path / "roles.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(IdentityError, match=rf"{path}:3: "):
        load_roles(path)


def test_a_long_roles_file_is_parsed_once_and_a_bad_line_found_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Linear time: a valid file costs one TOML parse however many identities it lists (looking every key's
    line up made 8,000 entries take minutes); a refused key's line costs at most one small parse per line."""
    import tomllib

    parses = []
    loads = tomllib.loads
    monkeypatch.setattr(tomllib, "loads", lambda text: parses.append(text) or loads(text))
    lines = [f'"person{i}@example.org" = ["annotator", "reviewer"]' for i in range(400)]
    table = parse_roles("\n".join(lines), "roles.toml")
    assert len(table.entries) == 400 and table.roles_of("PERSON399@example.org") == {"annotator", "reviewer"}
    assert len(parses) == 1
    parses.clear()
    with pytest.raises(IdentityError, match=r"roles.toml:401: unknown role"):
        parse_roles("\n".join([*lines, '"late@example.org" = "boss"']), "roles.toml")
    assert len(parses) <= 1 + 401


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"R2MED_PROXY_USER_HEADER": "X-Forwarded-User"}, "R2MED_TRUSTED_PROXIES is empty"),
        ({"R2MED_PROXY_USER_HEADER": "X User", "R2MED_TRUSTED_PROXIES": "::1"}, "must be an HTTP header name"),
        ({"R2MED_PROXY_USER_HEADER": "X-U", "R2MED_TRUSTED_PROXIES": "localhost"}, "'localhost' is not an IP"),
        ({**PROXY, "FORWARDED_ALLOW_IPS": "*"}, "any visitor could pose as a trusted proxy"),
        ({**PROXY, "FORWARDED_ALLOW_IPS": "10.0.0.5, localhost"}, "FORWARDED_ALLOW_IPS: 'localhost' is not an IP"),
    ],
)
def test_bad_proxy_settings_name_the_variable(env: dict[str, str], expected: str) -> None:
    with pytest.raises(IdentityError, match=expected):
        load_auth_config(env)


REMOTE_PROXY = {"R2MED_PROXY_USER_HEADER": "X-Forwarded-User", "R2MED_TRUSTED_PROXIES": "10.0.0.5/32"}


@pytest.mark.parametrize(
    ("forwarded", "expected"),
    [
        # Unset, uvicorn takes X-Forwarded-For from 127.0.0.1 and ::1: anyone on the host could name 10.0.0.5.
        (None, r"FORWARDED_ALLOW_IPS is unset.*anyone on\s+the host could pose as the proxy.*FORWARDED_ALLOW_IPS="),
        ("127.0.0.1", "FORWARDED_ALLOW_IPS lists 127.0.0.1, which is not in R2MED_TRUSTED_PROXIES"),
        ("10.0.0.5, ::1", "FORWARDED_ALLOW_IPS lists ::1, which is not in R2MED_TRUSTED_PROXIES"),
        ("10.0.0.0/24", "FORWARDED_ALLOW_IPS lists 10.0.0.0/24, which is not in R2MED_TRUSTED_PROXIES"),
    ],
)
def test_a_peer_allowed_to_forward_must_itself_be_a_trusted_proxy(forwarded: str | None, expected: str) -> None:
    """A peer in FORWARDED_ALLOW_IPS is reported at whatever address its X-Forwarded-For says, so one that is
    not a trusted proxy could pose as one: sign-in is refused, and the message says what to set."""
    env = REMOTE_PROXY if forwarded is None else {**REMOTE_PROXY, "FORWARDED_ALLOW_IPS": forwarded}
    with pytest.raises(IdentityError, match=expected):
        load_auth_config(env)


@pytest.mark.parametrize(
    ("trusted", "forwarded"),
    [
        ("10.0.0.5/32", ""),  # the address is always the socket's
        ("10.0.0.5/32", " , "),
        ("10.0.0.5/32, 10.0.0.1/32", "10.0.0.1"),  # the operator's chain: a hop trusted in both settings
        ("10.0.0.0/8", "10.1.0.0/16, 10.2.3.4"),
        ("127.0.0.1/32", None),  # a proxy on this host (Streamlit reports 127.0.0.1 and ::1 alike)
        ("::1", "127.0.0.1,::1"),
    ],
)
def test_forwarding_only_from_trusted_proxies_is_accepted(trusted: str, forwarded: str | None) -> None:
    env = {**REMOTE_PROXY, "R2MED_TRUSTED_PROXIES": trusted}
    config = load_auth_config(env if forwarded is None else {**env, "FORWARDED_ALLOW_IPS": forwarded})
    assert config.proxy_header == "X-Forwarded-User"


def test_settings_from_secrets_fill_what_the_environment_leaves_unset(tmp_path: Path) -> None:
    config = load_auth_config(
        {"R2MED_ROLES_FILE": str(tmp_path / "r.toml"), "FORWARDED_ALLOW_IPS": ""},
        extra={"R2MED_PROXY_USER_HEADER": "X-User", "R2MED_TRUSTED_PROXIES": ["10.0.0.1", "10.0.0.2"]},
    )
    assert config.enabled and config.proxy_header == "X-User" and len(config.trusted_proxies) == 2
    assert config.roles_file == tmp_path / "r.toml"


def test_a_page_opened_at_another_address_than_the_redirect_uri_is_told_sign_in_cannot_hold() -> None:
    """Streamlit's login cookie holds only on pages of its redirect_uri's origin (scheme, host, port), so
    every server behind one load balancer shares that address and a server opened at its own port says why
    nobody is signed in there."""
    public = "https://team.example.org/oauth2callback"
    assert signin_origin_problem(public, "https://team.example.org") == ""
    problem = signin_origin_problem(public, "http://10.0.0.7:8501")
    assert "this page is open at http://10.0.0.7:8501" in problem
    assert "Open the app at https://team.example.org." in problem
    assert signin_origin_problem(public, "https://team.example.org:8443") != ""  # another port: another origin
    assert signin_origin_problem(public, None) == signin_origin_problem(None, "https://x") == ""  # unknown: silent
    assert signin_origin_problem("not a url", "https://x") == ""
