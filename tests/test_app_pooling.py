"""The Metrics page's pooling section and the blind Judging page, driven with AppTest on the demo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r2med_app.views.markup import md
from r2med_core import load_demo, run_system
from r2med_core.judging.adjudication import adjudication_queue, decide, history
from r2med_core.judging.annotations import AnnotationStore
from r2med_core.judging.identity import typed_person
from r2med_core.judging.pooling import compare_with_team, judged_at_k, pool
from r2med_core.judging.queue import JudgingQueue, QueueEntry, default_queue_path
from r2med_core.judging.team import changes_text, read_team_qrels
from tests.test_app import as_written, by_label, open_app, save_label

TASK = "clinical-evidence"


def _queue() -> JudgingQueue:
    """The queue of the app's store (the default one: $R2MED_DATA_HOME's file in these tests)."""
    return JudgingQueue(AnnotationStore())


def heading(entry: QueueEntry, task: str = TASK) -> str:
    """How the blind Judging page heads ``entry``: by its blind name (its place in the queue), never its id."""
    names = {e: name for name, e in _queue().numbered(load_demo(task).source, task).items()}
    return f"Document {md(names[entry])}"


@pytest.fixture(autouse=True)
def _compute_without_a_click(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")


#: The pooling table shows 4 decimals.
SHOWN = 5e-5


def pool_table(at):  # type: ignore[no-untyped-def]
    """The pooling table (a row per measure, a column per system) read back as a row per system, in numbers."""
    shown = as_written(next(t.value for t in at.table if "Judged@10" in t.value.index)).drop(columns="what it says")
    numbers = shown.loc[["nDCG@10 without", "nDCG@10 with", "Judged@10", "Judged@10 with"]].T.astype(float)
    return numbers.rename(columns={"nDCG@10 without": "without", "nDCG@10 with": "with"})


def test_pool_sent_from_metrics_is_graded_blind_and_an_accepted_proposal_changes_the_scores() -> None:
    dataset = load_demo(TASK)
    runs = {name: run_system(dataset, name) for name in ("bm25", "bm25s")}
    at = open_app("metrics", task=TASK, systems=list(runs))
    table = pool_table(at)
    assert len(table) == 2
    for name, run in runs.items():  # Judged@10 is ir_measures' on the benchmark's qrels
        row = table.iloc[list(runs).index(name)]
        assert row["Judged@10"] == pytest.approx(judged_at_k(run, dataset.qrels)[0], abs=SHOWN)
        assert row["without"] == row["with"]  # nothing accepted yet
    expected = pool(runs, dataset.qrels, 10)
    assert len(expected) > 0

    at.button(key="w_pool_send").click().run()  # nobody named: refused, nothing queued
    assert any("type your name" in e.value for e in at.error)
    assert _queue().items(dataset.source, dataset.name) == []
    at.text_input(key="w_annotator").input("Rev").run()
    at.button(key="w_pool_send").click().run()
    assert not at.exception
    assert any(f"Sent: {len(expected)} new document(s)" in s.value for s in at.success), (
        [s.value for s in at.success],
        [e.value for e in at.error],
    )
    queued = _queue().items(dataset.source, dataset.name)
    assert [(e.query_id, e.doc_id) for e in queued] == [(d.query_id, d.doc_id) for d in expected.items()]

    at.text_input(key="w_annotator").input("Ann").run()  # another person judges
    at.switch_page("views/pages/judging.py").run()
    assert not at.exception
    first = queued[0]
    shown = " ".join(m.value for m in at.markdown)
    assert heading(first) in shown and "nDCG" not in shown and "bm25" not in shown.lower()
    assert not [s for s in at.selectbox if s.label in ("Failure type", "Document")]  # a grade, and nothing else
    by_label(at.selectbox, "Relevance grade").set_value(1)
    save_label(at)
    assert not at.exception
    (label,) = AnnotationStore().list(failure_type="grade_1")  # the grade Judge a list gives too
    assert (label.query_id, label.doc_id, label.annotator) == (first.query_id, first.doc_id, "Ann")
    assert heading(queued[1]) in " ".join(m.value for m in at.markdown)  # the next one
    by_label(at.selectbox, "Relevance grade").set_value(0)
    save_label(at)
    assert heading(queued[2]) in " ".join(m.value for m in at.markdown)
    ann = _queue().serve(dataset.source, dataset.name, typed_person("Ann"))
    assert (ann.entry, ann.judged, ann.queued) == (queued[2], 2, len(queued))  # the one she is shown now

    AnnotationStore().review(label.id, True, "Rev")
    at.switch_page("views/pages/metrics.py").run()
    after = pool_table(at)
    retrieved = [name for name, run in runs.items() if run.rank_of(first.query_id, first.doc_id) is not None]
    assert retrieved
    for name in retrieved:
        row = after.iloc[list(runs).index(name)]
        assert row["Judged@10 with"] > row["Judged@10"]
        assert row["with"] > row["without"]  # a newly relevant document in its top 10 raises nDCG@10
    # Both new judgements count for Judged@10: the relevant one and the one judged not relevant.
    team = read_team_qrels(AnnotationStore(), dataset)
    assert sorted(c.source for c in team.changes) == ["accepted", "not relevant"]
    expected_after = compare_with_team(runs, dataset.qrels, team.qrels)
    assert list(after["Judged@10 with"]) == pytest.approx(list(expected_after["judged_with"]), abs=SHOWN)
    assert list(after["with"]) == pytest.approx(list(expected_after["with"]), abs=SHOWN)


def test_in_the_read_only_demo_no_pool_is_sent_and_nothing_is_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_DEMO_MODE", "1")
    at = open_app("metrics", task=TASK, systems=["bm25", "bm25s"])
    assert len(pool_table(at)) == 2  # the numbers are still shown
    assert at.button(key="w_pool_send").disabled
    at.switch_page("views/pages/judging.py").run()
    assert not at.exception and not at.error
    assert any("Nothing to judge" in i.value for i in at.info)
    assert _queue().items(load_demo(TASK).source, TASK) == [] and AnnotationStore().to_dataframe().empty


def test_a_pool_goes_through_two_blind_annotators_and_adjudication_into_the_scores() -> None:
    """The team flow on the demo: a reviewer sends a pool, two annotators grade its first document
    differently on the Judging page, the reviewer adjudicates it relevant, and Metrics' "with" column
    then counts the decision; the export lists the addition."""
    dataset = load_demo(TASK)
    runs = {name: run_system(dataset, name) for name in ("bm25", "bm25s")}
    at = open_app("metrics", task=TASK, systems=list(runs))
    at.text_input(key="w_annotator").input("Rev").run()
    at.button(key="w_pool_send").click().run()
    first = _queue().items(dataset.source, dataset.name)[0]
    for name, grade in (("Ann", 1), ("Dan", 0)):  # each in their own session
        judge = open_app("judging", task=TASK, systems=list(runs))
        judge.text_input(key="w_annotator").input(name)  # in the label form: sent with Save
        assert heading(first) in " ".join(m.value for m in judge.markdown), name
        by_label(judge.selectbox, "Relevance grade").set_value(grade)
        save_label(judge)
        assert not judge.exception
    store = AnnotationStore()
    assert sorted((a.annotator, a.doc_id, a.failure_type) for a in store.list()) == [
        ("Ann", first.doc_id, "grade_1"),
        ("Dan", first.doc_id, "grade_0"),
    ]
    unit = (dataset.source, dataset.name, first.query_id, first.doc_id)
    assert [item.unit for item in adjudication_queue(store.list(), history(store))] == [unit]
    at.switch_page("views/pages/metrics.py").run()
    before = pool_table(at)
    assert list(before["with"]) == pytest.approx(list(before["without"]))  # a disagreement is not a judgement

    decide(store, unit, "grade_2", "Rev", reason="answers it")
    at.run()
    after = pool_table(at)
    decided = {**dataset.qrels, first.query_id: {**dataset.qrels[first.query_id], first.doc_id: 2}}
    expected = compare_with_team(runs, dataset.qrels, decided)
    assert list(after["with"]) == pytest.approx(list(expected["with"]), abs=SHOWN)
    assert any(w > wo for w, wo in zip(after["with"], after["without"]))  # it moved a system that retrieved it
    changes = read_team_qrels(store, dataset).changes
    assert f"{first.query_id} 0 {first.doc_id} 2\n" in changes_text(changes)


def test_a_damaged_queue_file_is_kept_aside_and_reported_and_neither_judging_nor_sending_crashes() -> None:
    """A queue file of an earlier version nested too deeply for Python (it crashed both pages) moves into the
    store as nothing, kept aside with a warning naming the kept file, never a server path; sending works."""
    path = default_queue_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    damaged = "[" * 100_000 + "]" * 100_000
    path.write_text(damaged)
    judge = open_app("judging", task=TASK, systems=["bm25"])
    (kept,) = path.parent.glob("judging_queue.json.damaged-*")
    assert kept.read_text() == damaged and not path.exists()  # nothing the user made is lost
    warnings = " ".join(w.value for w in judge.warning)
    assert md(f"{kept.name}: nested too deeply to read") in warnings and "kept aside" in warnings
    assert str(path.parent) not in warnings and any("Nothing to judge" in i.value for i in judge.info)
    at = open_app("metrics", task=TASK, systems=["bm25", "bm25s"])
    at.text_input(key="w_annotator").input("Rev").run()
    at.button(key="w_pool_send").click().run()
    assert not at.exception and any("Sent:" in s.value for s in at.success), [e.value for e in at.error]
    assert any(md(kept.name) in w.value and "kept aside" in w.value for w in at.warning)
    judge.run()
    assert not judge.exception and any(m.value.startswith("**Document ") for m in judge.markdown)


def test_the_queue_file_of_an_earlier_version_is_judged_after_the_upgrade() -> None:
    dataset = load_demo(TASK)
    docs = pool({"bm25": run_system(dataset, "bm25")}, dataset.qrels, 10).items()[:3]
    entries = [{"query_id": d.query_id, "doc_id": d.doc_id, "systems": ["bm25"], "depth": 10, "sent_by": "Rev",
                "sent_at": "2025-01-01T00:00:00.000000Z"} for d in docs]  # fmt: skip
    path = default_queue_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "tasks": {f"{dataset.source}\t{dataset.name}": entries}}))
    judge = open_app("judging", task=TASK, systems=["bm25"])
    first = _queue().items(dataset.source, dataset.name)[0]
    assert not judge.warning and heading(first) in " ".join(m.value for m in judge.markdown)
    assert [e.doc_id for e in _queue().items(dataset.source, dataset.name)] == [d.doc_id for d in docs]
    assert not path.exists() and len(list(path.parent.glob("judging_queue.json.migrated-*"))) == 1


def test_a_second_server_on_the_same_store_serves_the_queue(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Issue 28 item 5: two servers on one database, each with its own data folder: the second's Judging
    page said 'nothing to judge' (the queue was a file in the first one's folder)."""
    monkeypatch.setenv("R2MED_ANNOTATIONS_URL", str(tmp_path / "team" / "annotations.sqlite"))
    dataset = load_demo(TASK)
    at = open_app("metrics", task=TASK, systems=["bm25", "bm25s"])
    at.text_input(key="w_annotator").input("Ann").run()
    at.button(key="w_pool_send").click().run()
    at.switch_page("views/pages/judging.py").run()
    first, second = _queue().items(dataset.source, dataset.name)[:2]
    assert heading(first) in " ".join(m.value for m in at.markdown)
    by_label(at.selectbox, "Relevance grade").set_value(0)
    save_label(at)
    monkeypatch.setenv("R2MED_DATA_HOME", str(tmp_path / "second-server"))  # its own data folder
    other = open_app("metrics", task=TASK, systems=["bm25"])
    other.text_input(key="w_annotator").input("Ann").run()
    other.switch_page("views/pages/judging.py").run()
    assert not any("Nothing to judge" in i.value for i in other.info)
    assert heading(second) in " ".join(m.value for m in other.markdown)  # the next one for her


def _tables(at):  # type: ignore[no-untyped-def]
    """The Judging page's progress tables: the team's per task (None when not shown) and the annotators'."""
    frames = [df.value for df in at.dataframe]
    team = next((f for f in frames if "queued" in f.columns), None)
    people = next((f for f in frames if "waiting" in f.columns), None)
    return team, people


def test_the_judging_page_shows_each_annotators_and_the_teams_progress_per_task() -> None:
    dataset = load_demo(TASK)
    at = open_app("metrics", task=TASK, systems=["bm25", "bm25s"])
    at.text_input(key="w_annotator").input("Rev").run()
    at.button(key="w_pool_send").click().run()
    queued = len(_queue().items(dataset.source, dataset.name))
    for name, count in (("Ann", 2), ("Dan", 1)):  # each in their own session
        judge = open_app("judging", task=TASK, systems=["bm25"])
        judge.text_input(key="w_annotator").input(name)  # in the label form: sent with Save
        for _ in range(count):
            by_label(judge.selectbox, "Relevance grade").set_value(0)
            save_label(judge)
            assert not judge.exception
    team, people = _tables(judge)
    assert team is not None and people is not None
    assert team.to_dict("records") == [
        {"dataset": dataset.source, "task": TASK, "queued": queued, "judged by 2": 1, "judged by fewer": 1,
         "not judged yet": queued - 2}
    ]  # fmt: skip
    assert people[["annotator", "judged", "waiting"]].to_dict("records") == [
        {"annotator": "Ann", "judged": 2, "waiting": 1},
        {"annotator": "Dan", "judged": 1, "waiting": 1},
    ]
    assert any(f"1 of the {queued} queued document(s) judged by you" in p.proto.text for p in judge.get("progress"))


def test_the_operator_sets_how_many_annotators_judge_each_document(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_JUDGES_PER_DOCUMENT", "1")
    dataset = load_demo(TASK)
    _queue().send(dataset.source, dataset.name, pool({"bm25": run_system(dataset, "bm25")}, dataset.qrels, 10), "Rev")
    first, second = _queue().items(dataset.source, dataset.name)[:2]
    for name, shown in (("Ann", first), ("Dan", second)):  # one annotator each: Dan gets the next document
        at = open_app("metrics", task=TASK, systems=["bm25"])
        at.text_input(key="w_annotator").input(name).run()
        at.switch_page("views/pages/judging.py").run()
        assert heading(shown) in " ".join(m.value for m in at.markdown), name
        assert any("goes to 1 annotator(s)" in c.value for c in at.caption)


def test_keys_grade_and_skip_on_the_judging_page_beside_the_familys_guideline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28 item 7: the keyboard's events (``0``/``1``/``2``, ``s``) grade or skip the document shown and
    the next one follows; each event is stored once over reruns, as the pool; a skipped document is not
    judged and stays the annotator's; the task family's guideline is beside the document."""
    from r2med_app.views.datasets import dataset_key
    from r2med_app.views.state import scope, widget_key
    from r2med_core.judging.list_judging import now_ms
    from r2med_core.judging.queue import blind_name
    from r2med_core.tasks import judging_guideline

    monkeypatch.setenv("R2MED_JUDGES_PER_DOCUMENT", "1")
    dataset = load_demo(TASK)
    _queue().send(dataset.source, dataset.name, pool({"bm25": run_system(dataset, "bm25")}, dataset.qrels, 10), "Rev")
    items = _queue().items(dataset.source, dataset.name)[:3]
    at = open_app("judging", task=TASK, systems=["bm25"])
    assert any(judging_guideline(dataset.family)[:60] in c.value for c in at.caption)
    at.text_input(key="w_annotator").set_value("Ann").run()
    key = widget_key("judge_keys", scope(dataset_key(dataset)))

    def press(*events: tuple[str, QueueEntry, int | None]) -> str:
        at.session_state[key] = {
            "events": [
                {"id": i, "doc": blind_name(items.index(e) + 1), "at": now_ms(), "ms": 2500}
                | ({"skip": True} if g is None else {"grade": g})
                for i, e, g in events
            ]
        }
        at.run()
        assert not at.exception and not at.warning, [w.value for w in at.warning]
        return " ".join(m.value for m in at.markdown)

    assert heading(items[1]) in press(("k1", items[0], 2))
    assert heading(items[2]) in press(("k1", items[0], 2), ("k2", items[1], None))  # k1 again
    for _ in range(2):
        at.run()
    labels = AnnotationStore().list()
    assert [(a.query_id, a.doc_id, a.failure_type, a.system, a.annotator, a.time_ms) for a in labels] == [
        (items[0].query_id, items[0].doc_id, "grade_2", "pool@10", "Ann", 2500)
    ]
    assert _queue().serve(dataset.source, dataset.name, typed_person("Ann")).entry == items[1]  # skipped: hers


def test_u_says_unsure_on_the_judging_page_and_sends_the_document_to_a_reviewer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 28 item 7: the keyboard's ``u`` records "unsure" (with its time) on the document shown and the
    next one follows; the document is off the annotator's queue, waits for adjudication and is no grade in
    the team's qrels. The form offers Unsure too, for the mouse."""
    from r2med_app.views.datasets import dataset_key
    from r2med_app.views.state import scope, widget_key
    from r2med_core.judging.list_judging import now_ms
    from r2med_core.judging.queue import blind_name

    monkeypatch.setenv("R2MED_JUDGES_PER_DOCUMENT", "1")
    dataset = load_demo(TASK)
    _queue().send(dataset.source, dataset.name, pool({"bm25": run_system(dataset, "bm25")}, dataset.qrels, 10), "Rev")
    items = _queue().items(dataset.source, dataset.name)[:3]
    at = open_app("judging", task=TASK, systems=["bm25"])
    at.text_input(key="w_annotator").set_value("Ann").run()
    unit = blind_name(1)
    at.session_state[widget_key("judge_keys", scope(dataset_key(dataset)))] = {
        "events": [{"id": "k1", "doc": unit, "unsure": True, "at": now_ms(), "ms": 4200}]
    }
    at.run()
    assert not at.exception and not at.warning, [w.value for w in at.warning]
    assert heading(items[1]) in " ".join(m.value for m in at.markdown)
    by_label(at.selectbox, "Relevance grade").set_value("unsure")  # the mouse: the form's Unsure
    save_label(at)
    assert not at.exception and not at.error, [e.value for e in at.error]
    labels = AnnotationStore().list()
    assert [(a.doc_id, a.failure_type, a.annotator) for a in labels] == [
        (items[0].doc_id, "unsure", "Ann"),
        (items[1].doc_id, "unsure", "Ann"),
    ]
    assert labels[0].time_ms == 4200
    assert heading(items[2]) in " ".join(m.value for m in at.markdown)
    assert [i.unit[3] for i in adjudication_queue(labels, [])] == [items[0].doc_id, items[1].doc_id]
    assert read_team_qrels(AnnotationStore(), dataset).changes == ()


def test_a_mouse_save_on_the_judging_page_records_the_time_since_the_document_was_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 28 item 7: a grade saved with the form (the mouse) records the time spent on the document, as a
    key does: from when the page showed it to the Save, each document's time starting when it is shown."""
    import time

    monkeypatch.setenv("R2MED_JUDGES_PER_DOCUMENT", "1")
    dataset = load_demo(TASK)
    _queue().send(dataset.source, dataset.name, pool({"bm25": run_system(dataset, "bm25")}, dataset.qrels, 10), "Rev")
    at = open_app("judging", task=TASK, systems=["bm25"])
    started = time.monotonic()
    at.text_input(key="w_annotator").set_value("Ann").run()
    time.sleep(1.5)  # reading the first document
    by_label(at.selectbox, "Relevance grade").set_value(2)
    save_label(at)
    first = (time.monotonic() - started) * 1000
    by_label(at.selectbox, "Relevance grade").set_value(0)  # the next one, graded at once
    save_label(at)
    assert not at.exception and not at.error, [e.value for e in at.error]
    slow, quick = AnnotationStore().list()
    assert (slow.failure_type, quick.failure_type) == ("grade_2", "grade_0")
    assert slow.time_ms is not None and quick.time_ms is not None
    assert 1500 <= slow.time_ms <= first + 1000  # from the document shown (just before `started`) to the Save
    assert quick.time_ms < slow.time_ms - 1000  # its own time, not the first document's


# --------------------------------------------------------------------------- nothing on the blind page primes a grade


def _everything(at) -> str:  # type: ignore[no-untyped-def]
    """Every element the page sent, as text: values, labels, help, widget keys, a component's arguments."""
    found: list[str] = []

    def walk(node) -> None:  # type: ignore[no-untyped-def]
        proto = getattr(node, "proto", None)
        if proto is not None:
            found.append(str(proto))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    shown = [*at.markdown, *at.caption, *at.success, *at.info, *at.warning, *at.error, *at.title]
    return "\n".join(found + [e.value for e in shown])


def _names(at, entry: QueueEntry) -> bool:  # type: ignore[no-untyped-def]
    """Whether the page names ``entry``'s document id anywhere, as written or as markdown escapes it."""
    page = _everything(at)
    return entry.doc_id in page or md(entry.doc_id) in page


def test_the_blind_judging_page_names_a_document_by_its_place_in_the_queue_never_its_id() -> None:
    """Issue 36: on the demo a document's id names its diagnosis (``siadh_0``), so the blind page shows
    the document's place in the queue instead — in its heading, its keyboard, its widgets and the message
    after a save — while the judgement is stored against the real id."""
    dataset = load_demo(TASK)
    _queue().send(dataset.source, dataset.name, pool({"bm25": run_system(dataset, "bm25")}, dataset.qrels, 10), "Rev")
    first, second = _queue().items(dataset.source, dataset.name)[:2]
    at = open_app("judging", task=TASK, systems=["bm25"])
    at.text_input(key="w_annotator").set_value("Ann").run()
    assert heading(first) in " ".join(m.value for m in at.markdown) and "list_judge" in _everything(at)  # keyboard
    assert not _names(at, first) and first.doc_id not in str(dict(at.query_params))
    by_label(at.selectbox, "Relevance grade").set_value(1)
    save_label(at)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any(s.value.endswith(f"on {md('#1')}") for s in at.success), [s.value for s in at.success]
    assert heading(second) in " ".join(m.value for m in at.markdown)
    assert not _names(at, first) and not _names(at, second)
    (label,) = AnnotationStore().list()
    assert (label.query_id, label.doc_id, label.failure_type) == (first.query_id, first.doc_id, "grade_1")


def _marked(at) -> bool:  # type: ignore[no-untyped-def]
    """Whether the Judging page's document shows any word highlighted."""
    return any("<mark>" in h.proto.body for h in at.get("html"))


def test_query_words_are_highlighted_on_the_judging_page_only_for_whoever_asks() -> None:
    """Issue 36: marked words can steer a grade, so the blind page marks none by default; a toggle marks the
    document's words shared with the query, kept in the page's address like every view setting."""
    dataset = load_demo(TASK)
    _queue().send(dataset.source, dataset.name, pool({"bm25": run_system(dataset, "bm25")}, dataset.qrels, 10), "Rev")
    at = open_app("judging", task=TASK, systems=["bm25"])
    assert at.get("html") and not _marked(at)
    at.toggle(key="w_marks").set_value(True).run()
    assert not at.exception and _marked(at)
    assert at.query_params.get("marks") == "1"
    again = open_app("judging", task=TASK, systems=["bm25"], marks="1")  # a copied address keeps the choice
    assert _marked(again)
    again.toggle(key="w_marks").set_value(False).run()
    assert not _marked(again) and "marks" not in again.query_params
