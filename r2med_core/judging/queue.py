"""The judging queue: pooled documents sent for blind judging, who is to judge each, and how far the team got.

The queue lives in the annotation store (``judging_queue`` and ``assignments``, schema 5), so every server
on one database serves the same queue, and a backup carries it with the labels. Each queued document goes
to ``judges`` annotators (the operator's ``R2MED_JUDGES_PER_DOCUMENT``, 2 by default, so their agreement can
be measured): ``serve`` gives an annotator the document assigned to them that they have not labelled, else
assigns them the first one that fewer than ``judges`` people have (assigned or labelled) — under the store's
write lock, so two servers never assign one document past its count. What each person judged is read
from their labels (any label on the (query, document) counts; names compare case-insensitively; a model's
proposals never count), so the queue itself is only written on a send, a restore or an assignment.

Earlier versions kept the queue in ``judging_queue.json`` in the data folder. ``migrate_queue_file`` moves
it into the store once, read through the same checks as before (a damaged entry is skipped and named, an
unreadable file imports nothing), and keeps the file: renamed ``judging_queue.json.migrated-<UTC time>``, or
``.damaged-<UTC time>`` when something in it could not be read, which ``kept_queue_files`` then reports.

**Blind names.** A document's id can name its answer (the demo's ``siadh_0``, ``panic_disorder_0``), so the
blind Judging page never shows it: it shows ``blind_name`` — the document's place in its task's queue, which
says nothing about its content and is the same on every server (the queue only grows) — and its keyboard
sends that name back; the judgement is stored against the real id, looked up here (``JudgingQueue.numbered``).
"""

from __future__ import annotations

import glob
import json
import shutil
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from r2med_core.data import Problem
from r2med_core.judging.annotations import (
    IMPORT_BATCH,
    PROPOSER_PREFIX,
    AnnotationStore,
    AnnotationStoreError,
    ContentIndex,
    check_storable,
    default_store_path,
    utc_now,
)
from r2med_core.judging.identity import Person
from r2med_core.judging.pooling import Pool
from r2med_core.judging.stores import INTEGER_MAX, Session
from r2med_core.settings import JUDGES_PER_DOCUMENT

QUEUE_FILE = "judging_queue.json"
QUEUE_VERSION = 1
#: What a queue file kept aside is named after: ``judging_queue.json.damaged-<UTC time>`` when something in
#: it could not be read, ``.migrated-<UTC time>`` once every entry of it is in the store.
DAMAGED = ".damaged-"
MIGRATED = ".migrated-"
#: Skipped entries reported one by one; the rest are counted.
_MAX_PROBLEMS = 20
#: What identifies a queued document: one row per (query, document) of a task.
_KEY = ("dataset", "task", "query_id", "doc_id")
_INSERT_SQL = (
    "INSERT INTO judging_queue (dataset, task, query_id, doc_id, systems, depth, sent_by, sent_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_ENTRY_FIELDS = ("query_id", "doc_id", "systems", "depth", "sent_by", "sent_at")
_ENTRY = ", ".join(_ENTRY_FIELDS)


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True)
class QueueEntry:
    """One (query, document) sent for blind judging: from which pool and by whom. Construction validates
    it (types, ranges, text a database can hold), so a bad entry never reaches the store."""

    query_id: str
    doc_id: str
    systems: tuple[str, ...]
    depth: int
    sent_by: str
    sent_at: str

    def __post_init__(self) -> None:
        for name in ("query_id", "doc_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f'"{name}" must be a non-empty string')
        if not isinstance(self.systems, tuple) or not all(isinstance(s, str) for s in self.systems):
            raise ValueError('"systems" must be a list of system names')
        depth = self.depth
        if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= INTEGER_MAX:
            raise ValueError(f'"depth" must be a whole number of 0 or more (at most {INTEGER_MAX})')
        if not isinstance(self.sent_by, str) or not isinstance(self.sent_at, str):
            raise ValueError('"sent_by" and "sent_at" must be strings')
        for name in ("query_id", "doc_id", "sent_by", "sent_at"):
            check_storable(name, getattr(self, name))
        for system in self.systems:
            check_storable("systems", system)

    @classmethod
    def _from_row(cls, row: Sequence[Any]) -> QueueEntry:
        """Rebuild a stored row (query_id … sent_at) without validation: it was checked on the way in."""
        obj = object.__new__(cls)
        query_id, doc_id, systems, depth, sent_by, sent_at = row
        values = (query_id, doc_id, _systems(systems), int(depth), sent_by, sent_at)
        for name, value in zip(_ENTRY_FIELDS, values):
            object.__setattr__(obj, name, value)
        return obj


def queue_entry(obj: object) -> QueueEntry:
    """A queue entry from its JSON object (a queue file's, a backup's); ValueError saying what is wrong
    (wrong types are refused, never converted; other keys are the caller's to check)."""
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    systems = obj.get("systems", [])
    if not isinstance(systems, list):
        raise ValueError('"systems" must be a list of system names')
    values = (obj.get("query_id"), obj.get("doc_id"), tuple(systems), obj.get("depth", 0))
    return QueueEntry(*values, obj.get("sent_by", ""), obj.get("sent_at", ""))  # type: ignore[arg-type]


def check_task(dataset: object, task: object) -> None:
    """ValueError unless ``dataset`` and ``task`` name a task the store can hold (non-empty text)."""
    for name, value in (("dataset", dataset), ("task", task)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f'"{name}" must be a non-empty string')
        check_storable(name, value)


def _row(dataset: str, task: str, entry: QueueEntry) -> tuple[object, ...]:
    systems = json.dumps(list(entry.systems), ensure_ascii=False)
    return (dataset, task, entry.query_id, entry.doc_id, systems, entry.depth, entry.sent_by, entry.sent_at)


def _systems(cell: object) -> tuple[str, ...]:
    """A stored ``systems`` cell (a JSON list); one edited by hand into something unreadable is no systems."""
    try:
        names = json.loads(str(cell))
    except (ValueError, RecursionError):
        return ()
    return tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else ()


def blind_name(number: int) -> str:
    """What a blind page calls the ``number``-th document of its task's queue (1: the first sent), in place
    of its id, which can name the answer: the one rule every blind page, its keyboard and its messages use."""
    return f"#{number}"


# --------------------------------------------------------------------------- who judges what


def _who(name: object) -> str:
    """A person's name as compared: without surrounding spaces, case-insensitively."""
    return name.strip().lower() if isinstance(name, str) else ""


@dataclass(frozen=True)
class Turn:
    """One annotator's turn on one task: the document they judge now (None: nothing left for them), how
    many of the task's queued documents they labelled, how many may still come to them (this one
    included), the queue's size, how many annotators each document goes to, and the entry's place in the
    task's queue (1: the first sent; 0 without an entry), whose ``name`` a blind page shows."""

    entry: QueueEntry | None
    judged: int
    left: int
    queued: int
    judges: int
    number: int = 0

    @property
    def name(self) -> str:
        """The entry's ``blind_name``: what a blind page shows in place of its id."""
        return blind_name(self.number)


@dataclass(frozen=True)
class TaskProgress:
    """The team on one task: documents queued, labelled by ``judges`` people or more (``complete``), by
    fewer (``started``), and by nobody yet (``untouched``)."""

    dataset: str
    task: str
    queued: int
    complete: int
    started: int
    judges: int

    @property
    def untouched(self) -> int:
        return self.queued - self.complete - self.started


@dataclass(frozen=True)
class AnnotatorProgress:
    """One annotator on one task: queued documents they labelled, and ones assigned to them still waiting."""

    dataset: str
    task: str
    annotator: str
    judged: int
    waiting: int


@dataclass(frozen=True)
class QueueProgress:
    """The queue's progress, per task and per annotator (tasks in the order first sent)."""

    tasks: tuple[TaskProgress, ...] = ()
    annotators: tuple[AnnotatorProgress, ...] = ()


@dataclass
class _Task:
    """One task's queue as read from the store: its entries by row id, who is assigned each, and who
    labelled each (query, document), names as compared (``_who``) with the first spelling seen kept."""

    items: list[tuple[int, QueueEntry]]
    assigned: dict[int, set[str]] = field(default_factory=dict)
    labelled: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)

    def judged_by(self, entry: QueueEntry) -> set[str]:
        return self.labelled.get((entry.query_id, entry.doc_id), set())

    def turn(
        self, who: str, judges: int, queries: Container[str] | None, skipped: Container[tuple[str, str]] = ()
    ) -> tuple[Turn, int | None]:
        """``who``'s turn, and the row id of its document when it still has to be assigned to them. A
        ``skipped`` (query, document) still counts as left for them but is not chosen."""
        mine: tuple[int, QueueEntry, int] | None = None
        first_open: tuple[int, QueueEntry, int] | None = None
        judged = left = queued = 0
        for number, (queue_id, entry) in enumerate(self.items, start=1):
            if queries is not None and entry.query_id not in queries:
                continue  # sent on another version of the task: its query is not there to judge
            queued += 1
            labelled = self.judged_by(entry)
            if who and who in labelled:
                judged += 1
                continue
            assigned = self.assigned.get(queue_id, set())
            later = (entry.query_id, entry.doc_id) in skipped
            if who and who in assigned:
                left += 1
                mine = mine or (None if later else (queue_id, entry, number))
            elif len(assigned | labelled) < judges:
                left += 1
                first_open = first_open or (None if later else (queue_id, entry, number))
        chosen = mine or first_open
        if chosen is None:
            return Turn(None, judged, left, queued, judges), None
        turn = Turn(chosen[1], judged, left, queued, judges, chosen[2])
        return turn, (first_open[0] if mine is None and first_open is not None else None)

    def progress(self, dataset: str, task: str, judges: int) -> tuple[TaskProgress, list[AnnotatorProgress]]:
        complete = started = 0
        judged: dict[str, int] = {}
        waiting: dict[str, int] = {}
        for queue_id, entry in self.items:
            labelled = self.judged_by(entry)
            complete += len(labelled) >= judges
            started += 0 < len(labelled) < judges
            for who in labelled:
                judged[who] = judged.get(who, 0) + 1
            for who in self.assigned.get(queue_id, set()) - labelled:
                waiting[who] = waiting.get(who, 0) + 1
        people = sorted(set(judged) | set(waiting))
        rows = [
            AnnotatorProgress(dataset, task, self.names[who], judged.get(who, 0), waiting.get(who, 0))
            for who in people
        ]
        return TaskProgress(dataset, task, len(self.items), complete, started, judges), rows


class JudgingQueue:
    """The judging queue of ``store``, each document going to ``judges`` annotators.

    Writes are the store's short locked transactions; a send or restore adds its entries in batches of
    ``IMPORT_BATCH``, a (query, document) already queued for its task kept as it was."""

    def __init__(self, store: AnnotationStore, judges: int = JUDGES_PER_DOCUMENT) -> None:
        if isinstance(judges, bool) or not isinstance(judges, int) or judges < 1:
            raise ValueError(f"each queued document needs 1 or more judges, got {judges!r}")
        self.store = store
        self.judges = judges

    # ---------------------------------------------------------------- the queue

    def items(self, dataset: str, task: str) -> list[QueueEntry]:
        """Every entry sent for this task, in the order sent."""
        with self.store._connection() as conn:
            rows = conn.execute(
                f"SELECT {_ENTRY} FROM judging_queue WHERE dataset = ? AND task = ? ORDER BY id", (dataset, task)
            ).fetchall()
        return [QueueEntry._from_row(row) for row in rows]

    def numbered(self, dataset: str, task: str) -> dict[str, QueueEntry]:
        """Every entry sent for this task by its ``blind_name``, in the order sent: how a blind page finds
        the real (query, document) its keys name."""
        return {blind_name(number): entry for number, entry in enumerate(self.items(dataset, task), start=1)}

    def every_task(self) -> list[tuple[str, str, QueueEntry]]:
        """Every entry of every task as (dataset, task, entry), in the order sent: a backup's view."""
        with self.store._connection() as conn:
            rows = conn.execute(f"SELECT dataset, task, {_ENTRY} FROM judging_queue ORDER BY id").fetchall()
        return [(row[0], row[1], QueueEntry._from_row(row[2:])) for row in rows]

    def send(self, dataset: str, task: str, pooled: Pool, sent_by: str) -> int:
        """Add the pool's documents to the task's queue; ones already queued are kept as they were.
        Returns how many were new. ValueError (nothing sent) without the sender's name, or for a
        document the store cannot hold."""
        if not isinstance(sent_by, str) or not sent_by.strip():
            raise ValueError("sending a pool for judging needs the sender's name")
        now = utc_now()
        return self.merge(
            (dataset, task, QueueEntry(doc.query_id, doc.doc_id, doc.systems, pooled.depth, sent_by.strip(), now))
            for doc in pooled.items()
        )

    def merge(self, entries: Iterable[tuple[str, str, QueueEntry]]) -> int:
        """Add entries (a send's, a restored backup's or a migrated file's, with who sent them and when); a
        (query, document) already queued for its task is kept as it was, so merging twice adds nothing.
        Returns how many were new; ValueError (nothing added) for a task name the store cannot hold."""
        rows = [_row(dataset, task, entry) for dataset, task, entry in entries]
        tasks = {(str(row[0]), str(row[1])) for row in rows}
        for dataset, task in tasks:
            check_task(dataset, task)
        queued = ContentIndex("judging_queue", _KEY, tasks)
        added = 0
        for start in range(0, len(rows), IMPORT_BATCH):
            with self.store._connection(write=True) as conn:
                queued.refresh(conn)
                new: dict[tuple[object, ...], tuple[object, ...]] = {}
                for row in rows[start : start + IMPORT_BATCH]:
                    if row[:4] not in queued.ids:
                        new.setdefault(row[:4], row)
                if new:
                    conn.executemany(_INSERT_SQL, list(new.values()))
                    queued.refresh(conn)  # reads back exactly the rows just added: the lock is still held
            added += len(new)
        return added

    # ---------------------------------------------------------------- assignment

    def serve(
        self,
        dataset: str,
        task: str,
        person: Person | None,
        queries: Container[str] | None = None,
        skipped: Container[tuple[str, str]] = (),
    ) -> Turn:
        """``person``'s turn on this task: the queued document assigned to them that they have not labelled,
        else the first one fewer than ``judges`` people have (assigned or labelled), now assigned to them.

        Someone who may not label (or nobody named) is shown that document without it being assigned.
        ``queries``: the task's query ids, when the queue may hold documents of queries the dataset no
        longer has (sent on another version of it); those are never served or counted. ``skipped``: the
        (query, document) pairs this person put aside for later: they stay theirs (assigned, counted as
        left) but another is served first; once only skipped ones are left, none is served."""
        who = _who(person.name) if person is not None else ""
        turn, unassigned = self._task(dataset, task).turn(who, self.judges, queries, skipped)
        if unassigned is None or person is None or not who or not person.may("label"):
            return turn
        with self.store._connection(write=True) as conn:  # read again under the lock: another server may
            found = self._read_task(conn, dataset, task)  # have assigned that document meanwhile
            turn, unassigned = found.turn(who, self.judges, queries, skipped)
            if unassigned is not None:
                conn.execute(
                    "INSERT INTO assignments (queue_id, annotator, assigned_at) VALUES (?, ?, ?)",
                    (unassigned, person.name.strip(), utc_now()),
                )
        return turn

    def progress(self) -> QueueProgress:
        """Every task's progress and every annotator's on it (tasks in the order first sent)."""
        with self.store._connection() as conn:
            tasks = conn.execute("SELECT dataset, task, min(id) FROM judging_queue GROUP BY dataset, task").fetchall()
            found = [(d, t, self._read_task(conn, d, t)) for d, t, _ in sorted(tasks, key=lambda row: row[2])]
        teams, people = [], []
        for dataset, task, state in found:
            team, rows = state.progress(dataset, task, self.judges)
            teams.append(team)
            people += rows
        return QueueProgress(tuple(teams), tuple(people))

    def _task(self, dataset: str, task: str) -> _Task:
        with self.store._connection() as conn:
            return self._read_task(conn, dataset, task)

    @staticmethod
    def _read_task(conn: Session, dataset: str, task: str) -> _Task:
        rows = conn.execute(
            f"SELECT id, {_ENTRY} FROM judging_queue WHERE dataset = ? AND task = ? ORDER BY id", (dataset, task)
        ).fetchall()
        found = _Task([(int(row[0]), QueueEntry._from_row(row[1:])) for row in rows])
        for queue_id, annotator in conn.execute(
            "SELECT a.queue_id, a.annotator FROM assignments a JOIN judging_queue q ON q.id = a.queue_id "
            "WHERE q.dataset = ? AND q.task = ? ORDER BY a.id",
            (dataset, task),
        ).fetchall():
            found.assigned.setdefault(int(queue_id), set()).add(_who(annotator))
            found.names.setdefault(_who(annotator), str(annotator).strip())
        for query_id, doc_id, annotator in conn.execute(
            "SELECT DISTINCT query_id, doc_id, annotator FROM annotations WHERE dataset = ? AND task = ? "
            "AND doc_id IS NOT NULL",
            (dataset, task),
        ).fetchall():
            if isinstance(annotator, str) and annotator.strip() and not annotator.startswith(PROPOSER_PREFIX):
                found.labelled.setdefault((query_id, doc_id), set()).add(_who(annotator))
                found.names.setdefault(_who(annotator), annotator.strip())
        return found


# --------------------------------------------------------------------------- the queue file of earlier versions


def default_queue_path() -> Path:
    """``judging_queue.json`` next to the default SQLite annotation store (``$R2MED_DATA_HOME``): where
    earlier versions kept the queue."""
    return default_store_path().parent / QUEUE_FILE


@dataclass(frozen=True)
class QueueFile:
    """What a read of a queue file found: the readable entries per (dataset, task), and the problems."""

    tasks: dict[tuple[str, str], list[QueueEntry]]
    problems: list[Problem]


def read_queue_file(path: Path) -> QueueFile:
    """A queue file's readable entries and what was wrong with the rest, each problem named by the file's
    name (never a server path) and the entry; never raises."""
    name = path.name
    try:
        raw = path.read_bytes()
    except OSError as err:
        return QueueFile({}, [Problem(name, None, f"cannot be read ({err.strerror or err})")])
    try:
        data = json.loads(raw.decode("utf-8"), parse_int=_json_int)
    except UnicodeDecodeError as err:
        return QueueFile({}, [Problem(name, raw[: err.start].count(b"\n") + 1, "not UTF-8 text")])
    except json.JSONDecodeError as err:
        return QueueFile({}, [Problem(name, err.lineno, f"not JSON ({err.msg})")])
    except RecursionError:
        return QueueFile({}, [Problem(name, None, "nested too deeply to read")])
    found = data.get("tasks") if isinstance(data, dict) and data.get("version") == QUEUE_VERSION else None
    if not isinstance(found, dict):
        return QueueFile({}, [Problem(name, None, f"not a version-{QUEUE_VERSION} judging queue")])
    tasks: dict[tuple[str, str], list[QueueEntry]] = {}
    problems: list[Problem] = []
    for key, entries in found.items():
        dataset, tab, task = key.partition("\t")
        try:
            check_task(dataset, task)
        except ValueError:
            tab = ""
        if not tab or not isinstance(entries, list):
            problems.append(Problem(name, None, f"{key[:80]!r}: not a task's list of entries; skipped"))
            continue
        for number, obj in enumerate(entries, start=1):
            try:
                tasks.setdefault((dataset, task), []).append(queue_entry(obj))
            except ValueError as err:
                where = f"task {dataset[:60]}/{task[:60]}, entry {number}"
                problems.append(Problem(name, None, f"{where}: {err}; skipped"))
    if len(problems) > _MAX_PROBLEMS:
        problems[_MAX_PROBLEMS:] = [Problem(name, None, f"… and {len(problems) - _MAX_PROBLEMS} more skipped")]
    return QueueFile(tasks, problems)


def _json_int(text: str) -> int | str:
    """json's ``parse_int``: an integer too long for any depth or version stays text, so its entry is
    refused instead of ``int()`` refusing the whole file (Python reads at most 4300 digits)."""
    return int(text) if len(text) <= 20 else text


def migrate_queue_file(store: AnnotationStore, path: Path | None = None) -> list[Problem]:
    """Move the queue file of earlier versions (``default_queue_path()``) into ``store``'s queue, then
    rename it: ``.migrated-<UTC time>``, or ``.damaged-<UTC time>`` when an entry or the whole file could
    not be read (``kept_queue_files`` reports it). Without the file (every open after the first) nothing is
    read or written. Entries already queued are not added again, so a second server migrating its own
    file, or a migration cut short and run again, adds nothing twice.

    Returns what stopped the migration (named by file name), to try again on the next open; [] when done.
    """
    path = default_queue_path() if path is None else path
    if not path.is_file():
        return []
    found = read_queue_file(path)
    entries = [(dataset, task, entry) for (dataset, task), queued in found.tasks.items() for entry in queued]
    try:
        JudgingQueue(store).merge(entries)
    except AnnotationStoreError as err:
        why = f"not moved into the annotation store yet ({err}); tried again on the next open"
        return [Problem(path.name, None, why)]
    try:
        _keep_aside(path, DAMAGED if found.problems else MIGRATED)
    except FileNotFoundError:
        return []  # another server moved it meanwhile
    except OSError as err:
        why = err.strerror or str(err)
        return [Problem(path.name, None, f"its entries are in the annotation store now, but it could not be renamed "
                        f"({why}); it is read again on the next open, which adds nothing twice")]
    return []


def _keep_aside(path: Path, suffix: str) -> Path:
    """Move ``path`` to ``<name><suffix><UTC time>``; an existing file of that name is never replaced."""
    aside = path.with_name(f"{path.name}{suffix}{datetime.now(UTC):%Y%m%dT%H%M%SZ}")
    with path.open("rb") as source, aside.open("xb") as copy:
        shutil.copyfileobj(source, copy)
    path.unlink()
    return aside


def kept_queue_files(path: Path | None = None) -> list[Problem]:
    """The damaged queue files kept aside next to ``path`` (``default_queue_path()``), each with what in it
    could not be read, named by file name: what senders and judges are shown until someone deletes them."""
    path = default_queue_path() if path is None else path
    notes: list[Problem] = []
    for kept in sorted(path.parent.glob(f"{glob.escape(path.name)}{DAMAGED}*")):
        notes += read_queue_file(kept).problems
        notes.append(
            Problem(kept.name, None, "a damaged judging queue file kept aside: what could be read of it is in the "
                    "judging queue, all of it is here (delete it once looked at)")
        )
    return notes
