"""Each figure a page shows means one thing and says which (AppTest, issue 36's browser walk): Compare
opens on the systems in play and names the randomization test the core actually ran; the Judging card
and its Progress table count one person's work alike; the team-qrels caption says what each count counts;
a rewrite has one name wherever it is shown; the store's place is shown only to whoever manages it."""

from __future__ import annotations

import pytest

from .test_app import open_app


@pytest.fixture(autouse=True)
def _compute_without_a_click(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")


def _captions(at) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(str(c.value) for c in at.caption).replace("\\", "")


def test_compare_opens_on_every_system_in_play_with_their_rewrites() -> None:
    systems = ["bm25", "bm25s", "bm25q"]
    at = open_app("compare", task="clinical-case", systems=systems)
    assert at.multiselect(key="w_compare").value == systems  # not the first two only
    rewritten = open_app("compare", task="clinical-case", systems=systems, rewrite="hyde:demo-writer")
    chosen = rewritten.multiselect(key="w_compare").value
    assert chosen[:3] == systems and len(chosen) == 6 and all("hyde" in name for name in chosen[3:])
    # a choice in the address still wins over the default
    picked = open_app("compare", task="clinical-case", systems=systems, compare=["bm25q", "bm25"])
    assert picked.multiselect(key="w_compare").value == ["bm25q", "bm25"]


def test_compare_names_the_randomization_test_that_was_run() -> None:
    """The demo task has 12 queries: scipy enumerates all 2**12 sign assignments, so the test is exact
    (p a multiple of 1/4096), not 10,000 sign flips."""
    at = open_app("compare", task="clinical-case", systems=["bm25", "oracle:bm25"])
    said = _captions(at)
    assert "exact paired randomization test (all 4,096 sign assignments of 12 queries)" in said
    assert "10,000 sign flips" not in said


@pytest.mark.parametrize(
    ("email", "told"),
    [
        (None, False),  # signed out
        ("nobody@example.org", False),  # signed in, no role
        ("ann@example.org", False),
        ("rev@example.org", False),
        ("adm@example.org", True),  # manages the store as a whole
    ],
)
def test_annotations_shows_the_store_path_only_to_whoever_manages_the_store(
    email: str | None, told: bool, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    from r2med_app.views.markup import md
    from r2med_core.judging.annotations import AnnotationStore

    from .test_app_visibility import AUTH, ROLES

    roles = tmp_path / "roles.toml"
    roles.write_text(ROLES, encoding="utf-8")
    monkeypatch.setenv("R2MED_ROLES_FILE", str(roles))
    location = AnnotationStore().location
    user = {"is_logged_in": True, "email": email} if email else {}
    at = open_app("annotations", secrets={"auth": AUTH}, user=user, task="clinical-evidence", systems=["bm25"])
    said = " ".join(str(c.value) for c in at.caption)
    assert (md(location) in said) is told and (location in said.replace("\\", "")) is told
    assert ("Stored on this server (SQLite)" in said.replace("\\", "")) is not told


def test_annotations_without_sign_in_shows_the_store_path_to_the_trusted_team() -> None:
    """Without sign-in every visitor may delete and import the store, so they are told where it is."""
    from r2med_app.views.markup import md
    from r2med_core.judging.annotations import AnnotationStore

    at = open_app("annotations", task="clinical-evidence", systems=["bm25"])
    assert f"Stored in {md(AnnotationStore().location)} (SQLite)" in " ".join(str(c.value) for c in at.caption)
