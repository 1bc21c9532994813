"""Full backup and restore (labels, every adjudication decision with its history, the judging queue) on
SQLite and PostgreSQL: a round trip into a fresh store loses nothing, a second restore adds nothing, and
a bad line is reported by file and line while the rest is restored."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import pytest

from r2med_core.data import DataError
from r2med_core.judging.adjudication import current, decide, history
from r2med_core.judging.annotations import AnnotationStore
from r2med_core.judging.backup import BACKUP_VERSION, backup_text, restore_backup, restore_backup_bytes, write_backup
from r2med_core.judging.pooling import Pool, PooledDoc
from r2med_core.judging.queue import JudgingQueue

from .test_annotations import DATASET, TASK, label

Target = str | Path
UNIT = (DATASET, TASK, "q1", "d1")


def _work(store: AnnotationStore) -> None:
    """A team's day: labels (one reviewed, one blind), a decision overturned by a second, a sent pool."""
    alice = store.add(label(annotator="alice", note="answers it", blind=True, created_at="2025-01-01T08:00:00Z"))
    store.add(label(annotator="bob", failure_type="lexical_trap", rank=3, created_at="2025-01-01T09:00:00Z"))
    store.add(label(annotator="carol", query_id="q2", doc_id=None, failure_type="rewrite_hallucination"))
    store.review(alice.id, True, "Dr. Rev")
    first = decide(store, UNIT, "relevant_unjudged", "Dr. Rev", grade=1, reason="answers the question")
    decide(store, UNIT, "grade_0", "Dr. Two", reason="same words only", replacing=first.id)
    pooled = Pool(10, ("bm25",), {"q3": (PooledDoc("q3", "d7", ("bm25", "dense")), PooledDoc("q3", "d8", ("bm25",)))})
    JudgingQueue(store).send(DATASET, TASK, pooled, "Paula")


def _content(store: AnnotationStore) -> list[tuple[object, ...]]:
    return [a.content() for a in store.list()]


def _decisions(store: AnnotationStore) -> list[tuple[object, ...]]:
    """Decisions without the store's ids: who, when, why, what, and which one each superseded (by position)."""
    decisions = history(store)
    position = {d.id: i for i, d in enumerate(decisions)}
    labels = {a.id: a.content() for a in store.list()}
    return [
        (
            d.unit,
            d.failure_type,
            d.grade,
            d.reason,
            d.reviewer,
            d.decided_at,
            position.get(d.supersedes),
            sorted(labels[i] for i in d.label_ids),  # the labels the reviewer saw, in the target's ids
        )
        for d in decisions
    ]


def test_a_backup_restores_into_a_fresh_store_and_twice_adds_nothing(
    new_target: Callable[[str], Target], tmp_path: Path
) -> None:
    source = AnnotationStore(new_target("source"))
    _work(source)
    path = write_backup(source, tmp_path / "team.backup.jsonl")
    header = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert header["version"] == BACKUP_VERSION and header["counts"] == {"label": 3, "decision": 2, "queue": 2}
    assert header["schema"] == 6

    target = AnnotationStore(new_target("target"))
    target.add(label(annotator="dave", query_id="q9", doc_id="d9"))  # the target's own work: ids differ
    queue, target_queue = JudgingQueue(source), JudgingQueue(target)
    report = restore_backup(target, path)
    assert report.errors == ()
    assert (report.labels_added, report.decisions_added, report.queue_added) == (3, 2, 2)
    assert _content(target)[1:] == _content(source)  # annotator, times, review, rank and blind flag kept
    assert [a.id for a in target.list()[1:]] != [a.id for a in source.list()]  # new ids in the target
    assert _decisions(target) == _decisions(source)  # who/when/why/grade and the supersession order
    standing = current(history(target))[(UNIT, "grade")]
    assert (standing.reviewer, standing.grade, standing.failure_type) == ("Dr. Two", 0, "grade_0")
    assert target_queue.every_task() == queue.every_task()  # sent_by and sent_at as they were

    again = restore_backup(target, path)
    assert again.added == 0 and again.errors == ()
    assert (again.labels_present, again.decisions_present, again.queue_present) == (3, 2, 2)
    assert len(target) == 4 and len(history(target)) == 2 and len(target_queue.every_task()) == 2


def test_decisions_point_at_the_target_labels_after_new_ids(
    new_target: Callable[[str], Target], tmp_path: Path
) -> None:
    source = AnnotationStore(new_target("source"))
    _work(source)
    target = AnnotationStore(new_target("target"))
    for n in range(5):  # shift every id the target hands out
        target.delete(target.add(label(annotator=f"x{n}")).id)
    report = restore_backup_bytes(target, backup_text(source).encode(), "team.jsonl")
    assert report.errors == () and report.decisions_added == 2
    ids = {a.id for a in target.list()}
    first, second = history(target)
    assert set(first.label_ids) <= ids and len(first.label_ids) == 2 and second.supersedes == first.id
    assert {a.annotator for a in target.list() if a.id in first.label_ids} == {"alice", "bob"}


def test_bad_lines_are_named_by_file_and_line_and_the_rest_restores(
    new_target: Callable[[str], Target], tmp_path: Path
) -> None:
    source = AnnotationStore(new_target("source"))
    source.add(label(annotator="alice"))
    source.add(label(annotator="bob", failure_type="lexical_trap"))
    decide(source, UNIT, "lexical_trap", "Dr. Rev", grade=0)
    lines = backup_text(source).splitlines()  # header, 2 labels, 1 decision
    decision = json.loads(lines[3])
    lines[2:2] = ["{not json"]  # line 3
    lines.append(json.dumps({**decision, "id": 99, "query_id": "q404", "supersedes": None}))  # line 6
    lines.append(json.dumps({"kind": "mystery"}))  # line 7
    lines.append(json.dumps({**decision, "id": 100, "supersedes": 55}))  # line 8
    path = tmp_path / "damaged.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    target = AnnotationStore(new_target("target"))
    report = restore_backup(target, path)
    messages = [str(p) for p in report.errors]
    assert [p.line for p in report.errors] == [3, 6, 7, 8], messages
    assert all(m.startswith(f"{path}:") for m in messages)
    assert "malformed JSON" in messages[0]
    assert "unknown unit" in messages[1] and "q404" in messages[1]
    assert "unknown kind 'mystery'" in messages[2]
    assert "supersedes #55" in messages[3]
    assert (report.labels_added, report.decisions_added) == (2, 1)  # the good lines are restored
    assert [d.reviewer for d in history(target)] == ["Dr. Rev"]


@pytest.mark.parametrize(
    ("first_line", "message"),
    [
        ('{"format": "r2med-annotation-backup", "version": 7}', "backup version 7 is not one this app reads"),
        ("{oops", "not a full backup (malformed JSON"),
        (json.dumps({"dataset": DATASET, "task": TASK}), "not a full backup: the first line has no"),
    ],
)
def test_a_file_that_is_not_a_backup_of_this_version_is_refused_whole(
    new_target: Callable[[str], Target], first_line: str, message: str
) -> None:
    target = AnnotationStore(new_target("target"))
    body = first_line + "\n" + json.dumps({"kind": "label", **asdict(label())}) + "\n"
    with pytest.raises(DataError) as caught:
        restore_backup_bytes(target, body.encode(), "old.jsonl")
    (problem,) = caught.value.problems
    assert (problem.path, problem.line) == ("old.jsonl", 1) and message in problem.message
    assert len(target) == 0


def test_an_upload_over_the_limit_is_refused_and_its_name_is_never_a_path(
    new_target: Callable[[str], Target], tmp_path: Path
) -> None:
    source = AnnotationStore(new_target("source"))
    source.add(label())
    data = backup_text(source).encode()
    target = AnnotationStore(new_target("target"))
    with pytest.raises(DataError, match="upload limit"):
        restore_backup_bytes(target, data, "big.jsonl", max_bytes=len(data) - 1)
    assert len(target) == 0
    report = restore_backup_bytes(target, data, str(tmp_path / "no-such-file.jsonl"), max_bytes=len(data))
    assert report.labels_added == 1  # the name only labels messages


def test_hostile_lines_are_reported_by_line_and_the_rest_restores(
    new_target: Callable[[str], Target], tmp_path: Path
) -> None:
    source = AnnotationStore(new_target("source"))
    _work(source)
    header, *lines = backup_text(source).splitlines()  # 3 labels, 2 decisions, 2 queued
    good_label = json.loads(lines[0])
    good_decision = {**json.loads(lines[3]), "supersedes": None}
    queued = json.loads(lines[5])
    hostile = {
        "a 5000-digit number": '{"kind": "label", "rank": ' + "9" * 5000 + "}",
        "the end of time west of UTC": json.dumps({**good_label, "created_at": "9999-12-31T23:59:59-14:00"}),
        "the start of time east of UTC": json.dumps({**good_label, "created_at": "0001-01-01T00:00:00+14:00"}),
        "a list as a label id": json.dumps({**good_label, "id": [1]}),
        "an object as a label id": json.dumps({**good_label, "id": {"a": 1}}),
        "a rank of 10**30": json.dumps({**good_label, "rank": 10**30}),
        "a grade of 10**30": json.dumps({**good_decision, "grade": 10**30}),
        "a lone surrogate in a reason": json.dumps({**good_decision, "reason": "fine \ud800"}),
        "a lone surrogate in a reviewer": json.dumps({**good_decision, "reviewer": "Dr. \udfff"}),
        "a list as a doc_id": json.dumps({**good_decision, "doc_id": ["d1"]}),
        "a decision at the end of time": json.dumps({**good_decision, "decided_at": "9999-12-31T23:59:59-14:00"}),
        "a lone surrogate in a field name": json.dumps({**good_label, "\ud800": 1}),
        "a lone surrogate in a queued document": json.dumps({**queued, "doc_id": "d\ud800"}),
        "a queued depth beyond an integer column": json.dumps({**queued, "depth": 10**12}),
        "a NUL in a queued task": json.dumps({**queued, "task": "t\x00"}),
        "an empty queued dataset": json.dumps({**queued, "dataset": " "}),
        "a number among the queued systems": json.dumps({**queued, "systems": ["bm25", 7]}),
        "a list as a queued document": json.dumps({**queued, "doc_id": ["d7"]}),
        "an unknown field in a queued document": json.dumps({**queued, "priority": "high"}),
    }
    bad_lines = list(hostile.values())
    body = [header]
    for good, bad in zip(lines, bad_lines):  # a hostile line after every good one, the other hostile ones last
        body += [good, bad]
    body += bad_lines[len(lines) :]
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join(body) + "\n", encoding="utf-8")

    target = AnnotationStore(new_target("target"))
    report = restore_backup(target, path)
    bad = [n for n, line in enumerate(body, start=1) if line in bad_lines]
    assert [p.line for p in report.errors] == bad, [str(p) for p in report.errors]
    assert all(str(p).startswith(f"{path}:") for p in report.errors)
    assert all(str(p).encode("utf-8") for p in report.errors)  # every message can be shown and logged
    assert (report.labels_added, report.decisions_added, report.queue_added) == (3, 2, 2)  # the good rest
    assert _content(target) == _content(source) and _decisions(target) == _decisions(source)
    by_line = {p.line: p.message for p in report.errors}
    expected = {
        "a 5000-digit number": "number too long to read",
        "the end of time west of UTC": "created_at '9999-12-31T23:59:59-14:00' is out of range",
        "the start of time east of UTC": "created_at '0001-01-01T00:00:00+14:00' is out of range",
        "a list as a label id": "id must be a positive integer",
        "an object as a label id": "id must be a positive integer",
        "a rank of 10**30": "rank must be a positive integer (at most 2147483647)",
        "a grade of 10**30": "grade must be a whole number of 0 or more (at most 2147483647)",
        "a lone surrogate in a reason": "reason is not valid Unicode text",
        "a lone surrogate in a reviewer": "reviewer is not valid Unicode text",
        "a list as a doc_id": "doc_id must be a string or None",
        "a decision at the end of time": "decided_at '9999-12-31T23:59:59-14:00' is out of range",
        "a lone surrogate in a field name": 'unknown field(s) "\\ud800"',
        "a lone surrogate in a queued document": "doc_id is not valid Unicode text",
        "a queued depth beyond an integer column": '"depth" must be a whole number of 0 or more (at most 2147483647)',
        "a NUL in a queued task": "task contains a NUL character",
        "an empty queued dataset": '"dataset" must be a non-empty string',
        "a number among the queued systems": '"systems" must be a list of system names',
        "a list as a queued document": '"doc_id" must be a non-empty string',
        "an unknown field in a queued document": 'unknown field(s) "priority"',
    }
    for what, line in hostile.items():
        assert expected[what] in by_line[body.index(line) + 1], what


def test_a_restored_decision_never_adjudicates_the_reviewers_own_unit(
    new_target: Callable[[str], Target], tmp_path: Path
) -> None:
    """Whatever the dates: a decision whose reviewer has a label on the unit is refused by line, a forged
    one by a labeller and one dated before its reviewer's own later label alike (a store of a version
    that checked decisions only against earlier labels may hold that; now neither order arises live)."""
    source = AnnotationStore(new_target("source"))
    source.add(label(annotator="alice", created_at="2025-01-01T08:00:00Z"))
    source.add(label(annotator="bob", failure_type="lexical_trap", created_at="2025-01-01T09:00:00Z"))
    decide(source, UNIT, "lexical_trap", "Dr. Rev", grade=0)
    header, *lines = backup_text(source).splitlines()
    decision = json.loads(lines[-1])
    forged = json.dumps({**decision, "id": 2, "supersedes": 1, "reviewer": " ALICE ", "reason": "my own label wins"})
    # Dr. Rev's own label, made after his decision (as an older version allowed), in a backup of its own.
    late = json.dumps({**json.loads(lines[0]), "id": 9, "annotator": "Dr. Rev", "created_at": "2099-01-01T00:00:00Z"})
    path = tmp_path / "forged.jsonl"
    path.write_text("\n".join([header, *lines, forged]) + "\n", encoding="utf-8")

    target = AnnotationStore(new_target("target"))
    report = restore_backup(target, path)
    (problem,) = report.errors
    assert (problem.path, problem.line) == (str(path), 5)
    assert "nobody adjudicates a unit they labelled" in problem.message and "ALICE" in problem.message
    assert [d.reviewer for d in history(target)] == ["Dr. Rev"]  # the lawful decision is kept
    assert report.labels_added == 2

    older = tmp_path / "older.jsonl"
    older.write_text("\n".join([header, *lines[:2], late, lines[-1]]) + "\n", encoding="utf-8")
    fresh = AnnotationStore(new_target("fresh"))
    report = restore_backup(fresh, older)
    (problem,) = report.errors
    assert (problem.path, problem.line) == (str(older), 5)  # the decision, dated before his label
    assert "Dr. Rev labelled" in problem.message and "nobody adjudicates a unit they labelled" in problem.message
    assert history(fresh) == [] and report.labels_added == 3  # every label kept, no self-adjudication stands


def test_a_restored_label_by_a_reviewer_of_its_unit_is_refused(
    new_target: Callable[[str], Target], tmp_path: Path
) -> None:
    """Restored into a store where the label's annotator adjudicated its unit, the label is refused by
    line (as ``add`` refuses it live); the backup's other lines are restored."""
    target = AnnotationStore(new_target("target"))
    target.add(label(annotator="alice"))
    target.add(label(annotator="bob", failure_type="lexical_trap"))
    decide(target, UNIT, "lexical_trap", "Dr. Rev", grade=0)
    source = AnnotationStore(new_target("source"))
    source.add(label(annotator="Dr. Rev", failure_type="grade_2", created_at="2025-01-02T08:00:00Z"))
    source.add(label(annotator="Dr. Rev", doc_id="d2", failure_type="grade_1", created_at="2025-01-02T08:01:00Z"))
    path = write_backup(source, tmp_path / "rev.jsonl")
    report = restore_backup(target, path)
    (problem,) = report.errors
    assert (problem.path, problem.line) == (str(path), 2)
    assert "Dr. Rev adjudicated" in problem.message and "nobody labels a unit they adjudicated" in problem.message
    assert report.labels_added == 1
    assert [(a.annotator, a.doc_id) for a in target.list(annotator="Dr. Rev")] == [("Dr. Rev", "d2")]


def test_a_restore_runs_a_few_statements_per_batch_not_a_query_per_line(
    new_target: Callable[[str], Target], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Restore time grows with the backup, not its square: duplicates are found in memory, labels are
    added in batches, whatever the number of labels on one query."""
    source = AnnotationStore(new_target("source"))
    labels = [
        asdict(label(annotator=f"a{n % 3}", doc_id=f"d{n // 3}", created_at=f"2025-01-01T08:00:{n % 60:02d}Z"))
        for n in range(1200)
    ]
    assert source.import_jsonl_bytes("".join(json.dumps(a) + "\n" for a in labels).encode()).added == 1200
    decide(source, UNIT, "lexical_trap", "Dr. Rev", grade=0)
    data = backup_text(source).encode()
    target = AnnotationStore(new_target("target"))
    statements = 0
    connection = target._backend.connection

    @contextmanager
    def counting(write: bool = False) -> Iterator[object]:
        nonlocal statements
        with connection(write) as conn:

            class Counting:  # counts the store's calls: execute, and executemany (one round trip)
                def __getattr__(self, name: str) -> object:
                    nonlocal statements
                    statements += 1
                    return getattr(conn, name)

            yield Counting()

    monkeypatch.setattr(target._backend, "connection", counting)
    first = restore_backup_bytes(target, data, "big.jsonl")
    assert (first.labels_added, first.decisions_added, first.errors) == (1200, 1, ())
    assert statements < 40, statements  # one duplicate check and one insert per label would be 2,400
    statements = 0
    again = restore_backup_bytes(target, data, "big.jsonl")
    assert (again.labels_present, again.decisions_present, again.added) == (1200, 1, 0)
    assert statements < 40, statements
