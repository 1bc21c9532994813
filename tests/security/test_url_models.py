"""Issue 9 item 4 (model allowlist): a link may name only preset models or ones the operator allows
(``R2MED_ALLOW_MODELS``); ``dense:/path`` and ``rerank=/path`` never load a path from a link; a link
adds at most a few fusions of offered systems, never nested. The sidebar's "Add model" follows the
same rule. Loading is spied on, so "not loaded" is checked, not assumed."""

from __future__ import annotations

from pathlib import Path

import pytest

from r2med_app.views.panels.sidebar import BASE_SYSTEMS
from r2med_core.kinds import dense as systems_module
from r2med_core.retrieval import rerank as rerank_module
from r2med_core.server.access import MAX_LINK_SYSTEMS, system_refusal, vet_link_systems
from r2med_core.settings import load_settings

from ..test_app import open_app

OFFERED = ("bm25", "bm25s", "bm25-okapi", "minilm")


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every dense model and cross-encoder the app tries to load (they still load as before)."""
    seen: list[str] = []
    real_model, real_ce = systems_module.resolve_model, rerank_module.load_cross_encoder

    def model(name: str, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        seen.append(name)
        return real_model(name, *args, **kwargs)

    def cross_encoder(location: str, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        seen.append(location)
        return real_ce(location, *args, **kwargs)

    monkeypatch.setattr(systems_module, "resolve_model", model)
    monkeypatch.setattr(rerank_module, "load_cross_encoder", cross_encoder)
    return seen


def _refusal_note(at) -> str:  # type: ignore[no-untyped-def]
    return " ".join(w.value for w in at.sidebar.warning if w.value.startswith("Not run"))


def test_a_link_naming_a_path_or_an_unknown_model_loads_nothing(tmp_path: Path, loads: list[str]) -> None:
    target = tmp_path / "not-a-model"
    target.mkdir()
    at = open_app(
        "metrics",
        systems=["bm25", f"dense:{target}", "dense:someone/huge-model"],
        extra=[f"dense:{target}", "dense:someone/huge-model"],
        rerank=str(target),
    )
    assert not at.exception and not at.error
    note = _refusal_note(at)
    assert "someone/huge\\-model" in note and "R2MED\\_ALLOW\\_MODELS" in note and "reranker" in note
    assert str(target) not in loads and "someone/huge-model" not in loads
    assert at.session_state["view"].extra == []
    labels = " ".join(at.multiselect(key="w_systems").options)  # shown labels (format_func)
    assert "not-a-model" not in labels and "huge-model" not in labels and "MiniLM" in labels
    assert at.selectbox(key="w_rerank").value == ""
    assert "extra" not in at.query_params and "dense" not in str(at.query_params)


def test_the_operator_can_allow_a_model_id_or_an_exact_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_ALLOW_MODELS", "org/model-a,/models/enc")
    allowed = load_settings()
    assert system_refusal("dense:org/model-a", allowed) is None
    assert system_refusal("dense:/models/enc", allowed) is None
    assert system_refusal("dense:/models/other", allowed)
    star = load_settings({"R2MED_ALLOW_MODELS": "*"})
    assert system_refusal("dense:org/any-model", star) is None
    for path in ("/etc", "./x", "../x", "~/m", "C:\\models", "a/b/c"):
        assert system_refusal(f"dense:{path}", star), path  # "*" never opens a path
    assert system_refusal("minilm", load_settings({})) is None  # presets always


def test_a_link_adds_at_most_a_few_fusions_and_never_nested_ones(loads: list[str]) -> None:
    fusions = [
        "rrf(bm25,bm25s)",
        "rrf(bm25s,bm25)",
        "rrf(bm25,bm25-okapi)",
        "rrf(bm25s,bm25-okapi)",
        "rrf(bm25,bm25s,bm25-okapi)",
        "rrf(bm25-okapi,bm25)",
    ]
    nested = "rrf(rrf(bm25,bm25s),bm25-okapi)"
    at = open_app(systems=["bm25"], extra=[*fusions, nested, "rrf(bm25,dense:/etc)"])
    assert not at.exception
    labels = at.multiselect(key="w_systems").options
    built_in = sum(name.startswith("rrf(") for name in BASE_SYSTEMS)  # rrf(bm25,minilm), rrf(bm25,static:minilm)
    assert sum(o.startswith("RRF(") for o in labels) == built_in + MAX_LINK_SYSTEMS  # the built-in ones + the cap
    assert at.session_state["view"].extra == fusions[:MAX_LINK_SYSTEMS]
    note = _refusal_note(at)
    assert "fusions of fusions" in note and f"at most {MAX_LINK_SYSTEMS}" in note
    assert "/etc" not in loads

    vetted = vet_link_systems(["bm25", "rrf(bm25,minilm)", "x" * 500], load_settings({}), OFFERED)
    assert vetted.kept == ["bm25", "rrf(bm25,minilm)"] and len(vetted.notes[0]) < 200


def test_add_model_in_the_sidebar_follows_the_same_rule(loads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    at = open_app("metrics", systems=["bm25"])
    at.text_input(key="w_new_model").input("/etc").run()
    at.button(key="w_add_model").click().run()
    assert not at.exception
    assert any("Not added" in e.value and "R2MED\\_ALLOW\\_MODELS" in e.value for e in at.sidebar.error)
    assert "dense:/etc" not in at.session_state["view"].extra and "/etc" not in loads

    at.text_input(key="w_new_model").input("minilm").run()  # a preset is always fine
    at.button(key="w_add_model").click().run()
    assert "dense:minilm" in at.multiselect(key="w_systems").value
