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

from r2med_core.judging.stores import SCHEMA_VERSION, AnnotationStoreError
from r2med_core.judging.stores.schema import TABLES, add_column, create_index, create_table, lacking_message, missing

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
                for table in TABLES:  # a missing table whole, then the columns added since, then indexes
                    conn.execute(create_table(table, "sqlite", if_not_exists=True))
                    present = _columns(conn, table.name)
                    for column in table.added:
                        if column.name not in present:
                            conn.execute(add_column(table, column, "sqlite"))
                    for index in table.indexes:
                        conn.execute(create_index(table, index, if_not_exists=True))
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
        if not {t.name for t in TABLES} <= tables:
            return False
        indexes = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        whole = all(
            set(t.indexes) <= indexes and {c.name for c in t.added} <= _columns(conn, t.name) for t in TABLES
        )
        return whole and str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"

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
        for table in TABLES:
            lacks = missing(table, _columns(conn, table.name)) if table.name in tables else []
            if lacks:
                raise AnnotationStoreError(f"{self.file}: {lacking_message(table, lacks, _UNTOUCHED)}")
        status = [row[0] for row in conn.execute("PRAGMA quick_check")]
        if status != ["ok"]:
            raise AnnotationStoreError(
                f"{self.file}: the database is damaged ({'; '.join(map(str, status[:3]))}); the file was left "
                "untouched — restore a backup or export what reads"
            )


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
