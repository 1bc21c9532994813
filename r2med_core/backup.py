"""A full backup of the team's work, and restoring it into another annotation store (SQLite or PostgreSQL).

A label export carries labels only; a backup also carries every adjudication decision with its history
(superseded decisions included) and the pooling judging queue, so nothing a user made is lost when a
store moves. The backup is JSONL, one object per line, so a problem is reported by file and line:

* line 1, the header: ``{"format": "r2med-annotation-backup", "version": 1, "schema": 4, ...}``;
* ``{"kind": "label", "id": ..., <Annotation fields>}`` per label (``id`` is the source store's);
* ``{"kind": "decision", "id": ..., "supersedes": ..., "label_ids": [...], <Decision fields>}``, oldest
  first, ids and references those of the source store;
* ``{"kind": "queue", "dataset": ..., "task": ..., <QueueEntry fields>}`` per queued document.

Restoring merges: labels and decisions already in the target (every field but the id equal) are kept
and not added again, so restoring one backup twice adds nothing. Labels get new ids in the target, and
a decision's ``supersedes`` and ``label_ids`` are rewritten to them; decisions are added oldest first,
so the supersession order (the latest decision on a unit stands) is kept. Restored into a store with
decisions of its own on a unit, the restored ones are recorded after them and stand.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .adjudication import Decision, describe, history
from .annotation_backends import ADJUDICATION_COLUMNS, SCHEMA_VERSION, Session
from .annotations import (
    IMPORT_BATCH,
    Annotation,
    AnnotationStore,
    _parse,
    _read_file,
    check_upload_size,
    jsonl_objects,
    utc_now,
)
from .cache import atomic_write_text
from .data import DataError, Problem
from .pooling import JudgingQueue, QueueEntry

BACKUP_FORMAT = "r2med-annotation-backup"
BACKUP_VERSION = 1
KINDS = ("label", "decision", "queue")
#: A decision's own fields: every column but the ids, which a restore rewrites to the target's.
_DECISION_FIELDS = tuple(c for c in ADJUDICATION_COLUMNS if c not in ("id", "supersedes", "label_ids"))
_QUEUE_FIELDS = ("dataset", "task", "query_id", "doc_id", "systems", "depth", "sent_by", "sent_at")
# A decision already in the target: every field but the ids equal (its labels and predecessor may differ).
_UNIT = "dataset = ? AND task = ? AND query_id = ? AND doc_id IS ?"
_SAME_DECISION_SQL = (
    f"SELECT id FROM adjudications WHERE {_UNIT} AND "
    "failure_type = ? AND grade IS ? AND reason = ? AND reviewer = ? AND decided_at = ? ORDER BY id LIMIT 1"
)
_INSERT_DECISION_SQL = (
    "INSERT INTO adjudications (dataset, task, query_id, doc_id, failure_type, grade, reason, reviewer, "
    "decided_at, supersedes, label_ids) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
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


def backup_text(store: AnnotationStore, queue: JudgingQueue | None = None) -> str:
    """The whole store (labels, every decision with its history) and ``queue`` as backup JSONL."""
    labels = store.list()
    decisions = history(store)
    queued = queue.every_task() if queue is not None else []
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


def write_backup(store: AnnotationStore, path: str | Path, queue: JudgingQueue | None = None) -> Path:
    """Write ``backup_text`` to ``path`` atomically (a crash never leaves half a backup)."""
    path = Path(path)
    atomic_write_text(path, backup_text(store, queue))
    return path


def restore_backup(store: AnnotationStore, path: str | Path, queue: JudgingQueue | None = None) -> RestoreReport:
    """Merge the backup file at ``path`` into ``store`` (and its queue entries into ``queue``)."""
    path = Path(path)
    return restore_backup_bytes(store, _read_file(path), str(path), queue)


def restore_backup_bytes(
    store: AnnotationStore,
    data: bytes,
    name: str = "upload",
    queue: JudgingQueue | None = None,
    *,
    max_bytes: int | None = None,
) -> RestoreReport:
    """``restore_backup`` on content held in memory (an upload): ``name`` only labels the messages and is
    never used as a path. DataError (nothing restored) for more than ``max_bytes``, or a file that is not
    a backup this version reads; a bad line is reported by file and line and the other lines restored.
    Without ``queue`` the backup's queue lines are reported, not silently dropped."""
    check_upload_size(data, name, max_bytes)
    objects = jsonl_objects(data, name)
    _check_header(objects, name)
    errors: list[Problem] = []
    labels: list[tuple[int, Any, Annotation]] = []  # (line, source id, label)
    decisions: list[tuple[int, dict[str, Any]]] = []
    queued: list[tuple[str, str, QueueEntry]] = []
    for number, obj in objects[1:]:
        if isinstance(obj, Problem):
            errors.append(obj)
            continue
        kind = obj.get("kind")
        if kind == "label":
            fields = {k: v for k, v in obj.items() if k != "kind"}
            parsed = _parse(fields, name, number)
            if isinstance(parsed, Problem):
                errors.append(parsed)
            else:
                labels.append((number, fields.get("id"), parsed))
        elif kind == "decision":
            decisions.append((number, obj))
        elif kind == "queue":
            entry = _queue_entry(obj, name, number)
            if isinstance(entry, Problem):
                errors.append(entry)
            elif queue is None:
                errors.append(Problem(name, number, "a judging queue entry, but no queue to restore it into"))
            else:
                queued.append(entry)
        else:
            errors.append(Problem(name, number, f"unknown kind {str(kind)[:40]!r}; expected {', '.join(KINDS)}"))

    stored = store._store_labels([label for _, _, label in labels])
    label_ids = {source: target for (_, source, _), (target, _) in zip(labels, stored) if source is not None}
    labels_added = sum(1 for _, new in stored if new)
    decisions_added, decisions_present = _restore_decisions(store, decisions, label_ids, name, errors)
    queue_added = queue.merge(queued) if queue is not None and queued else 0
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


def _queue_entry(obj: Mapping[str, Any], name: str, number: int) -> tuple[str, str, QueueEntry] | Problem:
    unknown = sorted(set(obj) - {"kind", *_QUEUE_FIELDS})
    if unknown:
        return Problem(name, number, "unknown field(s) " + ", ".join(f'"{k}"' for k in unknown)[:200])
    for key in ("dataset", "task", "query_id", "doc_id"):
        if not isinstance(obj.get(key), str) or not obj[key].strip():
            return Problem(name, number, f'"{key}" must be a non-empty string')
    systems, depth = obj.get("systems", []), obj.get("depth", 0)
    if not isinstance(systems, list) or not all(isinstance(s, str) for s in systems):
        return Problem(name, number, '"systems" must be a list of system names')
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        return Problem(name, number, '"depth" must be a whole number of 0 or more')
    if not all(isinstance(obj.get(k, ""), str) for k in ("sent_by", "sent_at")):
        return Problem(name, number, '"sent_by" and "sent_at" must be strings')
    entry = QueueEntry(
        obj["query_id"], obj["doc_id"], tuple(systems), depth, obj.get("sent_by", ""), obj.get("sent_at", "")
    )
    return obj["dataset"], obj["task"], entry


def _decision(obj: Mapping[str, Any]) -> Decision:
    """A backup line as a Decision (ids still the source store's); ValueError/TypeError when bad."""
    unknown = sorted(set(obj) - {"kind", "id", "supersedes", "label_ids", *_DECISION_FIELDS})
    if unknown:
        raise ValueError("unknown field(s) " + ", ".join(f'"{k}"' for k in unknown))
    ids = obj.get("label_ids", [])
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ValueError('"label_ids" must be a list of label ids')
    for key in ("id", "supersedes"):
        value = obj.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f'"{key}" must be a decision id or null')
    values = {k: obj[k] for k in _DECISION_FIELDS if k in obj}
    return Decision(**values, id=obj.get("id"), supersedes=obj.get("supersedes"), label_ids=tuple(ids))


def _restore_decisions(
    store: AnnotationStore,
    lines: list[tuple[int, dict[str, Any]]],
    label_ids: Mapping[Any, int],
    name: str,
    errors: list[Problem],
) -> tuple[int, int]:
    """Add the decisions oldest first (source id order), ids rewritten to the target's.

    A decision on a unit without labels in the target is refused: it would decide nothing anyone labelled.
    Returns (added, already present)."""
    parsed: list[tuple[int, Decision]] = []
    for number, obj in lines:
        try:
            parsed.append((number, _decision(obj)))
        except (ValueError, TypeError, RecursionError) as err:
            errors.append(Problem(name, number, f"decision: {str(err)[:300]}"))
    parsed.sort(key=lambda item: (item[1].id is None, item[1].id or 0, item[0]))
    decision_ids: dict[int, int] = {}  # source decision id -> target decision id
    added = present = 0
    for start in range(0, len(parsed), IMPORT_BATCH):  # short transactions, as a label import
        with store._connection(write=True) as conn:
            for number, d in parsed[start : start + IMPORT_BATCH]:
                problem, new = _restore_decision(conn, d, decision_ids, label_ids)
                if problem:
                    errors.append(Problem(name, number, problem))
                else:
                    added, present = added + new, present + (not new)
    return added, present


def _restore_decision(
    conn: Session, d: Decision, decision_ids: dict[int, int], label_ids: Mapping[Any, int]
) -> tuple[str, bool]:
    """Add one decision unless the same one is there; ("", added?) or (why not, False)."""
    key = (d.dataset, d.task, d.query_id, d.doc_id)
    if not conn.execute(f"SELECT 1 FROM annotations WHERE {_UNIT} LIMIT 1", key).fetchone():
        return f"decision on an unknown unit ({describe(key)}): no labels on it", False
    if d.supersedes is not None and d.supersedes not in decision_ids:
        return f"decision supersedes #{d.supersedes}, which is not restored before it", False
    content = (*key, d.failure_type, d.grade, d.reason, d.reviewer, d.decided_at)
    row = conn.execute(_SAME_DECISION_SQL, content).fetchone()
    new = row is None
    if new:
        supersedes = None if d.supersedes is None else decision_ids[d.supersedes]
        seen = ",".join(str(label_ids[i]) for i in d.label_ids if i in label_ids)
        row = conn.execute(_INSERT_DECISION_SQL, (*content, supersedes, seen)).fetchone()
    if d.id is not None:
        decision_ids[d.id] = int(row[0])
    return "", new
