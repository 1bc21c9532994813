"""The judging queue in the annotation store, on SQLite and PostgreSQL: one queue for every server on a
database, each queued document assigned to N annotators, progress per task and annotator, and the queue
file of earlier versions moved into the store once (its damaged entries skipped and named, the file kept)."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from r2med_core.judging import queue
from r2med_core.judging.annotations import Annotation, AnnotationStore, AnnotationStoreError
from r2med_core.judging.identity import Person, typed_person
from r2med_core.judging.pooling import Pool, PooledDoc, pool
from r2med_core.judging.queue import (
    AnnotatorProgress,
    JudgingQueue,
    QueueEntry,
    TaskProgress,
    kept_queue_files,
    migrate_queue_file,
)
from r2med_core.judging.stores import SCHEMA_VERSION

from .test_annotations import label
from .test_pooling import QRELS, A, B

Target = str | Path
NewTarget = Callable[[str], Target]
DS, TASK = "R2MED", "T"
FIVE = pool({"A": A, "B": B}, QRELS, depth=3)  # q1: u2, u1, u5; q2: u4, u6


def _judge(store: AnnotationStore, who: str, entry: QueueEntry | None, task: str = TASK) -> None:
    assert entry is not None
    kind = "relevant_unjudged" if who.startswith("proposed by ") else "not_relevant"
    unit = {"dataset": DS, "task": task, "query_id": entry.query_id, "doc_id": entry.doc_id}
    store.add(Annotation(**unit, failure_type=kind, annotator=who))


def _pairs(entries: list[QueueEntry]) -> list[tuple[str, str]]:
    return [(e.query_id, e.doc_id) for e in entries]


def _assigned(store: AnnotationStore) -> list[int]:
    """How many annotators each assigned document has, fewest first."""
    with store._connection() as conn:
        rows = conn.execute("SELECT queue_id, count(*) FROM assignments GROUP BY queue_id").fetchall()
    return sorted(int(n) for _, n in rows)


# --------------------------------------------------------------------------- the queue in the store


def test_a_send_queues_each_document_once_in_the_order_sent(new_target: NewTarget) -> None:
    queue = JudgingQueue(AnnotationStore(new_target("store")))
    assert queue.items(DS, TASK) == []
    assert queue.send(DS, TASK, FIVE, "rev") == 5
    assert queue.send(DS, TASK, pool({"A": A, "B": B}, QRELS, depth=5), "rev") == 1  # only u3 is new
    entries = queue.items(DS, TASK)
    assert _pairs(entries) == [("q1", "u2"), ("q1", "u1"), ("q1", "u5"), ("q2", "u4"), ("q2", "u6"), ("q1", "u3")]
    assert (entries[1].systems, entries[1].depth, entries[1].sent_by) == (("A",), 3, "rev")
    assert entries[-1].depth == 5 and queue.items(DS, "other task") == []
    with pytest.raises(ValueError, match="sender"):
        queue.send(DS, TASK, FIVE, " ")
    hostile = Pool(10, ("A",), {"q1": (PooledDoc("q1", "u9", ("A",)), PooledDoc("q1", "d\x00", ("A",)))})
    with pytest.raises(ValueError, match="doc_id contains a NUL character"):
        queue.send(DS, TASK, hostile, "rev")
    assert len(queue.items(DS, TASK)) == 6  # nothing of the refused send


def test_two_servers_on_one_database_serve_one_queue(new_target: NewTarget) -> None:
    """Issue 28 item 5: the queue was a JSON file in one server's data folder, so a second server on the
    same database said 'nothing to judge'."""
    target = new_target("shared")
    first, second = JudgingQueue(AnnotationStore(target)), JudgingQueue(AnnotationStore(target))
    first.send(DS, TASK, FIVE, "rev")
    assert second.items(DS, TASK) == first.items(DS, TASK) and len(second.items(DS, TASK)) == 5
    ann = typed_person("Ann")
    now = first.serve(DS, TASK, ann).entry
    assert now == first.items(DS, TASK)[0]
    assert second.serve(DS, TASK, ann).entry == now  # the same assignment, whichever server she asks
    _judge(first.store, "Ann", now)
    after = second.serve(DS, TASK, ann)
    assert after.entry == first.items(DS, TASK)[1] and (after.judged, after.left, after.queued) == (1, 4, 5)


def test_each_document_goes_to_two_annotators_unless_the_operator_raises_it(new_target: NewTarget) -> None:
    store = AnnotationStore(new_target("store"))
    queue = JudgingQueue(store)
    queue.send(DS, TASK, FIVE, "rev")
    first, second = queue.items(DS, TASK)[:2]
    assert queue.serve(DS, TASK, typed_person("Ann")).entry == first
    assert queue.serve(DS, TASK, typed_person(" bob ")).entry == first
    cat = queue.serve(DS, TASK, typed_person("Cat"))
    assert cat.entry == second and cat.left == 4  # the first has its two annotators
    assert queue.serve(DS, TASK, typed_person("ANN")).entry == first  # hers until she judges it
    assert JudgingQueue(store, judges=3).serve(DS, TASK, typed_person("Dan")).entry == first
    assert _assigned(store) == [1, 3]
    with pytest.raises(ValueError, match="1 or more judges"):
        JudgingQueue(store, judges=0)


def test_a_skipped_document_stays_theirs_and_comes_after_the_others(new_target: NewTarget) -> None:
    """Issue 28 item 7: ``s`` on the Judging page puts a document aside: it is neither judged nor given
    away (still assigned, still counted as left), and another is served first; once only skipped ones
    are left, none is served (the page then brings the skipped ones back)."""
    store = AnnotationStore(new_target("store"))
    queue = JudgingQueue(store)
    queue.send(DS, TASK, FIVE, "rev")
    items = queue.items(DS, TASK)
    ann = typed_person("Ann")
    assert queue.serve(DS, TASK, ann).entry == items[0]
    later = {_pairs(items)[0]}
    turn = queue.serve(DS, TASK, ann, skipped=later)
    assert turn.entry == items[1] and (turn.judged, turn.left) == (0, 5)
    assert queue.serve(DS, TASK, typed_person("Bob")).entry == items[0]  # still one of Ann's two
    assert queue.serve(DS, TASK, typed_person("Cat")).entry == items[1]  # Ann holds items[0] and items[1] now
    for entry in items[1:]:
        _judge(store, "Ann", entry)
    turn = queue.serve(DS, TASK, ann, skipped=later)
    assert turn.entry is None and (turn.judged, turn.left) == (4, 1)
    assert queue.serve(DS, TASK, ann).entry == items[0]


def test_a_label_counts_as_a_judge_and_a_models_proposal_does_not(new_target: NewTarget) -> None:
    store = AnnotationStore(new_target("store"))
    queue = JudgingQueue(store)
    queue.send(DS, TASK, FIVE, "rev")
    first, second = queue.items(DS, TASK)[:2]
    _judge(store, "Eve", first)  # labelled on the explorer, never assigned
    _judge(store, "proposed by judge-model", first)
    assert queue.serve(DS, TASK, typed_person("Ann")).entry == first  # Eve and Ann
    assert queue.serve(DS, TASK, typed_person("Bob")).entry == second
    eve = queue.serve(DS, TASK, typed_person("eve"))
    assert eve.entry == second and eve.judged == 1


def test_who_may_not_label_is_shown_the_next_document_without_taking_it(new_target: NewTarget) -> None:
    store = AnnotationStore(new_target("store"))
    queue = JudgingQueue(store)
    queue.send(DS, TASK, FIVE, "rev")
    first = queue.items(DS, TASK)[0]
    reviewer = Person("rev@example.org", "oidc", frozenset({"reviewer"}))
    assert queue.serve(DS, TASK, reviewer).entry == first and queue.serve(DS, TASK, None).entry == first
    assert _assigned(store) == [] and queue.progress().annotators == ()
    only_q2 = queue.serve(DS, TASK, typed_person("Ann"), queries={"q2"})  # a task's other version lacks q1
    assert only_q2.entry == queue.items(DS, TASK)[3] and only_q2.queued == 2


def test_annotators_asking_at_once_on_two_servers_never_exceed_two_per_document(new_target: NewTarget) -> None:
    target = new_target("shared")
    servers = [JudgingQueue(AnnotationStore(target)) for _ in range(2)]
    servers[0].send(DS, TASK, FIVE, "rev")
    served: dict[str, QueueEntry | None] = {}

    def ask(queue: JudgingQueue, name: str) -> None:
        served[name] = queue.serve(DS, TASK, typed_person(name)).entry

    names = [f"annotator{n}" for n in range(8)]
    threads = [threading.Thread(target=ask, args=(servers[n % 2], name)) for n, name in enumerate(names)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(served) == names and None not in served.values()
    assert _assigned(servers[1].store) == [2, 2, 2, 2]  # eight annotators, two on each of four documents


def test_progress_counts_each_annotator_and_the_team_per_task(new_target: NewTarget) -> None:
    store = AnnotationStore(new_target("store"))
    queue = JudgingQueue(store)
    queue.send(DS, TASK, FIVE, "rev")
    queue.send(DS, "T2", pool({"A": A}, QRELS, depth=1), "rev")  # q2's u4 only
    for who in ("Ann", "Bob"):
        _judge(store, who, queue.serve(DS, TASK, typed_person(who)).entry)
    queue.serve(DS, TASK, typed_person("Ann"))  # her second document, not judged yet
    _judge(store, "Cat", queue.items(DS, "T2")[0], "T2")  # without being assigned
    store.add(label(dataset=DS, task=TASK, query_id="q1", doc_id="not-queued", annotator="Dan"))
    found = queue.progress()
    assert found.tasks == (TaskProgress(DS, TASK, 5, 1, 0, 2), TaskProgress(DS, "T2", 1, 0, 1, 2))
    assert found.tasks[0].untouched == 4
    assert found.annotators == (
        AnnotatorProgress(DS, TASK, "Ann", 1, 1),
        AnnotatorProgress(DS, TASK, "Bob", 1, 0),
        AnnotatorProgress(DS, "T2", "Cat", 1, 0),
    )


# --------------------------------------------------------------------------- schema


def test_a_schema_4_store_gains_the_queue_and_keeps_its_labels(new_target: NewTarget) -> None:
    target = new_target("old")
    store = AnnotationStore(target)
    kept = store.add(label())
    with store._connection(write=True) as conn:  # as a store of the version before the queue moved in
        conn.execute("DROP TABLE assignments")
        conn.execute("DROP TABLE judging_queue")
        conn.execute("ALTER TABLE annotations DROP COLUMN time_ms")  # schema 6's
        if store.path is None:
            conn.execute("UPDATE annotations_schema SET version = 4")
    if store.path is not None:
        with sqlite3.connect(store.path) as conn:
            conn.execute("PRAGMA user_version = 4")
    reopened = AnnotationStore(target)
    assert reopened.list() == [kept] and JudgingQueue(reopened).send(DS, TASK, FIVE, "rev") == 5
    with reopened._connection() as conn:
        if store.path is None:
            version = conn.execute("SELECT version FROM annotations_schema").fetchone()[0]
        else:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
    assert version == SCHEMA_VERSION == 6


def test_a_judging_queue_table_that_is_not_the_stores_is_reported_and_left_alone(new_target: NewTarget) -> None:
    target = new_target("taken")
    store = AnnotationStore(target)
    with store._connection(write=True) as conn:
        conn.execute("DROP TABLE assignments")
        conn.execute("DROP TABLE judging_queue")
        conn.execute("CREATE TABLE judging_queue (patient TEXT)")
        conn.execute("INSERT INTO judging_queue VALUES ('someone else''s data')")
    with pytest.raises(AnnotationStoreError, match="its judging_queue table is not an annotation store's") as err:
        AnnotationStore(target)
    assert "lacks column(s) id, dataset" in str(err.value) and "left untouched" in str(err.value)
    with store._connection() as conn:
        assert conn.execute("SELECT * FROM judging_queue").fetchall() == [("someone else's data",)]


# --------------------------------------------------------------------------- the queue file of earlier versions


GOOD = {"query_id": "q1", "doc_id": "u1", "systems": ["A"], "depth": 3, "sent_by": "rev", "sent_at": "t"}


def _write(path: Path, tasks: object) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "tasks": tasks}))
    return path.read_bytes()


def _kept(path: Path, suffix: str) -> Path:
    (kept,) = path.parent.glob(f"{path.name}{suffix}*")
    return kept


def test_the_queue_file_moves_into_the_store_once_and_is_kept(new_target: NewTarget, tmp_path: Path) -> None:
    path = tmp_path / "data" / "judging_queue.json"
    before = _write(path, {"R2MED\tT": [GOOD, {**GOOD, "doc_id": "u2"}], "R2MED\tX": [GOOD]})
    target = new_target("store")
    queue = JudgingQueue(AnnotationStore(target))
    assert migrate_queue_file(queue.store, path) == []
    assert [(d, t, e.doc_id) for d, t, e in queue.every_task()] == [("R2MED", "T", "u1"), ("R2MED", "T", "u2"),
                                                                    ("R2MED", "X", "u1")]  # fmt: skip
    assert queue.items(DS, TASK)[0] == QueueEntry("q1", "u1", ("A",), 3, "rev", "t")  # who sent it, and when
    assert not path.exists() and _kept(path, ".migrated-").read_bytes() == before  # nothing the user made is lost
    assert kept_queue_files(path) == []  # a sound file leaves nothing to look at
    assert migrate_queue_file(AnnotationStore(target), path) == [] and len(queue.every_task()) == 3  # opened again
    other = tmp_path / "server2" / "judging_queue.json"  # a second server's own file, with one more entry
    _write(other, {"R2MED\tT": [GOOD, {**GOOD, "doc_id": "u3"}]})
    assert migrate_queue_file(AnnotationStore(target), other) == []
    assert [e.doc_id for e in queue.items(DS, TASK)] == ["u1", "u2", "u3"]


def test_a_migration_cut_short_before_the_rename_adds_nothing_twice(
    new_target: NewTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "judging_queue.json"
    _write(path, {"R2MED\tT": [GOOD, {**GOOD, "doc_id": "u2"}]})
    store = AnnotationStore(new_target("store"))

    def refused(path: Path, suffix: str) -> Path:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(queue, "_keep_aside", refused)
    (problem,) = migrate_queue_file(store, path)
    assert problem.path == "judging_queue.json" and "could not be renamed (Permission denied)" in problem.message
    assert path.exists() and len(JudgingQueue(store).every_task()) == 2
    monkeypatch.undo()
    assert migrate_queue_file(store, path) == [] and len(JudgingQueue(store).every_task()) == 2
    assert not path.exists() and _kept(path, ".migrated-").is_file()


def test_a_store_that_refuses_the_migration_leaves_the_file_for_the_next_open(
    new_target: NewTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "judging_queue.json"
    before = _write(path, {"R2MED\tT": [GOOD]})
    store = AnnotationStore(new_target("store"))

    def full(self: JudgingQueue, entries: object) -> int:
        raise AnnotationStoreError("annotations.sqlite: cannot save (database or disk is full)")

    monkeypatch.setattr(JudgingQueue, "merge", full)
    (problem,) = migrate_queue_file(store, path)
    assert "not moved into the annotation store yet (annotations.sqlite: cannot save" in problem.message
    assert path.read_bytes() == before and list(tmp_path.glob("judging_queue.json.*")) == []


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        pytest.param(["q1", "u9"], "not an object", id="list"),
        pytest.param({**GOOD, "doc_id": 9}, '"doc_id" must be a non-empty string', id="number-id"),
        pytest.param({**GOOD, "doc_id": {"a": 1}}, '"doc_id" must be', id="object-id"),
        pytest.param({**GOOD, "systems": "A"}, '"systems" must be a list', id="systems-text"),
        pytest.param({**GOOD, "systems": ["A", 1]}, '"systems" must be a list', id="systems-number"),
        pytest.param({**GOOD, "depth": True}, '"depth" must be a whole number', id="depth-bool"),
        pytest.param({**GOOD, "depth": 1e999}, '"depth" must be a whole number', id="depth-infinite"),
        pytest.param({**GOOD, "depth": 10**12}, f'"depth" must be a whole number of 0 or more (at most {2**31 - 1})',
                     id="depth-beyond-an-integer-column"),
        pytest.param({**GOOD, "sent_by": None}, '"sent_by" and "sent_at" must be', id="sender-null"),
        pytest.param({**GOOD, "doc_id": "u\ud800"}, "doc_id is not valid Unicode text", id="lone-surrogate"),
        pytest.param({**GOOD, "sent_by": "r\x00ev"}, "sent_by contains a NUL character", id="nul"),
        pytest.param({**GOOD, "systems": ["A\ud800"]}, "systems is not valid Unicode text", id="surrogate-system"),
    ],
)
def test_a_damaged_entry_is_skipped_and_named_and_the_rest_migrated(
    new_target: NewTarget, tmp_path: Path, bad: object, expected: str
) -> None:
    path = tmp_path / "judging_queue.json"
    before = _write(path, {"R2MED\tT": [GOOD, bad, {**GOOD, "doc_id": "u2"}]})
    store = AnnotationStore(new_target("store"))
    assert migrate_queue_file(store, path) == []
    assert [e.doc_id for e in JudgingQueue(store).items(DS, TASK)] == ["u1", "u2"]
    kept = _kept(path, ".damaged-")
    assert kept.read_bytes() == before and not path.exists()
    problem, note = kept_queue_files(path)
    assert str(problem).startswith(f"{kept.name}: task R2MED/T, entry 2: {expected}") and str(problem).endswith(
        "; skipped"
    )
    assert note.path == kept.name and "kept aside" in note.message and "delete it once looked at" in note.message
    assert str(tmp_path) not in str(problem) + str(note)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("[" * 100_000 + "]" * 100_000, ": nested too deeply to read", id="deep"),
        pytest.param('{"version": 1' + "0" * 5000 + ', "tasks": {}}', ": not a version-1", id="long-version"),
        pytest.param('{"version": 1, "tasks": []}', ": not a version-1 judging queue", id="tasks-list"),
        pytest.param("my notes\n", ":1: not JSON (Expecting value)", id="not-json"),
        pytest.param(b'{"version": 1,\n\xff}', ":2: not UTF-8 text", id="not-utf8"),
    ],
)
def test_an_unreadable_file_migrates_nothing_and_is_kept(
    new_target: NewTarget, tmp_path: Path, text: str | bytes, expected: str
) -> None:
    path = tmp_path / "judging_queue.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    store = AnnotationStore(new_target("store"))
    assert migrate_queue_file(store, path) == [] and JudgingQueue(store).every_task() == []
    kept = _kept(path, ".damaged-")
    assert kept.read_bytes() == (text if isinstance(text, bytes) else text.encode())
    problem, note = kept_queue_files(path)
    assert str(problem).startswith(kept.name + expected) and note.path == kept.name


def test_hostile_task_names_skip_only_their_entries(new_target: NewTarget, tmp_path: Path) -> None:
    path = tmp_path / "judging_queue.json"
    huge = json.dumps({**GOOD, "doc_id": "u9"}).replace('"depth": 3', '"depth": ' + "9" * 5000)
    path.write_text(
        '{"version": 1, "tasks": {"R2MED\\tT": [' + json.dumps(GOOD) + ", " + huge + "], "
        '"no tab": [], "R2MED\\tX": {"not": "a list"}, "\\tT": [' + json.dumps(GOOD) + "], "
        '"R2MED\\u0000\\tT": [' + json.dumps(GOOD) + "]}}"
    )
    store = AnnotationStore(new_target("store"))
    assert migrate_queue_file(store, path) == []
    assert [(d, t, e.doc_id) for d, t, e in JudgingQueue(store).every_task()] == [("R2MED", "T", "u1")]
    kept = _kept(path, ".damaged-").name
    assert [str(p) for p in kept_queue_files(path)][:5] == [
        f'{kept}: task R2MED/T, entry 2: "depth" must be a whole number of 0 or more (at most 2147483647); skipped',
        f"{kept}: 'no tab': not a task's list of entries; skipped",
        f"{kept}: 'R2MED\\tX': not a task's list of entries; skipped",
        f"{kept}: '\\tT': not a task's list of entries; skipped",
        f"{kept}: 'R2MED\\x00\\tT': not a task's list of entries; skipped",
    ]


def test_many_bad_entries_are_counted_not_listed(new_target: NewTarget, tmp_path: Path) -> None:
    path = tmp_path / "judging_queue.json"
    _write(path, {"R2MED\tT": [1] * 500})
    migrate_queue_file(AnnotationStore(new_target("store")), path)
    problems = kept_queue_files(path)
    assert len(problems) == 22 and problems[20].message == "… and 480 more skipped"
