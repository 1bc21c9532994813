"""Judging a list by keyboard: each grade event is stored once however often a rerun delivers it,
bad events from the browser are refused, and rows stay blind until their annotator graded them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from r2med_core.judging.agreement import agreement
from r2med_core.judging.annotations import RELEVANCE_CODES, TAXONOMY, Annotation, AnnotationStore
from r2med_core.judging.identity import Person
from r2med_core.judging.list_judging import (
    MAX_AGE_MINUTES,
    MAX_EVENTS,
    GradeEvent,
    SaveOnce,
    latest_grades,
    list_rows,
    now_ms,
    parse_events,
    save_grades,
    save_unit_grades,
)
from r2med_core.judging.visibility import Sight
from r2med_core.runs import Run

QID = "q1"
RUN = Run("bm25", {QID: [("d1", 3.0), ("d2", 2.0), ("d3", 1.0), ("d4", 0.5)]})
DOCS = ["d1", "d2", "d3"]
CORPUS = {"d1": "first <b>text</b>", "d2": "second", "d3": "third", "d4": "fourth"}
QRELS = {QID: {"d2": 1}}
T0 = now_ms() - 60_000  # keypress times; each save below happens "a minute later" on its own clock
#: The server's clock of the saves: two minutes after T0 however long the suite ran before these tests
#: (with the real clock, a keypress made at import is "over 10 minutes ago" in a slow full run).
NOW = T0 + 120_000


@pytest.fixture
def store(tmp_path: Path) -> AnnotationStore:
    return AnnotationStore(tmp_path / "labels.sqlite")


def _save(
    store: AnnotationStore,
    ledger: SaveOnce,
    events: list[GradeEvent],
    who: str = "ann",
    signed_in: bool = False,
    now: int | None = None,
):
    """Save as ``who``; ``signed_in``: as a signed-in annotator (who labels blind), else a typed name."""
    sight = Sight(Person(who, "proxy", frozenset({"annotator"})), signed_in=True) if signed_in else None
    return save_grades(
        store,
        ledger,
        events,
        dataset="demo:t",
        task="t",
        query_id=QID,
        ranking=RUN,
        annotator=who,
        sight=sight,
        now=NOW if now is None else now,
    )


def _value(*events: tuple[str, str, int]) -> dict:
    """A component value; an event ``e<n>`` was pressed ``n`` seconds after T0 (ids number keypresses)."""
    return {"events": [{"id": i, "doc": d, "grade": g, "at": T0 + 1000 * int(i[1:])} for i, d, g in events]}


def _iso(ms: int) -> str:
    """A time in milliseconds as the store writes it."""
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_grade_codes_are_registered_document_labels() -> None:
    assert set(RELEVANCE_CODES.values()) == {0, 1, 2}
    for code in RELEVANCE_CODES:
        assert TAXONOMY[code].scope == "document"
    with pytest.raises(ValueError, match="doc_id is required"):
        Annotation(dataset="d", task="t", query_id=QID, failure_type="grade_1", annotator="a")


def test_an_event_delivered_on_every_rerun_is_saved_once(store: AnnotationStore) -> None:
    ledger = SaveOnce()
    value = _value(("e1", "d1", 2), ("e2", "d2", 0))
    for _rerun in range(4):  # Streamlit hands the same component value to every rerun
        events, problems = parse_events(value, DOCS)
        assert problems == []
        _save(store, ledger, events)
    saved = store.list()
    assert [(a.doc_id, a.failure_type, a.rank, a.system, a.annotator) for a in saved] == [
        ("d1", "grade_2", 1, "bm25", "ann"),
        ("d2", "grade_0", 2, "bm25", "ann"),
    ]
    # The component re-sends the pending list with a new event appended: only the new one is stored.
    events, _ = parse_events(_value(("e1", "d1", 2), ("e2", "d2", 0), ("e3", "d1", 1)), DOCS)
    outcomes = _save(store, ledger, events)
    assert [(o.event.event_id, o.status) for o in outcomes] == [("e3", "saved")]
    for _rerun in range(3):  # e1 (grade 2 on d1) comes again after the regrade: it must not win again
        assert _save(store, ledger, events) == []
    assert latest_grades(store.list(), "ANN") == {"d1": 1, "d2": 0}  # a regrade adds a row; the latest stands
    assert len(store) == 3


def test_the_same_event_twice_in_one_value_and_an_unchanged_grade_add_nothing(store: AnnotationStore) -> None:
    ledger = SaveOnce()
    events, _ = parse_events(_value(("e1", "d3", 1), ("e1", "d3", 1)), DOCS)
    assert [o.status for o in _save(store, ledger, events)] == ["saved"]
    # A new keypress giving the grade already stored (say, after a page reload lost the session) is no new row.
    events, _ = parse_events(_value(("e9", "d3", 1)), DOCS)
    assert [o.status for o in _save(store, SaveOnce(), events)] == ["unchanged"]
    assert len(store) == 1


def test_a_replayed_event_never_reverts_a_later_grade(store: AnnotationStore) -> None:
    """An event sent again after the ledger forgot it (or after a reload lost the session's ledger) was
    pressed before the annotator's latest grade on the document: that grade stands, and nothing is stored."""
    ledger = SaveOnce(memory=2)
    for value in (_value(("e1", "d1", 2)), _value(("e2", "d1", 0)), _value(("e3", "d2", 1)), _value(("e4", "d3", 1))):
        assert [o.status for o in _save(store, ledger, parse_events(value, DOCS)[0])] == ["saved"]
    assert "e1" not in ledger  # forgotten
    for replayer in (ledger, SaveOnce()):
        outcomes = _save(store, replayer, parse_events(_value(("e1", "d1", 2)), DOCS)[0])
        assert [o.status for o in outcomes] == ["stale"]
    assert latest_grades(store.list(), "ann") == {"d1": 0, "d2": 1, "d3": 1} and len(store) == 4
    # Each grade is recorded at its keypress: the replay is older than the grade that replaced it.
    assert [a.created_at for a in store.list()][:2] == [_iso(T0 + 1000), _iso(T0 + 2000)]


def test_two_grades_of_one_document_in_one_message_keep_their_order(store: AnnotationStore) -> None:
    """Saved one after the other in the same rerun, the second keypress is still the later grade."""
    outcomes = _save(store, SaveOnce(), parse_events(_value(("e1", "d1", 2), ("e2", "d1", 1)), DOCS)[0])
    assert [o.status for o in outcomes] == ["saved", "saved"]
    assert latest_grades(store.list(), "ann") == {"d1": 1}


def test_a_keypress_is_never_dated_in_the_future_nor_long_ago(store: AnnotationStore) -> None:
    now = T0 + 60_000
    future = {"events": [{"id": "f", "doc": "d1", "grade": 2, "at": now + 10**9}]}
    (saved,) = _save(store, SaveOnce(), parse_events(future, DOCS)[0], now=now)
    assert store.get(saved.label_id).created_at == _iso(now)
    old = {"events": [{"id": "o", "doc": "d2", "grade": 2, "at": now - MAX_AGE_MINUTES * 60_000 - 1}]}
    (refused,) = _save(store, SaveOnce(), parse_events(old, DOCS)[0], now=now)
    assert refused.status == "refused" and "press the key again" in refused.error
    assert len(store) == 1


def test_one_message_carries_at_most_max_events_and_says_what_waits(store: AnnotationStore) -> None:
    value = {"events": [{"id": f"k{i}", "doc": DOCS[i % 3], "grade": i % 3, "at": T0} for i in range(MAX_EVENTS + 50)]}
    events, problems = parse_events(value, DOCS)
    assert [e.event_id for e in events] == [f"k{i}" for i in range(MAX_EVENTS)]
    assert problems == [
        f"50 of {MAX_EVENTS + 50} grades sent at once (at most {MAX_EVENTS} a message); "
        "the list sends them again with your next grade"
    ]
    assert len(_save(store, SaveOnce(), events)) == MAX_EVENTS


def test_the_ledger_forgets_oldest_ids_beyond_its_memory() -> None:
    from r2med_core.judging.list_judging import Outcome

    ledger = SaveOnce(memory=2)
    for name in ("a", "b", "c"):
        ledger.record(Outcome(GradeEvent(name, "d1", 1, T0), "saved"))
    assert "a" not in ledger and "b" in ledger and "c" in ledger


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        ({"id": "x", "doc": "d4", "grade": 1, "at": T0}, "not in this list"),  # ranked, but below the list shown
        ({"id": "x", "doc": "../etc", "grade": 1, "at": T0}, "not in this list"),
        ({"id": "x", "doc": "d1", "grade": 3, "at": T0}, "not 0, 1 or 2"),
        ({"id": "x", "doc": "d1", "grade": True, "at": T0}, "not 0, 1 or 2"),
        ({"id": "x", "doc": "d1", "grade": "1", "at": T0}, "not 0, 1 or 2"),
        ({"doc": "d1", "grade": 1, "at": T0}, "valid id"),
        ({"id": "x" * 200, "doc": "d1", "grade": 1, "at": T0}, "valid id"),
        ({"id": "x", "doc": "d1", "grade": 1}, "valid time"),
        ({"id": "x", "doc": "d1", "grade": 1, "at": str(T0)}, "valid time"),
        ({"id": "x", "doc": "d1", "grade": 1, "at": True}, "valid time"),
        ({"id": "x", "doc": "d1", "grade": 1, "at": -1}, "valid time"),
        ({"id": "x", "doc": "d1", "grade": 1, "at": 2**60}, "valid time"),
        ({"id": "x", "doc": "d1", "grade": 1, "at": float(T0)}, "valid time"),
        ("d1", "not an object"),
    ],
)
def test_events_the_list_did_not_offer_are_refused(store: AnnotationStore, item: object, problem: str) -> None:
    events, problems = parse_events({"events": [item]}, DOCS)
    assert events == [] and len(problems) == 1 and problem in problems[0]
    _save(store, SaveOnce(), events)
    assert len(store) == 0


def test_a_value_that_is_not_an_events_list_is_refused() -> None:
    assert parse_events(None, DOCS) == ([], [])
    assert parse_events({"events": "d1"}, DOCS)[0] == []
    assert parse_events(["d1"], DOCS)[1] == ["the list sent no events list"]


def test_a_skip_is_taken_only_where_the_page_offers_it_and_stores_nothing(store: AnnotationStore) -> None:
    skip = {"events": [{"id": "s1", "doc": "d1", "skip": True, "at": T0}]}
    events, problems = parse_events(skip, DOCS)  # Judge a list has no skip: refused
    assert events == [] and "is not 0, 1 or 2" in problems[0]
    events, problems = parse_events(skip, DOCS, skips=True)
    assert problems == [] and [e.skip for e in events] == [True]
    assert [o.status for o in _save(store, SaveOnce(), events)] == ["skipped"] and len(store) == 0


def test_unsure_is_taken_only_where_the_page_offers_it_and_stored_once_as_unsure(store: AnnotationStore) -> None:
    """Issue 28 item 7: the Judging page's ``u`` stores an "unsure" label (with its time) once over reruns; it
    replaces the annotator's earlier grade and is replaced by a later one; elsewhere it is refused."""
    value = {"events": [{"id": "e2", "doc": "d1", "unsure": True, "at": T0 + 2000, "ms": 9000}]}
    events, problems = parse_events(value, DOCS)  # Judge a list has no unsure: refused
    assert events == [] and "is not 0, 1 or 2" in problems[0]
    events, problems = parse_events(value, DOCS, unsure=True)
    assert problems == [] and [(e.unsure, e.time_ms) for e in events] == [(True, 9000)]
    ledger = SaveOnce()
    _save(store, ledger, parse_events(_value(("e1", "d1", 2)), DOCS)[0])
    for _rerun in range(3):
        _save(store, ledger, events)
    again = parse_events({"events": [{"id": "e3", "doc": "d1", "unsure": True, "at": T0 + 3000}]}, DOCS, unsure=True)
    assert [o.status for o in _save(store, ledger, again[0])] == ["unchanged"]  # unsure already
    assert [(a.doc_id, a.failure_type, a.time_ms) for a in store.list()] == [
        ("d1", "grade_2", None),
        ("d1", "unsure", 9000),
    ]
    assert latest_grades(store.list(), "ann") == {}  # unsure is no grade: the earlier 2 no longer stands
    _save(store, ledger, parse_events(_value(("e4", "d1", 1)), DOCS)[0])
    assert latest_grades(store.list(), "ann") == {"d1": 1}


def test_unit_events_are_saved_on_their_own_query_with_the_ranking_given(store: AnnotationStore) -> None:
    """The Judging page names (query, document) units by keys of its own (its blind names), since the document
    shown changes with every key: a grade pressed on the previous document and sent again with the next still
    lands on its own query, against the real document id."""
    units = {key: (q, d, Run("pool@10")) for key, q, d in (("#1", "q1", "d1"), ("#2", "q2", "d1"))}
    value = {
        "events": [
            {"id": "e1", "doc": "#1", "grade": 2, "at": T0, "ms": 3500},
            {"id": "e2", "doc": "#2", "skip": True, "at": T0 + 1},
        ]
    }
    events, problems = parse_events(value, units, skips=True)
    assert problems == [] and parse_events(value, ["d1"], skips=True)[0] == []
    ledger = SaveOnce()
    for _rerun in range(3):
        save_unit_grades(store, ledger, events, units, dataset="demo:t", task="t", annotator="ann", now=NOW)
    assert [(a.query_id, a.doc_id, a.failure_type, a.system, a.rank, a.time_ms) for a in store.list()] == [
        ("q1", "d1", "grade_2", "pool@10", None, 3500)  # with the time the document was shown
    ]
    for spent in (-1, 2**31, 1.5, "3500", True):
        wrong = {"events": [{"id": "e3", "doc": "#1", "grade": 1, "at": T0, "ms": spent}]}
        assert parse_events(wrong, units)[1] == ["an event with an invalid time spent on its document"]
    assert ledger.outcome("e2").status == "skipped"


def test_a_refused_write_is_reported_and_not_retried(store: AnnotationStore) -> None:
    ledger = SaveOnce()
    events, _ = parse_events(_value(("e1", "d1", 2)), DOCS)
    outcomes = _save(store, ledger, events, who="bad\x00name")
    assert outcomes[0].status == "refused" and "NUL" in outcomes[0].error
    assert _save(store, ledger, events) == []  # handled: the annotator presses again (a new event)
    assert len(store) == 0


def test_grades_are_blind_until_the_annotator_saw_the_document_judged(store: AnnotationStore) -> None:
    ledger = SaveOnce()
    _save(store, ledger, parse_events(_value(("e1", "d1", 2), ("e2", "d2", 1)), DOCS)[0], signed_in=True)
    assert [a.blind for a in store.list()] == [True, True]  # a grade on d1 says nothing about d2
    # A regrade of a row whose judgement is now shown is not blind.
    _save(store, ledger, parse_events(_value(("e3", "d1", 0)), DOCS)[0], signed_in=True)
    assert store.list()[-1].blind is False
    # A label on another document, made anywhere, leaves d3 hidden: her first grade on it is blind.
    store.add(Annotation(dataset="demo:t", task="t", query_id=QID, doc_id="d4", failure_type="other", annotator="ann"))
    _save(store, ledger, parse_events(_value(("e4", "d3", 1)), DOCS)[0], signed_in=True)
    assert store.list()[-1].blind is True
    # A label on the whole query (the explorer then shows its judgements) reveals every document of it.
    store.add(Annotation(dataset="demo:t", task="t", query_id=QID, failure_type="other", annotator="ann"))
    _save(store, ledger, parse_events(_value(("e5", "d2", 0)), DOCS)[0], signed_in=True)
    assert store.list()[-1].blind is False
    _save(store, ledger, parse_events(_value(("e6", "d2", 2)), DOCS)[0], who="bob", signed_in=True)
    assert store.list()[-1].blind is True  # another annotator's first grade on d2 is theirs to make blind
    _save(store, ledger, parse_events(_value(("e7", "d3", 2)), DOCS)[0], who="dan")
    assert store.list()[-1].blind is False  # without sign-in nothing is recorded blind


def test_rows_show_judgements_and_others_labels_only_once_graded(store: AnnotationStore) -> None:
    ledger = SaveOnce()
    _save(store, ledger, parse_events(_value(("b1", "d2", 2), ("b2", "d1", 0)), DOCS)[0], who="bob")
    rows = list_rows(RUN, QID, 3, CORPUS, QRELS, store.list(), "ann")
    assert [r.doc_id for r in rows] == DOCS and [r.rank for r in rows] == [1, 2, 3]
    assert all(not r.revealed and r.qrels_grade is None and r.others == () and r.grade is None for r in rows)
    assert rows[0].to_args()["text"] == "first <b>text</b>"  # passed as text; the component sets textContent
    _save(store, ledger, parse_events(_value(("a1", "d2", 1)), DOCS)[0], who="ann")
    rows = list_rows(RUN, QID, 3, CORPUS, QRELS, store.list(), "ann")
    assert rows[1].revealed and rows[1].grade == 1 and rows[1].qrels_grade == 1
    assert rows[1].others == ("bob: Grade 2: highly relevant",)
    assert not rows[0].revealed and rows[0].others == ()  # bob's grade on d1 stays hidden: ann has not graded it


def test_a_row_its_annotator_marked_unsure_shows_unsure_and_stays_blind(store: AnnotationStore) -> None:
    """A document the annotator marked unsure (on the Judging page) shows as unsure on the list, not as
    ungraded; it is still no grade, so its judgements stay hidden; a later grade replaces the unsure."""
    ledger = SaveOnce()
    unsure = {"events": [{"id": "u1", "doc": "d1", "unsure": True, "at": T0 + 1000}]}
    _save(store, ledger, parse_events(unsure, DOCS, unsure=True)[0])
    _save(store, ledger, parse_events(_value(("e1", "d1", 2)), DOCS)[0], who="bob")
    rows = list_rows(RUN, QID, 3, CORPUS, QRELS, store.list(), "ann")
    assert [(r.unsure, r.grade, r.revealed, r.others) for r in rows] == [
        (True, None, False, ()), (False, None, False, ()), (False, None, False, ()),
    ]  # fmt: skip
    assert [r.to_args()["grade"] for r in rows] == ["unsure", None, None]  # the list's badge: "u · unsure"
    assert list_rows(RUN, QID, 3, CORPUS, QRELS, store.list(), "bob")[0].unsure is False  # ann's, not bob's
    _save(store, ledger, parse_events(_value(("e3", "d1", 1)), DOCS)[0])
    rows = list_rows(RUN, QID, 3, CORPUS, QRELS, store.list(), "ann")
    assert (rows[0].unsure, rows[0].grade, rows[0].revealed) == (False, 1, True)
    assert rows[0].to_args()["grade"] == 1


def test_list_grades_count_in_agreement(store: AnnotationStore) -> None:
    for who, grades in (("ann", (2, 1, 0)), ("bob", (2, 1, 1))):
        events = [GradeEvent(f"{who}{i}", doc, g, T0 + i) for i, (doc, g) in enumerate(zip(DOCS, grades))]
        _save(store, SaveOnce(), events, who=who)
    (pair,) = agreement(store.list(), "grade").pairs
    assert (pair.units, pair.agreed) == (3, 2)


def test_list_grades_do_not_unblind_the_explorer(store: AnnotationStore) -> None:
    ann = Sight(Person("ann", "proxy", frozenset({"annotator"})), signed_in=True)
    _save(store, SaveOnce(), [GradeEvent("e1", "d1", 2, T0)], signed_in=True)
    assert ann.hidden(store.list(), ("demo:t", "t", QID, None))  # the explorer still hides the qrels
    store.add(Annotation(dataset="demo:t", task="t", query_id=QID, failure_type="other", annotator="ann"))
    assert not ann.hidden(store.list(), ("demo:t", "t", QID, None))


# --------------------------------------------------------------------------- the page (AppTest, no browser)


def _page(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str):  # type: ignore[no-untyped-def]
    """The Judge a list page on the demo, and the component key of query ``qid``'s top 10 under bm25."""
    from streamlit.testing.v1 import AppTest

    from r2med_app.views.datasets import dataset_key
    from r2med_app.views.state import scope, widget_key
    from r2med_core import load_demo

    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")
    monkeypatch.setenv("R2MED_DATA_HOME", str(tmp_path / "data"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    dataset = load_demo("clinical-case")
    router = Path(__file__).resolve().parent.parent / "r2med_app" / "streamlit_app.py"
    at = AppTest.from_file(str(router), default_timeout=300)
    at.query_params["task"] = "clinical-case"
    at.query_params["systems"] = "bm25"
    at.run()
    at.switch_page("views/pages/list_judging.py").run()
    assert not at.exception, [e.value for e in at.exception]
    qid = next(iter(dataset.queries))
    key = widget_key("lj_list", scope(scope(dataset_key(dataset)), qid, "bm25", 10))
    return at, key, dataset, qid


def _page_labels(tmp_path: Path) -> list[Annotation]:
    path = tmp_path / "data" / "annotations.sqlite"
    return AnnotationStore(path).list() if path.exists() else []


def test_the_page_saves_a_grade_once_over_reruns_as_the_typed_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from r2med_core import run_system

    at, key, dataset, qid = _page(monkeypatch, tmp_path)
    first, second = [doc for doc, _ in run_system(dataset, "bm25").top(qid, 2)]
    pressed = now_ms()
    at.session_state[key] = {"events": [{"id": "k1", "doc": second, "grade": 2, "at": pressed}]}
    at.run()  # no name yet (a session after a server restart): nothing is saved nor acknowledged
    assert _page_labels(tmp_path) == []
    at.text_input(key="w_annotator").set_value("Dr. Typed").run()
    at.session_state[key] = {
        "events": [
            {"id": "k1", "doc": second, "grade": 2, "at": pressed},
            {"id": "k2", "doc": first, "grade": 1, "at": pressed + 500},
        ]
    }
    for _ in range(3):
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    # The browser kept k1 (unacknowledged) and sent it again: saved once the name is there.
    assert [(a.doc_id, a.failure_type, a.rank, a.annotator, a.blind) for a in _page_labels(tmp_path)] == [
        (second, "grade_2", 2, "Dr. Typed", False),
        (first, "grade_1", 1, "Dr. Typed", False),
    ]
    assert any("2 of 10 rows graded by Dr\\. Typed" in c.value for c in at.caption)  # markdown-escaped


def test_the_page_shows_a_document_its_annotator_marked_unsure_as_unsure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A document marked unsure on the Judging page reads "unsure" on Judge a list (its row and the count),
    not as one still to grade."""
    import json

    from r2med_core import run_system

    at, _key, dataset, qid = _page(monkeypatch, tmp_path)
    first, second = [doc for doc, _ in run_system(dataset, "bm25").top(qid, 2)]
    AnnotationStore(tmp_path / "data" / "annotations.sqlite").add(
        Annotation(
            dataset=dataset.source, task=dataset.name, query_id=qid, doc_id=first, failure_type="unsure",
            annotator="Dr. Typed",
        )
    )  # fmt: skip
    at.text_input(key="w_annotator").set_value("Dr. Typed").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("0 of 10 rows graded by Dr\\. Typed · 1 marked unsure" in c.value for c in at.caption)
    (component,) = [e for e in at.get("component_instance") if "rows" in e.proto.json_args]
    rows = json.loads(component.proto.json_args)["rows"]
    shown = [(r["doc"], r["grade"], r["revealed"]) for r in rows[:2]]
    assert shown == [(first, "unsure", False), (second, None, False)]


def test_the_read_only_demo_saves_no_grade(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    at, key, dataset, qid = _page(monkeypatch, tmp_path, R2MED_DEMO_MODE="1")
    from r2med_core import run_system

    doc = run_system(dataset, "bm25").top(qid, 1)[0][0]
    at.session_state[key] = {"events": [{"id": "k1", "doc": doc, "grade": 2, "at": now_ms()}]}
    at.run()
    assert not at.exception
    assert _page_labels(tmp_path) == []
    assert not at.text_input  # no name is asked: nothing can be saved here
