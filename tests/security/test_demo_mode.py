"""Demo mode (``R2MED_DEMO_MODE=1`` or a secrets flag): a read-only public demo. Nothing can be
written, uploaded, generated or loaded from a local folder, and no new model runs; everything else
stays browsable, under a banner that says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from r2med_core import load_demo
from r2med_core.judging.annotations import Annotation, AnnotationStore
from r2med_core.settings import load_settings

from ..test_app import open_app


@pytest.fixture(autouse=True)
def demo_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_DEMO_MODE", "1")
    monkeypatch.setenv("R2MED_ALLOW_MODELS", "*")  # ignored in demo mode
    monkeypatch.setenv("OPENAI_API_KEY", "sk-operator-demo-key")


def _banner(at) -> bool:  # type: ignore[no-untyped-def]
    return any("Read-only demo" in i.value for i in at.info)


@pytest.mark.parametrize("page", ["overview", "explorer", "compare", "metrics", "leaderboard", "whatif"])
def test_every_page_is_browsable_under_the_banner(page: str) -> None:
    at = open_app(page)
    assert not at.exception and not at.error
    assert _banner(at) and at.title


def test_the_label_form_cannot_save() -> None:
    qid = list(load_demo("clinical-evidence").queries)[1]
    at = open_app("explorer", task="clinical-evidence", system="bm25", q=qid)
    assert not [b for b in at.button if b.label == "Save label"]
    assert not [s for s in at.selectbox if s.key == "w_label_type"]
    assert any("Labelling is off" in c.value for c in at.caption)
    assert AnnotationStore().to_dataframe().empty


def test_annotations_page_has_no_upload_and_no_delete_button() -> None:
    AnnotationStore().add(
        Annotation(
            dataset="demo:clinical-evidence",
            task="clinical-evidence",
            query_id="1",
            doc_id="d1",
            system="bm25",
            failure_type="lexical_trap",
            note="kept",
            annotator="op",
        )
    )
    at = open_app("annotations")
    assert not at.exception
    assert not at.get("file_uploader")
    assert not [b for b in at.button if b.key in ("w_ann_delete", "w_ann_accept")]
    assert len(AnnotationStore().to_dataframe()) == 1
    assert {b.label for b in at.get("download_button")} >= {"All labels (CSV)", "All labels (JSONL)"}  # browsable
    shown = " ".join(str(e.value) for e in (*at.caption, *at.markdown, *at.info))
    store = AnnotationStore().path
    assert str(store.parent) not in shown and store.name not in shown  # no server path in the public demo
    assert "Stored on this server" in shown


def test_no_live_llm_no_generation_and_no_new_models() -> None:
    at = open_app("rewriting", task="qa-reference", systems=["bm25"], extra=["dense:org/any-model"])
    assert not at.exception
    keys = {w.key for w in at.text_input}
    assert not {"w_llm_url", "w_llm_key", "w_llm_model", "w_new_model"} & keys
    assert not [b for b in at.button if b.key in ("w_gen_start", "w_add_model")]
    assert any("off in this read-only demo" in i.value for i in at.info)
    assert at.session_state["view"].extra == []
    assert any("read\\-only demo runs only the preset models" in w.value for w in at.sidebar.warning)
    at.switch_page("views/pages/whatif.py").run()
    assert at.toggle(key="w_ask_hyde").disabled


def test_no_local_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from .test_folders import make_dataset

    monkeypatch.setenv("R2MED_DATA_ROOTS", str(tmp_path))
    folder = make_dataset(tmp_path / "task")
    at = open_app("overview", source="local", folder=str(folder))
    assert not at.exception
    assert "Local folder" not in at.radio(key="w_source").options
    assert at.radio(key="w_source").value == "demo"
    assert at.header[0].value != "task"
    assert not [s for s in at.selectbox if s.key == "w_folder"]


def test_the_flag_can_come_from_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("R2MED_DEMO_MODE")
    at = open_app("explorer", secrets={"R2MED_DEMO_MODE": True})
    assert _banner(at) and not [b for b in at.button if b.label == "Save label"]
    assert load_settings({}, extra={"R2MED_DEMO_MODE": True}).demo_mode
    assert not load_settings({}, extra={"R2MED_DEMO_MODE": False}).demo_mode
    assert load_settings({"R2MED_DEMO_MODE": "0"}, extra={"R2MED_DEMO_MODE": True}).demo_mode is False


def test_review_buttons_are_disabled_in_the_demo() -> None:
    """A visitor of the public demo sees the review queue but can accept, reject or delete nothing."""
    dataset = load_demo("clinical-evidence")
    qid = next(q for q in dataset.queries if dataset.positives(q))
    unjudged = next(d for d in dataset.corpus if d not in dataset.qrels.get(qid, {}))
    AnnotationStore().add(
        Annotation(
            dataset="demo:clinical-evidence",
            task="clinical-evidence",
            query_id=qid,
            doc_id=unjudged,
            system="bm25",
            failure_type="relevant_unjudged",
            annotator="op",
        )
    )
    at = open_app("annotations", task="clinical-evidence")
    assert not at.exception
    review = [b for b in at.button if b.label in ("Accept", "Reject")]
    assert review and all(b.disabled for b in review)
    assert AnnotationStore().list()[0].status == "proposed"
