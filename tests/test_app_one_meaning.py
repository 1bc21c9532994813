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
