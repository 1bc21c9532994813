"""The Streamlit app on the embedded demo, driven with AppTest (no browser)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from r2med_app.views.markup import md
from r2med_core import load_demo, run_system
from r2med_core.systems import default_rewrite

APP = str(Path(__file__).resolve().parent.parent / "r2med_app" / "streamlit_app.py")
PAGES = ["overview", "explorer", "compare", "metrics", "leaderboard"]


@pytest.fixture(autouse=True)
def _compute_without_a_click(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about what pages show, so the server may compute anything by itself; gating
    (a URL computes only what is cheap, the rest waits for "Compute") is tested in test_jobs.py."""
    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")


def open_app(
    page: str | None = None, secrets: dict | None = None, user: dict | None = None, **params: str | list[str]
) -> AppTest:
    """The app on ``page``; ``user``: who ``st.user`` says is signed in (with an ``auth`` secret: OIDC)."""
    at = AppTest.from_file(APP, default_timeout=300)
    for name, value in (secrets or {}).items():  # as if in .streamlit/secrets.toml
        at.secrets[name] = value
    if user is not None:
        at.user = user
    for name, value in params.items():
        at.query_params[name] = value
    at.run()
    if page:
        at.switch_page(f"views/pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def live_endpoint(at: AppTest, url: str, key: str, model: str = "fake-gpt") -> None:
    """Type a live LLM endpoint into the sidebar, as a user does."""
    at.text_input(key="w_llm_url").input(url).run()
    at.text_input(key="w_llm_model").input(model).run()
    at.text_input(key="w_llm_key").input(key).run()


def frame(at: AppTest, first_column: str):  # type: ignore[no-untyped-def]
    """The dataframe whose first column has this name (display tables carry no widget key)."""
    return next(df.value for df in at.dataframe if len(df.value.columns) and df.value.columns[0] == first_column)


def by_label(widgets, label: str):  # type: ignore[no-untyped-def]
    """The one widget with this label (widgets keyed by dataset or query have generated keys)."""
    found = [w for w in widgets if w.label == label]
    assert len(found) == 1, [w.label for w in widgets]
    return found[0]


def picker(at: AppTest):  # type: ignore[no-untyped-def]
    """The explorer's query picker (its key carries the dataset it belongs to)."""
    found = [s for s in at.selectbox if str(s.key).startswith("w_q.")]
    assert len(found) == 1, [s.key for s in at.selectbox]
    return found[0]


def save_label(at: AppTest) -> None:
    at.button[[b.label for b in at.button].index("Save label")].click().run()


def _charts(at: AppTest) -> int:
    return len(at.get("plotly_chart"))


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_on_the_demo(page: str) -> None:
    at = open_app(page)
    assert not at.error, [e.value for e in at.error]
    assert at.title  # every page has a heading
    if page != "leaderboard":
        assert any("Demo data" in i.value for i in at.info)
    at.run()
    assert not at.get("progress"), "a finished progress bar is left on the page"


def test_overview_length_legend_names_queries_and_documents() -> None:
    at = open_app("overview")
    names = [trace.get("name") for chart in at.get("plotly_chart") for trace in json.loads(chart.proto.spec)["data"]]
    legend = [name for name in names if name and "median" in name]
    assert [n.split(" (")[0] for n in legend] == ["documents", "queries"], legend


def test_explorer_shows_gold_and_retrieved_with_the_right_ranks() -> None:
    at = open_app("explorer", task="clinical-evidence", systems=["bm25", "minilm"])
    at.selectbox(key="w_system").set_value("bm25").run()
    dataset = load_demo("clinical-evidence")
    qid = list(dataset.queries)[2]
    picker(at).set_value(qid).run()
    assert not at.exception
    assert picker(at).value == qid

    run = run_system(dataset, "bm25")
    gold = gold_table(at)
    assert list(gold["document"]) == list(dataset.positives(qid))
    expected = [str(run.rank_of(qid, d)) if run.rank_of(qid, d) else "not in top 100" for d in gold["document"]]
    assert list(gold["rank"]) == expected
    retrieved = retrieved_table(at)
    assert list(retrieved["document"]) == [d for d, _ in run.top(qid, 10)]
    positives = dataset.positives(qid)
    assert list(retrieved["gold"]) == [
        f"✓ grade {positives[d]}" if d in positives else "" for d in retrieved["document"]
    ]
    headers = [s.value for s in at.subheader]
    assert any(h.startswith("Gold documents") for h in headers) and "Retrieved top 10" in headers


def test_previous_and_next_move_through_the_queries() -> None:
    at = open_app("explorer")
    ids = list(load_demo("clinical-evidence").queries)
    first = picker(at).value
    at.button[[b.label for b in at.button].index("Next ▶")].click().run()
    assert picker(at).value == ids[(ids.index(first) + 1) % len(ids)]
    at.button[[b.label for b in at.button].index("◀ Previous")].click().run()
    assert picker(at).value == first


def test_hyde_toggle_adds_rewritten_ranks() -> None:
    at = open_app("explorer", task="clinical-evidence", system="bm25")
    assert "with rewrite" not in gold_table(at).columns
    at.toggle(key="w_rewrite_on").set_value(True).run()
    assert not at.exception

    dataset = load_demo("clinical-evidence")
    rewrite = default_rewrite(dataset)  # the real model's HyDE, not the hand-written illustration
    assert at.session_state["view"].rewrite == rewrite == "hyde:smollm2-135m"
    hyde_run = run_system(dataset, f"bm25+{rewrite}")
    changed = 0
    for qid in dataset.queries:
        picker(at).set_value(qid).run()
        gold = gold_table(at)
        expected = [str(hyde_run.rank_of(qid, d) or "not in top 100") for d in gold["document"]]
        assert list(gold["with rewrite"]) == expected
        changed += list(gold["with rewrite"]) != list(gold["rank"])
    assert changed > 0
    assert any("Hypothetical document" in m.value for m in at.markdown)
    # The retrieved panel can show either ranking, and says which one it shows.
    assert "Retrieved top 10 (original query)" in [h.value for h in at.subheader]
    at.radio(key="w_ranking").set_value("rewritten query").run()
    qid = picker(at).value
    assert list(retrieved_table(at)["document"]) == [d for d, _ in hyde_run.top(qid, 10)]


def as_written(table):  # type: ignore[no-untyped-def]
    """An HTML table's values as the reader sees them: ``markup.table`` escapes its text for Markdown (and breaks a
    bare link with an invisible word joiner)."""
    from r2med_app.views.markup import WORD_JOINER

    def written(value):  # type: ignore[no-untyped-def]
        return value.replace("\\", "").replace(WORD_JOINER, "") if isinstance(value, str) else value

    shown = table.map(written)
    shown.columns = [written(c) for c in table.columns]
    shown.index = table.index.map(written)
    return shown


def gold_table(at: AppTest):  # type: ignore[no-untyped-def]
    """The explorer's gold documents (an HTML table, so every column reads whole), as written."""
    return as_written(next(t.value for t in at.table if list(t.value.columns[:2]) == ["document", "grade"]))


def retrieved_table(at: AppTest):  # type: ignore[no-untyped-def]
    """The explorer's retrieved top k (an HTML table, so each preview wraps whole)."""
    return as_written(next(t.value for t in at.table if list(t.value.columns[:2]) == ["rank", "document"]))


def your_runs(at: AppTest):  # type: ignore[no-untyped-def]
    """The Leaderboard's "Your runs" (a column per system, a row per field) read back as a row per system."""
    return as_written(next(t.value for t in at.table if "setting" in t.value.index)).T


def significance(at: AppTest):  # type: ignore[no-untyped-def]
    """Compare's table of tests: one row per system (its index), the tests' cells as text."""
    return as_written(next(t.value for t in at.table if "wins / ties / losses" in t.value.columns))


def _means(at: AppTest):  # type: ignore[no-untyped-def]
    """The Metrics page's table: one row per metric, "what it says", then one column per system."""
    return as_written(next(t.value for t in at.table if "what it says" in t.value.columns))


def test_compare_and_metrics_render_their_charts() -> None:
    at = open_app("compare", systems=["bm25", "minilm"])
    assert _charts(at) >= 2
    assert {"t-test p", "randomization p", "wins / ties / losses"} <= set(significance(at).columns)
    at = open_app("metrics", systems=["bm25", "minilm"])
    assert _charts(at) >= 3
    means = _means(at)
    assert len(means.columns) == 1 + 2 and "nDCG@10" in means.index  # "what it says", then one per system
    # a badge under local numbers whose setting is not the benchmark's, and none for the benchmark's
    badges = [c.value for c in at.caption if "≠ benchmark" in c.value]
    assert len(badges) == 1 and "MiniLM is the offline default, not a paper model" in badges[0]


def test_deep_link_restores_the_selection() -> None:
    dataset = load_demo("clinical-case")
    qid = list(dataset.queries)[3]
    at = open_app("explorer", source="demo", task="clinical-case", systems=["bm25", "minilm"], system="minilm", q=qid)
    assert at.selectbox(key="w_task").value == "clinical-case"
    assert at.selectbox(key="w_system").value == "minilm"
    assert picker(at).value == qid
    assert at.query_params["q"] == qid and at.query_params["system"] == "minilm"


def test_bad_local_folder_shows_an_error_and_the_app_stays_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_DATA_ROOTS", str(tmp_path))  # local folders open only under the operator's roots
    (tmp_path / "query.jsonl").write_text('{"id": "1", "text": "ok"}\n{broken\n')
    (tmp_path / "corpus.jsonl").write_text('{"id": "d", "text": "doc"}\n')
    (tmp_path / "qrels.jsonl").write_text('{"q_id": "1", "p_id": "d", "score": 1}\n')
    at = open_app(source="local", folder=str(tmp_path))
    assert any(md(f"{tmp_path / 'query.jsonl'}:2: malformed JSON") in e.value for e in at.sidebar.error)
    assert any(md(f"{tmp_path / 'query.jsonl'}:2: malformed JSON") in e.value for e in at.main.error)  # where one looks
    at.radio(key="w_source").set_value("demo").run()
    assert not at.exception and not at.error


def test_hugging_face_source_uses_the_cache_and_asks_before_downloading(
    tiny_r2med: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached task opens at once; an uncached one waits for a click, and a failed download is a
    message, not a crash (this machine is offline, like a user's laptop on a plane)."""
    from huggingface_hub import constants

    from .test_data import fill_hf_cache

    cache = tmp_path / "hf"
    fill_hf_cache(cache, "Biology", tiny_r2med)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    at = open_app(source="hf", task="Biology")
    assert at.header[0].value == "Biology"  # the Overview names the task under the app's title
    assert any("5 documents" in c.value for c in at.sidebar.caption)

    at.selectbox(key="w_task").set_value("MedQA-Diag").run()
    assert any("not in your Hugging Face cache" in c.value for c in at.sidebar.caption)
    assert any("Choose a data source" in w.value for w in at.warning)
    at.button(key="w_download").click().run()
    assert not at.exception
    assert any(md("could not get R2MED/MedQA-Diag") in e.value for e in at.error)


def test_adding_a_model_and_a_fusion_from_the_sidebar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_ALLOW_MODELS", "/no/such/model")  # the operator allows this path
    at = open_app("metrics", systems=["bm25", "bm25s"])
    at.button(key="w_add_fusion").click().run()
    assert "rrf(bm25,bm25s)" in at.multiselect(key="w_systems").value
    at.text_input(key="w_new_model").input("/no/such/model").run()
    at.button(key="w_add_model").click().run()
    assert not at.exception
    assert "dense:/no/such/model" in at.multiselect(key="w_systems").value
    # The unusable model is reported on the page; the other systems still render.
    assert any("could not run" in e.value for e in at.error)
    assert len(_means(at).columns) == 1 + 3
    assert any("reciprocal\\-rank fusion" in c.value for c in at.caption if "≠ benchmark" in c.value)
    assert "rrf(bm25,bm25s)" in at.query_params["systems"]  # the URL carries the new system


def test_a_label_made_in_the_explorer_reaches_the_annotations_page_and_the_export() -> None:
    dataset = load_demo("clinical-evidence")
    qid = list(dataset.queries)[1]
    at = open_app("explorer", task="clinical-evidence", system="bm25", q=qid)
    trap = run_system(dataset, "bm25").top(qid, 1)[0][0]
    by_label(at.selectbox, "Failure type").set_value("lexical_trap")
    by_label(at.selectbox, "Document").set_value(trap)
    by_label(at.text_area, "Note").input("shares the murmur words, different disease")
    at.text_input(key="w_annotator").input("Dr. Test")
    at.button[[b.label for b in at.button].index("Save label")].click().run()
    assert not at.exception
    assert [s.value for s in at.success] == [f"Saved: Lexical trap on {md(trap)}"]
    assert any(md(trap) in e.label and "🏷" in e.label for e in at.expander)  # shown next to the document

    at.switch_page("views/pages/annotations.py").run()
    assert not at.exception
    table = next(df.value for df in at.dataframe if "label" in df.value.columns)
    assert table[["query", "document", "label", "annotator"]].values.tolist() == [
        [qid, trap, "Lexical trap", "Dr. Test"]
    ]
    exports = {b.label: b for b in at.get("download_button")}
    assert "All labels (CSV)" in exports and "All labels (JSONL)" in exports

    from r2med_core.judging.annotations import AnnotationStore

    assert "shares the murmur words" in AnnotationStore().csv_text()


def test_a_reviewer_who_decided_a_document_is_told_why_their_label_on_it_is_not_saved() -> None:
    """Nobody labels a unit they adjudicated: the store refuses it, and the explorer says so where the
    label was made, with the note kept."""
    from r2med_core.judging.adjudication import decide
    from r2med_core.judging.annotations import Annotation, AnnotationStore

    dataset = load_demo("clinical-evidence")
    qid = list(dataset.queries)[1]
    trap = run_system(dataset, "bm25").top(qid, 1)[0][0]
    store = AnnotationStore()
    for who, code in (("alice", "grade_0"), ("bob", "grade_2")):
        store.add(Annotation(dataset=dataset.source, task=dataset.name, query_id=qid, doc_id=trap, system="bm25",
                             failure_type=code, annotator=who))  # fmt: skip
    decide(store, (dataset.source, dataset.name, qid, trap), "grade_1", "Dr. Test")
    at = open_app("explorer", task="clinical-evidence", system="bm25", q=qid)
    by_label(at.selectbox, "Failure type").set_value("lexical_trap")
    by_label(at.selectbox, "Document").set_value(trap)
    by_label(at.text_area, "Note").input("shares the murmur words")
    at.text_input(key="w_annotator").input("dr. test")
    save_label(at)
    assert not at.exception
    (error,) = [e.value for e in at.error if "Not saved" in e.value]
    assert "nobody labels a unit they adjudicated" in error and "Your note is kept" in error
    assert by_label(at.text_area, "Note").value == "shares the murmur words"
    assert [a.annotator for a in store.list()] == ["alice", "bob"]


def test_a_grade_on_an_unjudged_document_is_proposed_then_accepted_by_a_reviewer() -> None:
    """Proposed → accepted: one annotator's grade changes the re-evaluation only after a reviewer accepts
    it, and the reviewer's name and time are recorded."""
    from r2med_core.judging.annotations import AnnotationStore

    dataset = load_demo("clinical-evidence")
    qid = list(dataset.queries)[1]
    run = run_system(dataset, "bm25")
    top = next(doc for doc, _ in run.top(qid, 10) if doc not in dataset.positives(qid))
    at = open_app("explorer", task="clinical-evidence", systems=["bm25"], system="bm25", q=qid)
    by_label(at.selectbox, "Relevance grade").set_value(1)
    by_label(at.selectbox, "Document").set_value(top)
    at.text_input(key="w_annotator").input("Dr. Test")
    save_label(at)
    assert not at.exception
    assert [s.value for s in at.success] == [f"Saved: Grade 1: relevant on {md(top)}"]
    (stored,) = AnnotationStore().list()
    assert (stored.failure_type, stored.status, stored.system, stored.rank) == (
        "grade_1",
        "proposed",
        "bm25",
        run.rank_of(qid, top),
    )

    at.switch_page("views/pages/annotations.py").run()
    assert not at.exception
    assert any(md("1 proposal(s) awaiting review") in c.value for c in at.caption)
    assert not any("qrels" in df.value.columns for df in at.dataframe)  # nothing accepted: nothing re-evaluated
    assert at.text_input(key="w_annotator").value == "Dr. Test"  # the name is kept for the session
    # Nobody reviews their own label, signed in or not: another team member accepts it.
    assert at.button(key=f"w_accept_{stored.id}").disabled
    assert any("You labelled this" in c.value for c in at.caption)
    at.text_input(key="w_annotator").input("Dr. Rev").run()
    at.button(key=f"w_accept_{stored.id}").click().run()
    assert not at.exception
    accepted = AnnotationStore().get(stored.id)
    assert (accepted.status, accepted.reviewer) == ("accepted", "Dr. Rev") and accepted.reviewed_at
    assert any(md("1 accepted proposal(s)") in c.value for c in at.caption)
    rows = next(df.value for df in at.dataframe if "qrels" in df.value.columns)
    bm25 = rows[rows["system"] == "BM25 (R2MED official)"].set_index("qrels")
    assert bm25.loc["team qrels", "nDCG@10"] > bm25.loc["original qrels", "nDCG@10"]


def test_nothing_is_preselected_and_a_failed_save_keeps_the_note() -> None:
    from r2med_core.judging.annotations import AnnotationStore

    at = open_app("explorer", task="clinical-evidence", system="bm25")
    kind = by_label(at.selectbox, "Failure type")
    assert kind.value is None and by_label(at.selectbox, "Relevance grade").value is None  # the user chooses
    by_label(at.text_area, "Note").input("a careful note")
    save_label(at)  # no grade, no type, no name
    assert not at.exception and len(AnnotationStore()) == 0
    assert any("choose a grade or a failure type" in e.value for e in at.error)
    assert by_label(at.text_area, "Note").value == "a careful note"
    by_label(at.selectbox, "Relevance grade").set_value(2)
    save_label(at)  # a grade for the whole query
    assert any("a grade judges a document" in e.value for e in at.error) and len(AnnotationStore()) == 0
    by_label(at.selectbox, "Relevance grade").set_value(None)
    by_label(at.selectbox, "Failure type").set_value("missing_reasoning_step")
    save_label(at)  # still no name
    assert any("type your name" in e.value for e in at.error) and len(AnnotationStore()) == 0
    assert by_label(at.text_area, "Note").value == "a careful note"
    at.text_input(key="w_annotator").input("Dr. Who")
    save_label(at)
    assert [a.note for a in AnnotationStore().list()] == ["a careful note"]
    assert by_label(at.text_area, "Note").value == ""  # cleared only after a successful save
    assert at.text_input(key="w_annotator").value == "Dr. Who"  # the name stays


def test_a_grade_and_a_failure_type_on_a_gold_document_are_two_labels_and_no_proposal() -> None:
    """Grading a gold document is a judgement like any other (it counts in agreement); it proposes nothing,
    and the failure type saved with it is a label of its own."""
    from r2med_core.judging.annotations import AnnotationStore
    from r2med_core.judging.team import review_queue

    dataset = load_demo("clinical-evidence")
    qid = list(dataset.queries)[1]
    gold_doc = next(iter(dataset.positives(qid)))
    at = open_app("explorer", task="clinical-evidence", system="bm25", q=qid)
    by_label(at.selectbox, "Relevance grade").set_value(2)
    by_label(at.selectbox, "Failure type").set_value("wrong_aspect")
    by_label(at.selectbox, "Document").set_value(gold_doc)
    at.text_input(key="w_annotator").input("Dr. Test")
    save_label(at)
    assert not at.exception
    saved = f"Saved: Grade 2: highly relevant and Right condition, wrong aspect on {md(gold_doc)}"
    assert [s.value for s in at.success] == [saved]
    assert [(a.doc_id, a.failure_type) for a in AnnotationStore().list()] == [
        (gold_doc, "grade_2"),
        (gold_doc, "wrong_aspect"),
    ]
    qrels = {(dataset.source, dataset.name): dataset.qrels}
    assert review_queue(AnnotationStore().list(), [], qrels=qrels) == []


def test_switching_task_keeps_picker_body_and_label_in_agreement() -> None:
    from r2med_core.analysis.explore import shorten
    from r2med_core.judging.annotations import AnnotationStore

    at = open_app("explorer", task="clinical-evidence", system="bm25", q="2")
    at.selectbox(key="w_task").set_value("clinical-case").run()
    assert not at.exception
    case = load_demo("clinical-case")
    query = picker(at)
    qid = query.value
    assert query.options[query.index] == f"{qid} · {shorten(case.queries[qid], 110)}"  # the picker's text …
    assert f"**Query {md(qid)}**" in [m.value for m in at.markdown]  # … the body …
    by_label(at.selectbox, "Failure type").set_value("missing_reasoning_step")
    at.text_input(key="w_annotator").input("Dr. Test")
    save_label(at)
    (stored,) = AnnotationStore().list()
    assert (stored.task, stored.query_id) == ("clinical-case", qid)  # … and the label agree


def test_the_label_records_the_ranking_shown_with_its_rank() -> None:
    from r2med_core.judging.annotations import AnnotationStore

    dataset = load_demo("clinical-evidence")
    qid = list(dataset.queries)[1]
    at = open_app("explorer", task="clinical-evidence", systems=["bm25"], system="bm25", q=qid)
    at.toggle(key="w_rewrite_on").set_value(True).run()
    hyde = rewritten = at.selectbox(key="w_rewrite").value
    original = run_system(dataset, "bm25")
    doc = original.top(qid, 3)[2][0]
    by_label(at.selectbox, "Failure type").set_value("lexical_trap")
    by_label(at.selectbox, "Document").set_value(doc)
    at.text_input(key="w_annotator").input("Dr. Test")
    save_label(at)  # the original ranking is shown
    at.radio(key="w_ranking").set_value("rewritten query").run()
    rewritten_run = run_system(dataset, f"bm25+{rewritten}")
    doc2 = rewritten_run.top(qid, 1)[0][0]
    by_label(at.selectbox, "Failure type").set_value("lexical_trap")
    by_label(at.selectbox, "Document").set_value(doc2)
    save_label(at)
    first, second = AnnotationStore().list()
    assert (first.system, first.rank) == ("bm25", 3)
    assert (second.system, second.rank) == (f"bm25+{hyde}", 1)


def test_next_and_previous_follow_the_filters() -> None:
    from r2med_core import evaluate
    from r2med_core.analysis.explore import filter_queries, query_table

    dataset = load_demo("clinical-case")
    run = run_system(dataset, "bm25")
    table = query_table(dataset, evaluate(run, dataset.qrels), run)
    failures = list(filter_queries(table, failures_only=True)["query_id"])
    assert len(failures) >= 3 and failures != list(table["query_id"]), "the demo needs bm25 failures here"
    start = next(q for q in table["query_id"] if q not in failures)
    at = open_app("explorer", task="clinical-case", systems=["bm25"], system="bm25", q=start)
    at.checkbox(key="w_fail").check().run()
    assert at.query_params["fail"] == "1"  # the filter is in the deep link
    seen = []
    for _ in range(len(failures) + 1):
        at.button(key="w_next").click().run()
        seen.append(picker(at).value)
    assert seen == [*failures, failures[0]]  # only the failures, in order, wrapping round
    at.button(key="w_prev").click().run()
    assert picker(at).value == failures[-1]
    at.select_slider(key="w_depth").set_value(20).run()
    assert at.query_params["depth"] == "20"
    assert "Retrieved top 20" in [h.value for h in at.subheader]


def test_systems_survive_a_source_switch_and_empty_selections_never_raise() -> None:
    at = open_app("compare", systems=["bm25", "bm25s"])
    at.radio(key="w_source").set_value("local").run()
    at.radio(key="w_source").set_value("demo").run()
    assert not at.exception
    assert at.multiselect(key="w_systems").value == ["bm25", "bm25s"]
    at.toggle(key="w_rewrite_on").set_value(True).run()
    at.multiselect(key="w_systems").set_value([]).run()
    assert not at.exception, [e.value for e in at.exception]
    for page in ["explorer", "compare", "metrics", "leaderboard", "rewriting", "whatif", "annotations", "overview"]:
        at.switch_page(f"views/pages/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])


def test_removing_the_last_compared_system_leaves_an_explained_empty_state() -> None:
    at = open_app("compare", systems=["bm25", "bm25s"])
    assert len(at.multiselect(key="w_compare").value) == 2
    at.multiselect(key="w_compare").set_value([]).run()
    assert not at.exception
    assert at.multiselect(key="w_compare").value == []  # no snapping back to the defaults
    assert any("Pick at least two systems" in i.value for i in at.info)
    at.run()
    assert at.multiselect(key="w_compare").value == []


def test_every_page_writes_its_state_to_the_address() -> None:
    at = open_app("whatif")
    assert at.query_params["task"] == "clinical-case" and at.query_params["source"] == "demo"
    at.selectbox(key="w_task").set_value("clinical-evidence").run()
    at.switch_page("views/pages/annotations.py").run()
    assert at.query_params["task"] == "clinical-evidence"


def test_what_if_returns_results_from_each_system_and_puts_the_query_in_the_url() -> None:
    at = open_app("whatif", systems=["bm25", "minilm"])
    at.text_area(key="w_ask").input(
        "young athlete collapses with a systolic murmur that grows louder on standing"
    ).run()
    assert not at.exception and not at.error
    headers = [s.value for s in at.subheader]
    assert "BM25 (R2MED official)" in headers and "MiniLM-L6-v2 (offline; not a paper model)" in headers
    assert sum(e.label.startswith("#1 · ") for e in at.expander) == 2
    assert at.query_params["ask"].startswith("young athlete")
    assert at.query_params["ask_systems"] == ["bm25", "minilm"]  # a shared link runs the same systems
    assert any("in every system's top 10" in m.value for m in at.markdown)


def test_rewriting_page_shows_the_effect_per_query_and_per_llm() -> None:
    at = open_app("rewriting", task="clinical-evidence", systems=["bm25"])
    assert not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert int(metrics["queries helped"]) + int(metrics["queries hurt"]) <= 12
    assert int(metrics["queries helped"]) >= 6  # the demo's HyDE documents help BM25 on most queries
    assert _charts(at) >= 2  # per-query Δ bars and the per-LLM spread
    assert any("Set a model" in i.value for i in at.info)  # no endpoint configured yet


def test_live_generation_from_the_app_against_a_local_server() -> None:
    """Sidebar endpoint → batch generation on the Rewriting page → the new rewrite is selectable.
    The API key never reaches the URL."""
    from .test_generation import KEY, FakeLLM, demo_replies

    with FakeLLM(demo_replies("qa-reference")) as server:
        at = open_app("rewriting", task="qa-reference", systems=["bm25"])
        live_endpoint(at, server.url, KEY)
        at.number_input(key="w_llm_temperature").set_value(0.7).run()
        at.number_input(key="w_llm_max_tokens").set_value(256).run()
        generate(at)
        assert not at.exception
        assert any("12 generated" in s.value for s in at.success), [w.value for w in at.warning]
        assert any(c.value.startswith("Switch the rewrite to `hyde:fake-gpt` in the sidebar") for c in at.caption)
        assert len(server.requests) == 12
        assert all(r["auth"] == f"Bearer {KEY}" for r in server.requests)
        body = server.requests[0]["body"]  # the benchmark's settings for an open model, whatever the sidebar says
        assert (body["model"], body["temperature"], body.get("max_tokens")) == ("fake-gpt", 0.7, 10240)
        assert body["seed"] == 42 and body["messages"][0]["content"] == "You are a helpful assistant."
        assert any(c.value.startswith("Prompts: the benchmark's prompts of Medical") for c in at.caption)
        at.radio(key="w_gen_sampling").set_value("the sidebar's temperature and max tokens").run()
        at.number_input(key="w_llm_temperature").set_value(0.3).run()
        generate(at)
        last = server.requests[-1]["body"]
        assert (last["temperature"], last["max_tokens"], "seed" in last) == (0.3, 256, False)
        at.toggle(key="w_rewrite_on").set_value(True).run()
        options = at.selectbox(key="w_rewrite").options
        name = "HyDE (fake-gpt, generated live)"  # one name for the live set, from the core (systems.rewrite_words)
        assert name in options
        assert KEY not in str(at.query_params)
        # … the same name where the explorer shows its hypothetical document, never "precomputed"
        at.selectbox(key="w_rewrite").set_value("hyde:fake-gpt").run()
        at.switch_page("views/pages/explorer.py").run()
        assert not at.exception
        told = [m.value.replace("\\", "") for m in at.markdown if "Hypothetical document" in m.value]
        assert told and name in told[0] and "on this server, written by fake-gpt" in told[0], told
        assert "precomputed" not in told[0]


def test_the_rewriting_page_generates_the_first_n_or_the_chosen_queries_only() -> None:
    """Try a method on a few queries before all: First N, or chosen queries; the estimate, the caption
    and the batch count only those."""
    from .test_generation import KEY, FakeLLM, demo_replies

    qids = list(load_demo("qa-reference").queries)
    with FakeLLM(demo_replies("qa-reference")) as server:
        at = open_app("rewriting", task="qa-reference", systems=["bm25"])
        live_endpoint(at, server.url, KEY)
        at.number_input(key="w_gen_first").set_value(3).run()
        assert any(c.value.startswith("3 of 12 queries · hyde") for c in at.caption)
        assert any(c.value.startswith("3 replies to generate") for c in at.caption)
        generate(at)
        assert not at.exception and len(server.requests) == 3
        assert any("3 generated" in s.value for s in at.success), [s.value for s in at.success]
        sent = [r["body"]["messages"][-1]["content"] for r in server.requests]
        assert all(any(text in m for m in sent) for text in [load_demo("qa-reference").queries[q] for q in qids[:3]])
        at.multiselect(key="w_gen_queries").set_value([qids[7], qids[5]]).run()
        assert any(c.value.startswith("2 of 12 queries") for c in at.caption)
        generate(at)
        assert len(server.requests) == 5  # only the two chosen, nothing else
        later = [r["body"]["messages"][-1]["content"] for r in server.requests[3:]]
        for q in (qids[5], qids[7]):
            assert any(load_demo("qa-reference").queries[q] in m for m in later)


def generate(at: AppTest) -> None:
    """Click Generate, wait for the background job it starts, and draw the page again."""
    from r2med_core.compute.jobs import REGISTRY

    at.button(key="w_gen_start").click().run()
    assert not at.exception, [e.value for e in at.exception]
    for job in REGISTRY.jobs():
        if job.key[0] == "generate":
            assert job.wait(120), "the generation job did not end"
    at.run()


def test_a_generation_goes_on_in_the_background_and_a_cancelled_one_resumes_from_what_it_kept() -> None:
    """Generate starts a background job (its progress, ETA and Cancel drawn like every job's, and it goes on
    when the page is left); Cancel stops it at the next reply, the replies so far stay cached, and the
    button then says it resumes: pressed again, it asks only for the rest."""
    import re
    import threading

    from r2med_core.compute.jobs import REGISTRY

    from .test_generation import KEY, FakeLLM, demo_replies

    held, answered = threading.Event(), threading.Event()
    with FakeLLM(demo_replies("qa-reference")) as server:
        replies = demo_replies("qa-reference")

        def slow_after_two(messages: list[dict[str, str]]) -> str:
            if len(server.requests) > 2:  # the third reply is still being written when Cancel is pressed
                answered.set()
                held.wait(30)
            text = messages[-1]["content"]
            return next((doc for query, doc in replies.items() if query in text), "A passage.")

        server.responder = slow_after_two
        at = open_app("rewriting", task="qa-reference", systems=["bm25"])
        live_endpoint(at, server.url, KEY)
        at.button(key="w_gen_start").click().run()
        assert not at.exception, [e.value for e in at.exception]
        job = next(j for j in REGISTRY.jobs() if j.key[0] == "generate" and j.state == "running")
        assert answered.wait(60)
        at.run()
        assert any(b.label == "Cancel" for b in at.button)  # the job's own progress panel, not a frozen page
        REGISTRY.cancel(job.key)
        held.set()
        assert job.wait(60) and job.state == "cancelled", job.error
        at.run()
        assert not at.exception
        again = at.button(key="w_gen_start")
        assert again.label == "Generate (resumes where it stopped)"
        sent = len(server.requests)
        assert 3 <= sent < 12
        first = [r["body"]["messages"][-1]["content"] for r in server.requests[:2]]
        server.responder = None
        generate(at)
        told = next((m for s in at.success if (m := re.search(r"(\d+) generated, (\d+) from cache", s.value))), None)
        assert told is not None, [s.value for s in at.success] + [w.value for w in at.warning]
        assert int(told[1]) + int(told[2]) == 12 and int(told[2]) >= 2  # the replies kept before Cancel are reused
        later = [r["body"]["messages"][-1]["content"] for r in server.requests[sent:]]
        assert len(later) <= 10 and not set(first) & set(later)  # the replies kept are not asked for again


def test_what_if_rewrites_a_typed_query_with_a_live_llm() -> None:
    from .test_generation import FakeLLM

    with FakeLLM({"fingertips": "Hypothetical passage about vasoconstriction of glabrous skin."}) as server:
        at = open_app("whatif", task="qa-reference", systems=["bm25"], ask="why do fingertips wrinkle in water")
        live_endpoint(at, server.url, "sk-x")
        at.toggle(key="w_ask_hyde").set_value(True).run()
        assert not at.exception and not at.error
        assert any("Hypothetical document" in m.value for m in at.markdown)
        assert len(server.requests) == 1
        assert sum(e.label.startswith("#1 · ") for e in at.expander) == 1
        # the column names the rewrite and its model, not the plain system it is not
        assert [s.value for s in at.subheader] == ["BM25 (R2MED official) + hyde (fake-gpt) · live"]
        assert at.query_params["ask_hyde"] == "1"  # every view state is in the address


def test_a_link_with_what_if_hyde_on_asks_for_a_click_before_it_asks_the_llm() -> None:
    """``ask_hyde=1`` in a shared address restores the view, but a visitor's link never sends an LLM
    request by itself: the page asks for a click (then the reply is cached and later visits show it)."""
    from .test_generation import FakeLLM

    with FakeLLM({"fingertips": "Hypothetical passage about vasoconstriction of glabrous skin."}) as server:
        at = open_app("whatif", task="qa-reference", systems=["bm25"], ask="why do fingertips wrinkle", ask_hyde="1")
        live_endpoint(at, server.url, "sk-x")
        assert at.toggle(key="w_ask_hyde").value is True and not at.exception
        assert server.requests == [] and any("once you ask" in i.value for i in at.info)
        assert [s.value for s in at.subheader] == ["BM25 (R2MED official)"]  # as typed, until asked
        at.button(key="w_whatif_hyde_go").click().run()
        assert len(server.requests) == 1 and any("Hypothetical document" in m.value for m in at.markdown)
        assert [s.value for s in at.subheader] == ["BM25 (R2MED official) + hyde (fake-gpt) · live"]


def test_an_unavailable_reranker_is_explained_and_the_explorer_still_works() -> None:
    at = open_app("explorer", task="clinical-evidence", system="bm25", rerank="bge-reranker")
    assert not at.exception
    assert any("Reranking is off" in w.value and "downloaded" in w.value for w in at.warning)
    assert any(s.value.startswith("Gold documents") for s in at.subheader)


def test_reranked_ranks_in_the_explorer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from r2med_core.retrieval.rerank import rerank

    from .test_rerank import build_cross_encoder

    model = str(build_cross_encoder(tmp_path / "ce", num_labels=1, seed=3))
    monkeypatch.setenv("R2MED_ALLOW_MODELS", model)  # a path from a link runs only when the operator allows it
    at = open_app("explorer", task="clinical-evidence", system="bm25", rerank=model)
    assert not at.exception and not at.warning
    dataset = load_demo("clinical-evidence")
    qid = picker(at).value
    expected = rerank(run_system(dataset, "bm25"), dataset, model, 10)
    gold = gold_table(at)
    assert list(gold["after rerank"]) == [str(expected.rank_of(qid, d) or "not in top 100") for d in gold["document"]]
    at.radio(key="w_ranking").set_value("reranked top 10").run()
    assert list(retrieved_table(at)["document"]) == [d for d, _ in expected.top(qid, 10)]


def test_ids_and_names_from_a_dataset_cannot_format_or_inject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Text from a local dataset is escaped everywhere it is shown: no markup, no formatting, no links."""
    from .conftest import write_jsonl

    root = tmp_path / "evil"
    evil_doc = "**bold**_[x](javascript:alert(1))"
    write_jsonl(
        root / "corpus.jsonl",
        [
            {"id": evil_doc, "text": "<script>alert('doc')</script> chest pain and troponin " * 3},
            {"id": "plain", "text": "asthma wheeze " * 5},
        ],
    )
    write_jsonl(root / "query.jsonl", [{"id": "<b>q</b>", "text": "<img src=x onerror=alert(1)> chest pain"}])
    write_jsonl(root / "qrels.jsonl", [{"q_id": "<b>q</b>", "p_id": evil_doc, "score": 1}])
    monkeypatch.setenv("R2MED_DATA_ROOTS", str(tmp_path))
    at = open_app("explorer", source="local", folder=str(root), systems=["bm25"])
    assert not at.exception and not at.error
    from r2med_app.views.look import _NARROW_SCRIPT  # the app's own fixed script (folds the sidebar on a narrow window)

    html = " ".join(str(h.proto.body) for h in at.get("html") if str(h.proto.body) != _NARROW_SCRIPT)
    assert "<script>" not in html and "<img" not in html and "&lt;script&gt;" in html
    labels = [e.label for e in at.expander]
    assert any(r"\*\*bold\*\*" in label for label in labels)  # shown as written, not bold
    assert r"**Query \<b\>q\</b\>**" in [m.value for m in at.markdown]
    # The gold and retrieved tables (HTML tables, whose cells Streamlit reads as Markdown) show the id escaped.
    documents = [list(t.value["document"]) for t in at.table if "document" in t.value.columns]
    assert len(documents) == 2 and all(md(evil_doc) in shown for shown in documents), documents


def test_metrics_and_leaderboard_show_where_each_number_comes_from() -> None:
    at = open_app("metrics", task="clinical-evidence", systems=["bm25", "minilm"])
    assert [p.proto.popover.label for p in at.get("popover")].count("Provenance") == 2
    shown = [as_written(t.value) for t in at.table if list(t.value.columns) == ["what", "value"]]
    assert len(shown) == 2
    rows = dict(zip(shown[1]["what"], shown[1]["value"], strict=False))
    assert rows["system"] == "minilm" and "demo:clinical-evidence" in rows["dataset"]
    assert "@" in rows["model"] and "pytrec-eval-terrier" in rows["packages"] and rows["cost"] == "none (local models)"
    at.switch_page("views/pages/leaderboard.py").run()
    board = your_runs(at)
    assert {"time (s)", "cost", "data", "device"} <= set(board.columns)
    assert (board["cost"] == "none (local models)").all() and (board["device"] == "cpu").all()


def test_leaderboard_marks_local_settings_that_are_not_the_benchmarks() -> None:
    at = open_app("leaderboard", task="qa-reference", systems=["bm25", "bm25s"])
    local = your_runs(at)
    assert local.loc["BM25 (R2MED official)", "setting"] == "benchmark's"
    assert local.loc["BM25 (bm25s default tokenizer)", "setting"].startswith("≠ benchmark: bm25s's own tokenizer")
    for shown in local["local nDCG@10 (95% CI)"]:  # every local mean carries its interval
        value, interval = shown.split(" ", 1)
        low, high = map(float, interval.strip("[]").split(", "))
        assert low - 0.0005 <= float(value) <= high + 0.0005


def test_explorer_and_metrics_say_when_a_query_had_nothing_to_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query of stop words retrieves nothing and scores 0: the pages say so next to the numbers."""
    from .conftest import write_jsonl

    root = tmp_path / "stopwords"
    write_jsonl(root / "corpus.jsonl", [{"id": f"d{i}", "text": f"troponin chest pain case {i}"} for i in range(5)])
    write_jsonl(root / "query.jsonl", [{"id": "q1", "text": "the of and"}, {"id": "q2", "text": "chest pain"}])
    qrels = [{"q_id": "q1", "p_id": "d0", "score": 1}, {"q_id": "q2", "p_id": "d1", "score": 1}]
    write_jsonl(root / "qrels.jsonl", qrels)
    monkeypatch.setenv("R2MED_DATA_ROOTS", str(tmp_path))
    for page in ("explorer", "metrics"):
        at = open_app(page, source="local", folder=str(root), systems=["bm25"])
        captions = " ".join(c.value for c in at.caption)
        assert "had no searchable terms and retrieved nothing" in captions, page


def test_labels_kept_in_postgresql_show_where_they_live_without_the_password(
    postgres_urls, postgres_cluster, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from r2med_core.judging.annotations import Annotation, AnnotationStore
    from tests.pg_cluster import PASSWORD

    url = postgres_urls(tcp=True)  # the server checks the password over TCP
    monkeypatch.setenv("R2MED_ANNOTATIONS_URL", url)
    dataset = load_demo("clinical-evidence")
    qid = next(iter(dataset.queries))
    doc = run_system(dataset, "bm25").top(qid, 1)[0][0]
    AnnotationStore().add(
        Annotation(
            dataset=dataset.name, task="clinical-evidence", query_id=qid, doc_id=doc,
            failure_type="lexical_trap", annotator="Dr. Postgres",
        )
    )  # fmt: skip
    at = open_app("annotations", task="clinical-evidence")
    location = f"postgresql://127.0.0.1:{postgres_cluster.port}/r2med"
    assert f"Stored in {md(location)} (PostgreSQL)" in " ".join(c.value for c in at.caption)
    table = next(df.value for df in at.dataframe if "label" in df.value.columns)
    assert table["annotator"].tolist() == ["Dr. Postgres"]
    shown = " ".join(str(getattr(node, "value", "")) for node in at.main) + str(at.sidebar)
    assert md(location) in shown  # (the page's text is all there)
    assert PASSWORD not in shown and "s3cret" not in shown and "r2med:" not in shown

    import psycopg  # the database goes away while the app runs: the page says so, with no traceback

    schema = url.rsplit("search_path%3D", 1)[1]
    with psycopg.connect(postgres_cluster.socket_url(), autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    errors = " ".join(e.value for e in at.error)
    assert "Annotations are unavailable" in errors and md(location) in errors and "s3cret" not in errors


def test_leaderboard_shows_the_papers_best_figure_and_the_results_published_after_it() -> None:
    at = open_app("leaderboard")
    at.selectbox(key="w_lb_kind").set_value("rewrite").run()
    paper = next(df.value for df in at.dataframe if "HyDE (o3-mini) + NV-Embed-v2" in df.value.index)
    best = paper.loc["HyDE (o3-mini) + NV-Embed-v2"]
    assert f"{best['Avg']:.2f}" == "41.35" and best["origin"] == "first commit"  # × 100, as the paper prints

    with_later = [df.value for df in at.dataframe if "InsertRank (DeepSeek-R1)" in df.value.index]
    later = with_later[0]  # the scores, then each row minus a reference row
    assert {"ReasonEmbed-Qwen3-8B", "RaDeR-gte-Qwen2-7B", "NV-Embed-v2", "InsertRank (DeepSeek-R1)"} <= set(later.index)
    assert later.index[0] == "InsertRank (DeepSeek-R1)" and later.loc["InsertRank (DeepSeek-R1)", "Avg"] == 51.1
    # What each row ran and where it was published: one line per row, with its link and evaluation.
    sources = [m.value for m in at.markdown if m.value.startswith("- **")]
    assert len(sources) == len(later) and all("](https://" in line for line in sources)
    reason_embed = next(line for line in sources if line.startswith("- **ReasonEmbed\\-Qwen3\\-8B**"))
    assert "(authors' re\\-run)" in reason_embed
    assert any("(benchmark's own)" in line for line in sources)

    def gains():  # type: ignore[no-untyped-def]
        return [df.value for df in at.dataframe if "ReasonEmbed-Qwen3-8B" in df.value.index][1]

    over_nv = gains().loc["ReasonEmbed-Qwen3-8B"]
    assert over_nv["Biology"] == pytest.approx(54.01 - 27.15) and over_nv["PMC-Clinical"] < 0
    at.selectbox(key="w_lb_reference").set_value("Qwen3-Embedding-8B").run()
    assert gains().loc["ReasonEmbed-Qwen3-8B", "Biology"] == pytest.approx(54.01 - 21.37)
    assert "Qwen3-Embedding-8B" not in gains().index


def test_leaderboard_cost_shows_the_tokens_a_live_rewrite_cost_and_money_only_at_a_set_price(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from r2med_core.llm.client import Endpoint
    from r2med_core.llm.generation import generate_rewrites

    from .test_generation import KEY, FakeLLM, demo_replies

    demo = load_demo("qa-reference")
    with FakeLLM(demo_replies("qa-reference")) as server:
        made = generate_rewrites(demo, "hyde", Endpoint(server.url, "writer-model", api_key=KEY), llm_name="live")
    tokens = f"{made.spent.prompt_tokens:,} prompt tokens, {made.spent.completion_tokens:,} completion tokens"
    at = open_app("leaderboard", task="qa-reference", systems=["bm25", "bm25+hyde:live"])
    cost = your_runs(at)["cost"].to_dict()
    assert cost["BM25 (R2MED official)"] == "none (local models)"
    live = next(label for label in cost if "live" in label)
    assert cost[live] == tokens  # no price configured: tokens only, never a guessed price

    monkeypatch.setenv("R2MED_LLM_PRICES", "writer-model=1000000/2000000 credits")
    priced = open_app("leaderboard", task="qa-reference", systems=["bm25+hyde:live"])
    money = made.spent.prompt_tokens + 2 * made.spent.completion_tokens
    assert your_runs(priced)["cost"].tolist() == [
        f"{tokens} (≈ {money:.4g} credits at the configured price per 1M tokens)"
    ]


@pytest.mark.parametrize("script", ["streamlit_app.py", "r2med_app/streamlit_app.py"])
def test_a_failure_card_opens_its_question_from_either_start_script(script: str) -> None:
    """``streamlit run streamlit_app.py`` (the checkout's launcher) and ``r2med app`` (the router itself) start
    the app from different scripts; a card's "Open this question" reaches the explorer from both (a page path
    relative to the started script named no page from the launcher)."""
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / script), default_timeout=300).run()
    assert not at.exception, [e.value for e in at.exception]
    cards = [b for b in at.button if str(b.key).startswith("w_card_")]
    assert cards, "the landing shows failure cards on the demo"
    qid = str(cards[0].key).removeprefix("w_card_")
    cards[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.query_params.get("q") == [qid] or at.query_params.get("q") == qid
    assert any("Query explorer" in t.value for t in at.title), [t.value for t in at.title]
