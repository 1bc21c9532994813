"""The PostgreSQL backend, for a team sharing one annotation database (``R2MED_ANNOTATIONS_URL``).

The tables, their columns, indexes and migrations are generated from ``schema``, as the SQLite file's;
the schema version lives in a one-row ``annotations_schema`` table. The store uses the URL's database and
the first schema of its ``search_path`` (``?options=-csearch_path%3Dname`` chooses another), and leaves
every other table alone.

Guarantees match the SQLite store: each write is one transaction holding a store-wide advisory lock
(writers queue as with SQLite's write lock, so an import's duplicate check never races another writer,
and concurrent first opens create the schema once); commits are synchronous, so a label reported saved
is on disk; a killed client's open transaction is rolled back by the server, never half-applied. Each
operation uses its own connection, so a store is safe across threads and after ``fork``.

psycopg is imported only here, when a PostgreSQL URL is used. The URL's password never appears in a
message: errors name ``location`` (host, port, database) and are scrubbed of the password.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from r2med_core.judging.stores import (
    SCHEMA_VERSION,
    URL_ENV,
    AnnotationStoreError,
    redact_url,
    url_secrets,
)
from r2med_core.judging.stores.schema import TABLES, add_column, create_index, create_table, lacking_message, missing

#: The pip requirement that provides psycopg with its own libpq.
REQUIREMENT = "psycopg[binary]"
#: First key of the advisory lock; the second is the schema's name, so stores in different schemas of
#: one database do not wait for each other.
_LOCK_CLASS = 0x52324D44  # "R2MD"
_UNTOUCHED = "the database was left untouched — choose another database or schema"


def _import_psycopg(location: str) -> ModuleType:
    try:
        import psycopg
    except ImportError as err:
        raise AnnotationStoreError(
            f"{location}: the annotation store is a PostgreSQL database, which needs psycopg "
            f"({err}); install it with: pip install '{REQUIREMENT}'"
        ) from None
    return psycopg


@functools.lru_cache(maxsize=256)
def _translate(sql: str) -> str:
    """The store's portable SQL in psycopg's dialect: ``?`` → ``%s``, null-safe ``IS ?`` → ``IS NOT DISTINCT FROM``."""
    return sql.replace("%", "%%").replace(" IS ?", " IS NOT DISTINCT FROM ?").replace("?", "%s")


class _Session:
    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        if not params:
            return self._conn.execute(sql)
        return self._conn.execute(_translate(sql), tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._conn.cursor() as cursor:  # psycopg pipelines the rows: one round trip, not one per row
            cursor.executemany(_translate(sql), [tuple(row) for row in rows])


@dataclass(frozen=True)
class _Found:
    """The store's schema as read: its tables, version, each table's columns and the indexes."""

    tables: set[str]
    version: int
    columns: dict[str, set[str]]
    indexes: set[str]

    @property
    def current(self) -> bool:
        """Nothing to create or migrate: opening needs no lock and writes nothing."""
        if not {"annotations_schema", *(t.name for t in TABLES)} <= self.tables or self.version != SCHEMA_VERSION:
            return False
        return all(set(t.indexes) <= self.indexes and set(t.names) <= self.columns[t.name] for t in TABLES)


class PostgresBackend:
    """An annotation store in the PostgreSQL database named by ``url`` (libpq URL syntax)."""

    kind = "PostgreSQL"
    path: Path | None = None

    def __init__(self, url: str, timeout: float) -> None:
        self._url = url
        self._secrets = url_secrets(url)
        self.location = redact_url(url)
        self.timeout = timeout
        self._psycopg = _import_psycopg(self.location)
        self._initialise()

    def __repr__(self) -> str:
        return f"PostgresBackend({self.location!r})"

    def _scrub(self, err: BaseException) -> str:
        """An error's text without the URL or its password (first lines only: no query dumps)."""
        text = " ".join(str(err).split("\n")[:3]).strip() or type(err).__name__
        text = text.replace(self._url, self.location)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text[:500]

    def _connect(self) -> Any:
        return self._psycopg.connect(self._url, autocommit=True, connect_timeout=max(2, round(self.timeout)))

    @contextmanager
    def connection(self, write: bool = False) -> Iterator[_Session]:
        """A connection for one operation; with ``write``, one transaction holding the store's lock,
        committed on success and rolled back on any error."""
        psycopg = self._psycopg
        try:
            conn = self._connect()
        except psycopg.Error as err:
            raise AnnotationStoreError(
                f"{self.location}: cannot connect to the annotation database: {self._scrub(err)}"
            ) from None
        try:
            if write:
                with conn.transaction():
                    conn.execute(
                        "SELECT set_config('lock_timeout', %s, true), set_config('synchronous_commit', 'on', true)",
                        (f"{int(self.timeout * 1000)}ms",),
                    )
                    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(current_schema()))", (_LOCK_CLASS,))
                    yield _Session(conn)
            else:
                yield _Session(conn)
        except psycopg.Error as err:
            raise AnnotationStoreError(f"{self.location}: {self._scrub(err)}") from None
        finally:
            conn.close()

    def _initialise(self) -> None:
        """Create or migrate the schema under the store's lock; refuse, untouched, an ``annotations`` table
        that is not a store's, a newer schema, or a database that cannot hold every label's text. A current
        store is only read (no lock, no transaction), so opening it never waits behind a writer and works
        for a role that may only read."""
        with self.connection() as db:
            found = self._inspect(db)
        if found.current:
            return
        with self.connection(write=True) as db:
            self._migrate(db, self._inspect(db))  # read again under the lock: another client may have migrated

    def _inspect(self, db: _Session) -> _Found:
        """What the store's schema holds now (read only); an AnnotationStoreError for what must stay untouched."""
        if db.execute("SELECT current_schema()").fetchone()[0] is None:
            raise AnnotationStoreError(
                f"{self.location}: no schema to create the annotations table in (none of the search_path exists)"
            )
        encoding = str(db.execute("SHOW server_encoding").fetchone()[0])
        if encoding.upper() not in ("UTF8", "UTF-8"):
            raise AnnotationStoreError(
                f"{self.location}: the database's encoding is {encoding}, which cannot hold every label; "
                f"create it with ENCODING 'UTF8'; {_UNTOUCHED}"
            )
        names = [t.name for t in TABLES]
        tables = {
            name
            for (name,) in db.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
                f"AND table_name IN ({', '.join('?' * (len(names) + 1))})",
                (*names, "annotations_schema"),
            ).fetchall()
        }
        version = 0
        if "annotations_schema" in tables:
            version = db.execute("SELECT max(version) FROM annotations_schema").fetchone()[0] or 0
        if version > SCHEMA_VERSION:
            raise AnnotationStoreError(
                f"{self.location}: written by a newer version of R2MED Explorer (schema {version}, this one "
                f"reads {SCHEMA_VERSION}); the database was left untouched"
            )
        columns = {t.name: self._columns(db, t.name) if t.name in tables else set() for t in TABLES}
        for table in TABLES:
            lacks = missing(table, columns[table.name]) if table.name in tables else []
            if lacks:
                raise AnnotationStoreError(f"{self.location}: {lacking_message(table, lacks, _UNTOUCHED)}")
        indexes = {
            name
            for (name,) in db.execute(
                f"SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                f"AND tablename IN ({', '.join('?' * len(names))})",
                names,
            ).fetchall()
        }
        return _Found(tables, version, columns, indexes)

    @staticmethod
    def _columns(db: _Session, table: str) -> set[str]:
        return {
            name
            for (name,) in db.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name = ?",
                (table,),
            ).fetchall()
        }

    @staticmethod
    def _migrate(db: _Session, found: _Found) -> None:
        """DDL only for what is missing, so a role without CREATE rights can use an up-to-date store."""
        for table in TABLES:  # a missing table whole, then the columns added since, then indexes
            if table.name not in found.tables:
                db.execute(create_table(table, "postgresql"))
            for column in table.added:
                if table.name in found.tables and column.name not in found.columns[table.name]:
                    db.execute(add_column(table, column, "postgresql"))
            for index in table.indexes:
                if index not in found.indexes:
                    db.execute(create_index(table, index))
        if "annotations_schema" not in found.tables:
            db.execute("CREATE TABLE annotations_schema (version INTEGER NOT NULL)")
        if found.version < SCHEMA_VERSION:
            db.execute("DELETE FROM annotations_schema")
            db.execute("INSERT INTO annotations_schema (version) VALUES (?)", (SCHEMA_VERSION,))


__all__ = ["REQUIREMENT", "URL_ENV", "PostgresBackend"]
