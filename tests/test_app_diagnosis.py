"""The failure diagnosis in the app (AppTest): the Metrics page's stacked bars and caption, the
explorer's class column, filter and CSV, and a slow oracle that waits for a click."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import streamlit

from r2med_app.views.markup import md
from r2med_core import load_demo, run_system
from r2med_core.analysis.diagnosis import NO_REFERENCE, POSSIBLY_UNJUDGED, PROPOSER_PREFIX, REASONING_GAP, diagnose
from r2med_core.judging.annotations import Annotation, AnnotationStore

from .conftest import TINY_CORPUS, TINY_QRELS, TINY_QUERIES, write_jsonl
from .test_app import by_label, open_app

TASK = "clinical-case"


@pytest.fixture(autouse=True)
def _compute_without_a_click(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")  # runs are not what these tests are about


def expected(system: str, oracle: str = "oracle:bm25") -> dict[str, str]:
    demo = load_demo(TASK)
    return diagnose(demo, run_system(demo, system), run_system(demo, oracle), oracle=oracle).class_of()


def diagnosis_bars(at: Any) -> dict[str, dict[str, int]]:
    """The diagnosis chart as {class: {system label: failed queries}}."""
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    (spec,) = [s for s in specs if "by class" in str(s["layout"].get("title", ""))]
    assert spec["layout"]["barmode"] == "stack"
    return {trace["name"]: dict(zip(trace["x"], values(trace["y"]))) for trace in spec["data"]}


def values(data: Any) -> list[int]:
    """A plotly array, plain or binary-encoded ({"dtype", "bdata"})."""
    if isinstance(data, dict):
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"]).tolist()
    return list(data)


def test_metrics_shows_failure_classes_per_system_labelled_a_diagnostic() -> None:
    at = open_app("metrics", task=TASK, systems=["bm25", "minilm"])
    bars = diagnosis_bars(at)
    for system, label in (("bm25", "BM25 (R2MED official)"), ("minilm", "MiniLM-L6-v2 (offline; not a paper model)")):
        classes = list(expected(system).values())
        for name, per_system in bars.items():
            assert per_system[label] == classes.count(name), (system, name)
    assert sum(bars[REASONING_GAP].values()) > 0
    captions = [c.value for c in at.caption if "not a benchmark metric" in c.value]
    assert (
        len(captions) == 1
        and md("(Answer oracle (diagnostic, not a benchmark setting): BM25 (R2MED official) on the answer)")
        in captions[0]
    )

    by_label(at.selectbox, "Answer oracle").set_value("oracle:bm25+q").run()
    assert not at.exception
    (caption,) = [c.value for c in at.caption if "not a benchmark metric" in c.value]
    assert md("BM25 (R2MED official) on the query + answer)") in caption
    classes = list(expected("bm25", "oracle:bm25+q").values())
    assert diagnosis_bars(at)[REASONING_GAP]["BM25 (R2MED official)"] == classes.count(REASONING_GAP)


def test_a_slow_oracle_waits_for_a_click(monkeypatch: pytest.MonkeyPatch) -> None:
    demo = load_demo(TASK)
    run_system(demo, "bm25")  # cached: the page shows it at once
    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "1")  # bm25 is cached (0 s); the MiniLM oracle is not
    at = open_app("metrics", task=TASK, systems=["bm25"], oracle="oracle:minilm")
    assert by_label(at.selectbox, "Answer oracle").value == "oracle:minilm"
    assert at.button(key="compute:oracle:minilm").label.startswith("Compute (≈")
    assert not [c for c in at.get("plotly_chart") if "by class" in c.proto.spec]  # nothing computed unasked


def test_the_explorer_filters_by_failure_class_and_exports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    downloads: dict[str, Any] = {}
    original = streamlit.download_button

    def recording(label: str, data: Any, *args: Any, **kwargs: Any) -> Any:
        downloads[label] = data
        return original(label, data, *args, **kwargs)

    monkeypatch.setattr(streamlit, "download_button", recording)
    want = expected("bm25")
    at = open_app("explorer", task=TASK, systems=["bm25"], system="bm25")
    table = next(df.value for df in at.dataframe if "failure_class" in df.value.columns)
    assert dict(zip(table["query_id"], table["failure_class"])) == want

    by_label(at.multiselect, "Failure class (diagnostic)").set_value([REASONING_GAP]).run()
    assert not at.exception
    table = next(df.value for df in at.dataframe if "failure_class" in df.value.columns)
    gaps = sorted(q for q, c in want.items() if c == REASONING_GAP)
    assert gaps and sorted(table["query_id"]) == gaps
    exported = pd.read_csv(io.StringIO(downloads["Download these queries (CSV)"]), dtype={"query_id": str})
    assert sorted(exported["query_id"]) == gaps and set(exported["failure_class"]) == {REASONING_GAP}
    assert at.query_params["diag"] == [REASONING_GAP] or at.query_params["diag"] == REASONING_GAP
    at.button(key="w_next").click().run()  # Next steps through the filtered queries only
    assert at.query_params["q"] in gaps


def test_the_judges_stored_proposal_makes_a_failure_possibly_unjudged() -> None:
    demo = load_demo(TASK)
    want = expected("bm25")
    failed = next(q for q, c in want.items() if c == REASONING_GAP)
    top = next(doc for doc, _ in run_system(demo, "bm25").top(failed, 10) if doc not in demo.qrels[failed])
    AnnotationStore().add(  # the store the app opens ($R2MED_DATA_HOME, set per test)
        Annotation(
            dataset=demo.source,
            task=demo.name,
            query_id=failed,
            doc_id=top,
            failure_type="relevant_unjudged",
            annotator=f"{PROPOSER_PREFIX}toy-judge",
        )
    )
    at = open_app("explorer", task=TASK, systems=["bm25"], system="bm25")
    table = next(df.value for df in at.dataframe if "failure_class" in df.value.columns)
    classes = dict(zip(table["query_id"], table["failure_class"]))
    assert classes == {**want, failed: POSSIBLY_UNJUDGED}


def test_a_task_without_reference_answers_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_DATA_ROOTS", str(tmp_path))
    root = tmp_path / "no-answers"
    write_jsonl(root / "corpus.jsonl", TINY_CORPUS)
    write_jsonl(root / "query.jsonl", [{k: v for k, v in q.items() if k != "answer"} for q in TINY_QUERIES])
    write_jsonl(root / "qrels.jsonl", [*TINY_QRELS, {"q_id": "q3", "p_id": "gout_0", "score": 1}])
    at = open_app("metrics", source="local", folder=str(root), systems=["bm25"])
    assert not at.error, [e.value for e in at.error]
    assert any("no reference answers" in c.value for c in at.caption)
    bars = diagnosis_bars(at)
    assert sum(bars[NO_REFERENCE].values()) >= 1  # "A question nobody judged" finds no gout document
    assert sum(sum(v.values()) for k, v in bars.items() if k != NO_REFERENCE) == 0


def test_a_blind_annotator_sees_no_failure_class_on_queries_they_have_not_labelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Blind first: the class tells whether a query failed, so it is blanked with the scores (the sign-in
    rules that pick the blind queries are tested in test_signin.py; here three are taken as blind)."""
    want = expected("bm25")
    blind = sorted(want)[:3]
    monkeypatch.setattr("r2med_app.views.panels.labels.blind_queries", lambda dataset, acting, ids: frozenset(blind))
    at = open_app("explorer", task=TASK, systems=["bm25"], system="bm25")
    table = next(df.value for df in at.dataframe if "failure_class" in df.value.columns)
    classes = dict(zip(table["query_id"], table["failure_class"]))
    assert all(pd.isna(classes[q]) for q in blind)
    assert {q: c for q, c in classes.items() if q not in blind} == {q: c for q, c in want.items() if q not in blind}
    every = [c for c in by_label(at.multiselect, "Failure class (diagnostic)").options]
    by_label(at.multiselect, "Failure class (diagnostic)").set_value(every).run()
    table = next(df.value for df in at.dataframe if "failure_class" in df.value.columns)
    assert not set(blind) & set(table["query_id"])  # the class filter skips them, as the score filters do
