"""The default backend: one SQLite file in WAL mode, so several processes can write at once.

Each operation opens its own short-lived connection, so a store can be shared by Streamlit sessions and
used after ``fork``. Writes take the write lock up front (``BEGIN IMMEDIATE``) and wait up to the
timeout for another writer. The file is the user's work: a file that is not an annotation store is
reported, never deleted or replaced. Opening a store whose schema is current writes nothing, so a full
disk or a read-only file still lets people read, export and back up their labels (saving then fails
with a message saying so).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from r2med_core.judging.stores import (
    ADDED_COLUMNS,
    ADJUDICATION_INDEX,
    ASSIGNMENT_INDEX,
    COLUMNS,
    INDEXES,
    OTHER_TABLES,
    SCHEMA_VERSION,
    AnnotationStoreError,
)

_SQL_TYPES = {
    "rank": "INTEGER",
    "reviewer": "TEXT NOT NULL DEFAULT ''",
    "reviewed_at": "TEXT",
    "blind": "INTEGER NOT NULL DEFAULT 0 CHECK (blind IN (0, 1))",
}
_SCHEMA = """
CREATE TABLE IF NOT EXISTS annotations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL,
    task TEXT NOT NULL,
    query_id TEXT NOT NULL,
    doc_id TEXT,
    system TEXT NOT NULL DEFAULT '',
    failure_type TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT '',
    annotator TEXT NOT NULL CHECK (annotator <> ''),
    created_at TEXT NOT NULL,
    accepted INTEGER NOT NULL DEFAULT 0 CHECK (accepted IN (0, 1)),
    rank INTEGER,
    reviewer TEXT NOT NULL DEFAULT '',
    reviewed_at TEXT,
    blind INTEGER NOT NULL DEFAULT 0 CHECK (blind IN (0, 1))
);
CREATE INDEX IF NOT EXISTS annotations_by_query ON annotations (dataset, task, query_id);
CREATE INDEX IF NOT EXISTS annotations_by_content
    ON annotations (dataset, task, query_id, doc_id, annotator, created_at);
"""
# Schema 4: created when missing, so a schema-3 store gains it with every label kept as it was.
_ADJUDICATIONS = """
CREATE TABLE IF NOT EXISTS adjudications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL,
    task TEXT NOT NULL,
    query_id TEXT NOT NULL,
    doc_id TEXT,
    failure_type TEXT NOT NULL,
    grade INTEGER CHECK (grade IS NULL OR grade >= 0),
    reason TEXT NOT NULL DEFAULT '',
    reviewer TEXT NOT NULL CHECK (reviewer <> ''),
    decided_at TEXT NOT NULL,
    supersedes INTEGER REFERENCES adjudications (id),
    label_ids TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS adjudications_by_unit ON adjudications (dataset, task, query_id, doc_id);
"""
# Schema 5: the judging queue and its assignments, created when missing (every label kept as it was).
_QUEUE = """
CREATE TABLE IF NOT EXISTS judging_queue (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL,
    task TEXT NOT NULL,
    query_id TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    systems TEXT NOT NULL DEFAULT '[]',
    depth INTEGER NOT NULL DEFAULT 0 CHECK (depth >= 0),
    sent_by TEXT NOT NULL DEFAULT '',
    sent_at TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS assignments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue_id INTEGER NOT NULL REFERENCES judging_queue (id),
    annotator TEXT NOT NULL CHECK (annotator <> ''),
    assigned_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS assignments_by_item ON assignments (queue_id);
"""
_UNTOUCHED = "the file was left untouched — move it aside or choose another path"
#: SQLite's result codes for a write the disk or file refuses (the primary code: the low byte); a file
#: that may not grow (a quota, a size limit) fails with an I/O error.
_UNWRITABLE = (sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR)


class SQLiteBackend:
    """An annotation store in the SQLite file ``path`` (created with its folder when missing)."""

    kind = "SQLite"

    def __init__(self, path: Path, timeout: float) -> None:
        if str(path) == ":memory:":
            raise ValueError("an annotation store needs a file: each operation opens its own connection")
        self.file: Path = path.expanduser().absolute()
        self.path: Path | None = self.file
        self.location = str(self.file)
        self.timeout = timeout
        if self.file.is_dir():
            raise AnnotationStoreError(f"{self.file}: is a folder, not an annotation store file")
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise AnnotationStoreError(f"{self.file}: cannot create its folder: {err}") from None
        self.journal_mode = ""
        self._initialise()

    def _open(self, create: bool = False) -> sqlite3.Connection:
        """A connection. When the WAL index shared between processes (the ``-shm`` file) cannot be grown —
        a full disk — one that keeps its index in memory (exclusive locking: other processes wait while it
        is open), so the labels can still be read."""
        uri = self.file.as_uri() + ("?mode=rwc" if create else "?mode=rw")
        try:
            return self._connect(uri)
        except sqlite3.OperationalError as err:
            if getattr(err, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_IOERR:
                raise
        return self._connect(uri, "PRAGMA locking_mode = EXCLUSIVE")

    def _connect(self, uri: str, *pragmas: str) -> sqlite3.Connection:
        conn = sqlite3.connect(uri, uri=True, timeout=self.timeout, isolation_level=None)
        try:
            for pragma in pragmas:
                conn.execute(pragma)
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            conn.execute("PRAGMA synchronous = FULL")  # labels are human work: survive power loss too
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the first read maps the WAL index
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def connection(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        """A connection for one operation; with ``write``, one IMMEDIATE transaction committed on success."""
        try:
            conn = self._open()
        except sqlite3.Error as err:
            raise AnnotationStoreError(f"{self.file}: cannot open the annotation store: {err}") from None
        try:
            if write:
                conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise
            if write:
                conn.commit()
        except sqlite3.Error as err:
            raise AnnotationStoreError(self._failed(err, write)) from err
        finally:
            conn.close()

    def _failed(self, err: sqlite3.Error, write: bool) -> str:
        """The message for a failed operation; a write the disk or file refuses says what still works."""
        if write and getattr(err, "sqlite_errorcode", 0) & 0xFF in _UNWRITABLE:
            return (
                f"{self.file}: cannot save ({err}): nothing was written — free disk space or make the file "
                "writable; the labels already stored can still be read, exported and backed up"
            )
        return f"{self.file}: {err}"

    def _initialise(self) -> None:
        """Create the schema in a new or empty file, or migrate an older store; refuse, untouched, anything
        that is not a store. A current store is only read, so opening it needs no free space or write access."""
        try:
            conn = self._open(create=True)
        except sqlite3.DatabaseError as err:
            raise AnnotationStoreError(
                f"{self.file}: not an annotation store (not a SQLite database, or damaged: {err}); {_UNTOUCHED}"
            ) from None
        except sqlite3.Error as err:
            raise AnnotationStoreError(f"{self.file}: cannot open the annotation store: {err}") from None
        try:
            try:
                tables = {
                    name
                    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                    if not name.startswith("sqlite_")
                }
                version = conn.execute("PRAGMA user_version").fetchone()[0]
            except sqlite3.DatabaseError as err:
                raise AnnotationStoreError(
                    f"{self.file}: not an annotation store (not a SQLite database, or damaged: {err}); {_UNTOUCHED}"
                ) from None
            if tables and "annotations" not in tables:
                raise AnnotationStoreError(
                    f"{self.file}: a SQLite database but not an annotation store "
                    f"(tables: {', '.join(sorted(tables))}); "
                    "the file was left untouched — choose another path"
                )
            if version > SCHEMA_VERSION:
                raise AnnotationStoreError(
                    f"{self.file}: written by a newer version of R2MED Explorer (schema {version}, this one reads "
                    f"{SCHEMA_VERSION}); the file was left untouched"
                )
            if "annotations" in tables:
                self._check_existing(conn, tables)
            if version == SCHEMA_VERSION and self._is_current(conn, tables):
                self.journal_mode = "wal"
                return
            self.journal_mode = self._enable_wal(conn)
            # One transaction, so a concurrent first open waits for (or finds) the finished schema, and an
            # older store gains the new columns exactly once (ALTER TABLE keeps every row as it was).
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in filter(str.strip, (_SCHEMA + _ADJUDICATIONS + _QUEUE).split(";")):
                    conn.execute(statement)
                present = {row[1] for row in conn.execute("PRAGMA table_info(annotations)")}
                for name in ADDED_COLUMNS:
                    if name not in present:
                        conn.execute(f"ALTER TABLE annotations ADD COLUMN {name} {_SQL_TYPES[name]}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
        except sqlite3.Error as err:
            raise AnnotationStoreError(f"{self.file}: cannot open the annotation store: {err}; {_UNTOUCHED}") from None
        finally:
            conn.close()

    @staticmethod
    def _is_current(conn: sqlite3.Connection, tables: set[str]) -> bool:
        """True when the file holds this version's whole schema in WAL mode (read only: nothing to write)."""
        if not {"annotations", *OTHER_TABLES} <= tables:
            return False
        indexes = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        columns = {row[1] for row in conn.execute("PRAGMA table_info(annotations)")}
        mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        wanted = {*INDEXES, ADJUDICATION_INDEX[0], ASSIGNMENT_INDEX[0]}
        return wanted <= indexes and set(ADDED_COLUMNS) <= columns and mode == "wal"

    def _enable_wal(self, conn: sqlite3.Connection) -> str:
        """Switch to WAL; the switch ignores the busy timeout, so retry while another process holds a lock."""
        deadline = time.monotonic() + self.timeout
        while True:
            mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            if mode == "wal":
                return mode
            try:
                return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
            except sqlite3.OperationalError as err:
                if ("locked" not in str(err) and "busy" not in str(err)) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def _check_existing(self, conn: sqlite3.Connection, tables: set[str]) -> None:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(annotations)")}
        missing = [name for name in COLUMNS if name not in columns and name not in ADDED_COLUMNS]
        if missing:
            raise AnnotationStoreError(
                f"{self.file}: its annotations table lacks column(s) {', '.join(missing)}; "
                "the file was left untouched — choose another path"
            )
        for table, wanted in OTHER_TABLES.items():
            if table not in tables:
                continue
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            missing = [name for name in wanted if name not in columns]
            if missing:
                raise AnnotationStoreError(
                    f"{self.file}: its {table} table is not an annotation store's (it lacks column(s) "
                    f"{', '.join(missing)}); the file was left untouched — choose another path"
                )
        status = [row[0] for row in conn.execute("PRAGMA quick_check")]
        if status != ["ok"]:
            raise AnnotationStoreError(
                f"{self.file}: the database is damaged ({'; '.join(map(str, status[:3]))}); the file was left "
                "untouched — restore a backup or export what reads"
            )
