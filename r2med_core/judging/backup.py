"""A full backup of the team's work, and restoring it into another annotation store (SQLite or PostgreSQL).

A label export carries labels only; a backup also carries every adjudication decision with its history
(superseded decisions included) and the judging queue (``judging``), so nothing a user made is lost when
a store moves. The backup is JSONL, one object per line, so a problem is reported by file and line:

* line 1, the header: ``{"format": "r2med-annotation-backup", "version": 1, "schema": 5, ...}``;
* ``{"kind": "label", "id": ..., <Annotation fields>}`` per label (``id`` is the source store's);
* ``{"kind": "decision", "id": ..., "supersedes": ..., "label_ids": [...], <Decision fields>}``, oldest
  first, ids and references those of the source store;
* ``{"kind": "queue", "dataset": ..., "task": ..., <QueueEntry fields>}`` per queued document.

Restoring merges: labels and decisions already in the target (every field but the id equal) are kept
and not added again, so restoring one backup twice adds nothing. Labels get new ids in the target, and
a decision's ``supersedes`` and ``label_ids`` are rewritten to them; decisions are added oldest first,
so the supersession order (the latest decision on a unit stands) is kept. Restored into a store with
decisions of its own on a unit, the restored ones are recorded after them and stand.

Every line is checked when it is read, as a new label, decision or queued document is (types, ranges, text
a database can hold, and that no reviewer decided a unit they had labelled), so a hostile or damaged line is reported by
line and the rest restored. Duplicates are found in memory (``ContentIndex``), not by a query per line,
so a restore takes time in proportion to the backup.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from r2med_core.cache import atomic_write_text
from r2med_core.data import DataError, Problem
from r2med_core.judging.adjudication import Decision, history
from r2med_core.judging.annotations import (
    FIELDS,
    IMPORT_BATCH,
    Annotation,
    AnnotationStore,
    ContentIndex,
    SelfAdjudication,
    Unit,
    _parse,
    _read_file,
    check_not_own_unit,
    check_upload_size,
    check_whole_number,
    describe,
    jsonl_objects,
    unknown_fields,
    utc_now,
)
from r2med_core.judging.queue import JudgingQueue, QueueEntry, check_task, queue_entry
from r2med_core.judging.stores import ADJUDICATION_COLUMNS, ID_MAX, SCHEMA_VERSION, Session

BACKUP_FORMAT = "r2med-annotation-backup"
BACKUP_VERSION = 1
#: What a backup line holds (its ``kind`` field): a label, an adjudication decision or a judging-queue entry.
RECORD_TYPES = ("label", "decision", "queue")
#: A decision's own fields: every column but the ids, which a restore rewrites to the target's.
_DECISION_FIELDS = tuple(c for c in ADJUDICATION_COLUMNS if c not in ("id", "supersedes", "label_ids"))
_QUEUE_FIELDS = ("dataset", "task", "query_id", "doc_id", "systems", "depth", "sent_by", "sent_at")
_INSERT_DECISION_SQL = (
    "INSERT INTO adjudications (dataset, task, query_id, doc_id, failure_type, grade, reason, reviewer, "
    "decided_at, supersedes, label_ids) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


@dataclass(frozen=True)
class RestoreReport:
    """What a restore did, per kind: rows added, rows already there (kept, not added again), and the
    lines that could not be restored (each naming the file and line)."""

    labels_added: int = 0
    labels_present: int = 0
    decisions_added: int = 0
    decisions_present: int = 0
    queue_added: int = 0
    queue_present: int = 0
    errors: tuple[Problem, ...] = ()

    @property
    def added(self) -> int:
        return self.labels_added + self.decisions_added + self.queue_added


def backup_text(store: AnnotationStore) -> str:
    """The whole store (labels, every decision with its history, the judging queue) as backup JSONL."""
    labels = store.list()
    decisions = history(store)
    queued = JudgingQueue(store).every_task()
    header = {
        "format": BACKUP_FORMAT,
        "version": BACKUP_VERSION,
        "schema": SCHEMA_VERSION,
        "created_at": utc_now(),
        "counts": {"label": len(labels), "decision": len(decisions), "queue": len(queued)},
    }
    lines = [header]
    lines += [{"kind": "label", **asdict(a)} for a in labels]
    lines += [{"kind": "decision", **asdict(d), "label_ids": list(d.label_ids)} for d in decisions]
    lines += [
        {"kind": "queue", "dataset": dataset, "task": task, **asdict(e), "systems": list(e.systems)}
        for dataset, task, e in queued
    ]
    return "".join(json.dumps(obj, ensure_ascii=False) + "\n" for obj in lines)


def write_backup(store: AnnotationStore, path: str | Path) -> Path:
    """Write ``backup_text`` to ``path`` atomically (a crash never leaves half a backup)."""
    path = Path(path)
    atomic_write_text(path, backup_text(store))
    return path


def restore_backup(store: AnnotationStore, path: str | Path) -> RestoreReport:
    """Merge the backup file at ``path`` into ``store`` (labels, decisions and its judging queue)."""
    path = Path(path)
    return restore_backup_bytes(store, _read_file(path), str(path))


def restore_backup_bytes(
    store: AnnotationStore, data: bytes, name: str = "upload", *, max_bytes: int | None = None
) -> RestoreReport:
    """``restore_backup`` on content held in memory (an upload): ``name`` only labels the messages and is
    never used as a path. DataError (nothing restored) for more than ``max_bytes``, or a file that is not
    a backup this version reads; a bad line is reported by file and line and the other lines restored."""
    check_upload_size(data, name, max_bytes)
    objects = jsonl_objects(data, name)
    _check_header(objects, name)
    errors: list[Problem] = []
    labels: list[tuple[int, int | None, Annotation]] = []  # (line, source id, label)
    decisions: list[tuple[int, Decision]] = []  # (line, decision)
    queued: list[tuple[str, str, QueueEntry]] = []
    for number, obj in objects[1:]:
        if isinstance(obj, Problem):
            errors.append(obj)
            continue
        kind = obj.get("kind")
        if kind == "label":
            parsed: Any = _label(obj, name, number)
            if isinstance(parsed, Problem):
                errors.append(parsed)
            else:
                labels.append((number, *parsed))
        elif kind == "decision":
            parsed = _decision(obj, name, number)
            (errors if isinstance(parsed, Problem) else decisions).append(parsed)
        elif kind == "queue":
            parsed = _queue_entry(obj, name, number)
            (errors if isinstance(parsed, Problem) else queued).append(parsed)
        else:
            errors.append(Problem(name, number, f"unknown kind {str(kind)[:40]!r}; expected {', '.join(RECORD_TYPES)}"))

    tasks = {(a.dataset, a.task) for _, _, a in labels} | {(d.dataset, d.task) for _, d in decisions}
    stored_labels = ContentIndex("annotations", FIELDS[1:], tasks)
    outcomes = store._store_labels([label for _, _, label in labels], stored_labels)
    stored = [outcome for outcome in outcomes if not isinstance(outcome, str)]
    errors += [Problem(name, line, why) for (line, _, _), why in zip(labels, outcomes) if isinstance(why, str)]
    label_ids = {
        source: outcome[0]
        for (_, source, _), outcome in zip(labels, outcomes)
        if source is not None and not isinstance(outcome, str)
    }
    labels_added = sum(1 for _, new in stored if new)
    restoring = _DecisionRestore(stored_labels, label_ids)
    decisions_added, decisions_present = restoring.run(store, decisions, name, errors)
    queue_added = JudgingQueue(store).merge(queued)
    return RestoreReport(
        labels_added=labels_added,
        labels_present=len(stored) - labels_added,
        decisions_added=decisions_added,
        decisions_present=decisions_present,
        queue_added=queue_added,
        queue_present=len(queued) - queue_added,
        errors=tuple(sorted(errors, key=lambda p: p.line or 0)),
    )


def _check_header(objects: list[tuple[int, dict[str, Any] | Problem]], name: str) -> None:
    """DataError unless the first line is a backup header of a version this app reads."""
    if not objects:
        raise DataError([Problem(name, None, "empty: not a full backup")])
    number, header = objects[0]
    if isinstance(header, Problem):
        raise DataError([Problem(name, number, f"not a full backup ({header.message})")])
    if header.get("format") != BACKUP_FORMAT:
        hint = " (a labels export: import it under 'Import labels')" if "kind" not in header else ""
        message = f'not a full backup: the first line has no "format": "{BACKUP_FORMAT}"{hint}'
        raise DataError([Problem(name, number, message)])
    version = header.get("version")
    if version != BACKUP_VERSION or isinstance(version, bool):
        message = f"backup version {json.dumps(version)[:20]} is not one this app reads ({BACKUP_VERSION})"
        raise DataError([Problem(name, number, message)])


def _label(obj: Mapping[str, Any], name: str, number: int) -> tuple[int | None, Annotation] | Problem:
    """A label line as (its id in the source store, the label), or the Problem with it."""
    fields = {k: v for k, v in obj.items() if k != "kind"}
    source = fields.get("id")
    try:
        check_whole_number("id", source, 1, ID_MAX)
    except ValueError as err:
        return Problem(name, number, str(err))
    parsed = _parse(fields, name, number)
    return parsed if isinstance(parsed, Problem) else (source, parsed)


def _queue_entry(obj: Mapping[str, Any], name: str, number: int) -> tuple[str, str, QueueEntry] | Problem:
    """A queue line as (dataset, task, entry), or the Problem with it (the checks a queue file's entries
    and a send's get: ``judging.queue_entry``)."""
    try:
        unknown = unknown_fields(obj, {"kind", *_QUEUE_FIELDS})
        if unknown:
            raise ValueError(unknown)
        check_task(obj.get("dataset"), obj.get("task"))
        entry = queue_entry({k: v for k, v in obj.items() if k not in ("kind", "dataset", "task")})
    except (ValueError, RecursionError) as err:
        return Problem(name, number, f"queue entry: {str(err)[:300]}")
    return obj["dataset"], obj["task"], entry


def _decision(obj: Mapping[str, Any], name: str, number: int) -> tuple[int, Decision] | Problem:
    """A decision line as (its line, the Decision with the source store's ids), or the Problem with it."""
    try:
        unknown = unknown_fields(obj, {"kind", "id", "supersedes", "label_ids", *_DECISION_FIELDS})
        if unknown:
            raise ValueError(unknown)
        ids = obj.get("label_ids", [])
        if not isinstance(ids, list) or None in ids:
            raise ValueError('"label_ids" must be a list of label ids')
        for key in ("id", "supersedes"):
            check_whole_number(key, obj.get(key), 1, ID_MAX)
        for label_id in ids:
            check_whole_number("label_ids", label_id, 1, ID_MAX)
        values = {k: obj[k] for k in _DECISION_FIELDS if k in obj}
        decision = Decision(**values, id=obj.get("id"), supersedes=obj.get("supersedes"), label_ids=tuple(ids))
    except (ValueError, TypeError, RecursionError) as err:
        return Problem(name, number, f"decision: {str(err)[:300]}")
    return number, decision


class _DecisionRestore:
    """Adds a backup's decisions oldest first (source id order), their ids rewritten to the target's.

    Checked in memory against the target's labels (``labels``, as the label restore left it) and its
    decisions, read once and then only what other writers add, in short transactions as a label import;
    the new ones go in together (``executemany``), split only where one supersedes another still waiting.
    Refused, each reported by line: a decision on a unit without labels in the target (it would decide
    nothing anyone labelled), one whose predecessor was not restored before it, and one by a reviewer who
    has a label on the unit, whatever its date (``check_not_own_unit``, the rule ``decide`` and a new label
    follow: a store written before that rule held both ways may hold a label its annotator made after
    deciding; the label is restored and the decision refused, so nobody stands as the reviewer of their
    own label)."""

    def __init__(self, labels: ContentIndex, label_ids: Mapping[Any, int]) -> None:
        self._labels = labels
        self._label_ids = label_ids
        self._labelled: dict[Unit, list[str]] = {}  # unit -> the annotator of each label on it
        self._note(labels.ids)
        self._decision_ids: dict[int, int] = {}  # source decision id -> target decision id
        self._rows: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # content -> row to insert, not yet inserted
        self._waiting: dict[int, tuple[Any, ...]] = {}  # source decision id -> content, its id not yet known

    def _note(self, contents: Iterable[tuple[Any, ...]]) -> None:
        for content in contents:
            label = Annotation._from_row((None, *content))
            unit = (label.dataset, label.task, label.query_id, label.doc_id)
            self._labelled.setdefault(unit, []).append(label.annotator)

    def run(
        self, store: AnnotationStore, decisions: list[tuple[int, Decision]], name: str, errors: list[Problem]
    ) -> tuple[int, int]:
        """Restore ``decisions`` ((line, decision) pairs); a refused one is added to ``errors``. Returns
        (added, already present)."""
        ordered = sorted(decisions, key=lambda item: (item[1].id is None, item[1].id or 0, item[0]))
        stored = ContentIndex("adjudications", _DECISION_FIELDS, {(d.dataset, d.task) for _, d in ordered})
        added = present = 0
        for start in range(0, len(ordered), IMPORT_BATCH):
            with store._connection(write=True) as conn:
                self._note(self._labels.refresh(conn))
                stored.refresh(conn)
                for number, decision in ordered[start : start + IMPORT_BATCH]:
                    problem, new = self._restore(conn, decision, stored)
                    if problem:
                        errors.append(Problem(name, number, problem))
                    else:
                        added, present = added + new, present + (not new)
                self._flush(conn, stored)
        return added, present

    def _restore(self, conn: Session, d: Decision, stored: ContentIndex) -> tuple[str, bool]:
        """Queue one decision unless the same one is there; ("", added?) or (why not, False)."""
        labelled = self._labelled.get(d.unit)
        if not labelled:
            return f"decision on an unknown unit ({describe(d.unit)}): no labels on it", False
        if d.supersedes is not None and d.supersedes not in self._decision_ids and d.supersedes not in self._waiting:
            return f"decision supersedes #{d.supersedes}, which is not restored before it", False
        try:
            check_not_own_unit(d.unit, labelled, [d.reviewer])
        except SelfAdjudication as err:
            return str(err), False
        if d.supersedes in self._waiting:
            self._flush(conn, stored)  # its predecessor's id is needed now
        content = tuple(getattr(d, field) for field in _DECISION_FIELDS)
        new = content not in stored.ids and content not in self._rows
        if new:
            supersedes = None if d.supersedes is None else self._decision_ids[d.supersedes]
            seen = ",".join(str(self._label_ids[i]) for i in d.label_ids if i in self._label_ids)
            self._rows[content] = (*content, supersedes, seen)
        if d.id is not None:
            self._waiting[d.id] = content
        return "", new

    def _flush(self, conn: Session, stored: ContentIndex) -> None:
        """Insert the queued decisions and learn the ids of those waiting (read back: the lock is held)."""
        if self._rows:
            conn.executemany(_INSERT_DECISION_SQL, list(self._rows.values()))
            stored.refresh(conn)
        for source, content in self._waiting.items():
            self._decision_ids[source] = stored.ids[content]
        self._rows.clear()
        self._waiting.clear()
