"""Where the annotation store keeps its rows: one SQLite file (the default, ``sqlite``) or a PostgreSQL
database (``postgres``).

``AnnotationStore`` writes portable SQL (``?`` placeholders; ``a IS ?`` for equality that matches NULL)
and runs it through a ``Backend``, which owns connections, transactions, schema creation and migration,
and the messages naming where the labels live; the tables themselves are written once, in ``schema``, and
each backend generates its SQL from them. Both backends keep the same guarantees: every write is
its own transaction, writers take a store-wide lock (so a duplicate check and its insert never race
another writer), a killed process loses at most the label it was writing, and a database that is not an
annotation store is reported and left untouched.

A PostgreSQL URL may carry a password: a backend names its database by ``location`` (host, port and
database only) and removes the password from every message. psycopg is imported only for such a URL.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from r2med_core.judging.stores.schema import ADJUDICATIONS, ANNOTATIONS

#: Environment variable naming the store: ``postgresql://user:password@host:port/dbname`` (or
#: ``sqlite:///path/to/annotations.sqlite``). Unset: the SQLite file in the user data folder.
URL_ENV = "R2MED_ANNOTATIONS_URL"
#: Schema version (SQLite: ``PRAGMA user_version``; PostgreSQL: the ``annotations_schema`` table); a newer
#: store is refused rather than misread.
#: 2: rank, reviewer, reviewed_at; 3: blind; 4: the adjudications table; 5: the judging queue; 6: time_ms.
SCHEMA_VERSION = 6
#: The columns of the labels and of the adjudication decisions, in the order ``Annotation`` and
#: ``adjudication.Decision`` list their fields (every table is in ``schema``).
COLUMNS: tuple[str, ...] = ANNOTATIONS.names
ADJUDICATION_COLUMNS: tuple[str, ...] = ADJUDICATIONS.names
#: The largest whole number every store's INTEGER columns hold (PostgreSQL's INTEGER is 32-bit): a larger
#: rank or grade is refused when a label or decision is made, never left for the database to reject.
INTEGER_MAX = 2**31 - 1
#: The largest row id (ids are 64-bit in both databases).
ID_MAX = 2**63 - 1
POSTGRES_SCHEMES = ("postgresql", "postgres")


class AnnotationStoreError(RuntimeError):
    """The annotation store could not be opened or used; the message names the file or database
    (never a password)."""


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Session(Protocol):
    """One connection inside ``Backend.connection``: runs the store's portable SQL."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> Any:
        """Run one statement (no RETURNING) once per row, in one round trip where the database allows."""
        ...


class Backend(Protocol):
    """A database holding one annotation store."""

    #: "SQLite" or "PostgreSQL", for the page saying where labels are stored.
    kind: str
    #: Where the labels live, safe to show and log: a file path, or a URL without user and password.
    location: str
    #: The SQLite file; None for a database server.
    path: Path | None

    def connection(self, write: bool = False) -> AbstractContextManager[Session]:
        """A session for one operation; with ``write``, one locked transaction committed on success."""
        ...


def is_postgres_url(target: object) -> bool:
    """True for a ``postgresql://`` (or ``postgres://``) URL string."""
    return isinstance(target, str) and target.split("://", 1)[0].lower() in POSTGRES_SCHEMES and "://" in target


def configured_target() -> str | None:
    """``$R2MED_ANNOTATIONS_URL`` as a store target (a PostgreSQL URL or a SQLite path), None when unset.

    Any other scheme is a usage error naming the variable; the value itself is never echoed (it may hold
    a password).
    """
    value = os.environ.get(URL_ENV, "").strip()
    if not value:
        return None
    if is_postgres_url(value):
        return value
    if value.lower().startswith("sqlite:///"):
        return unquote(value[len("sqlite://") :])
    if "://" in value:
        scheme = value.split("://", 1)[0][:20]
        raise AnnotationStoreError(
            f"{URL_ENV}: unsupported scheme {scheme!r}; use postgresql://host/dbname or sqlite:///path/to/file"
        )
    return value  # a plain path: a SQLite file


def redact_url(url: str) -> str:
    """A PostgreSQL URL without user, password or other parameters: ``postgresql://host:port/dbname``
    (a ``host``/``port`` given as query parameters, e.g. a socket folder, is kept)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://(unreadable URL)"
    hostport = parts.netloc.rpartition("@")[2]
    kept = [(k, v) for k, v in parse_qsl(parts.query) if k in ("host", "hostaddr", "port", "dbname")]
    query = ("?" + urlencode(kept, safe="/")) if kept else ""
    return f"{parts.scheme}://{hostport}{parts.path}{query}"


def url_secrets(url: str) -> list[str]:
    """The password(s) a URL carries, raw and decoded, so messages can be scrubbed of them."""
    found: list[str] = []
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    userinfo = parts.netloc.rpartition("@")[0]
    if ":" in userinfo:
        found.append(userinfo.split(":", 1)[1])
    found += [v for k, v in parse_qsl(parts.query) if k in ("password", "sslpassword")]
    secrets = {s for s in found if s} | {unquote(s) for s in found if s}
    return sorted(secrets, key=len, reverse=True)


def open_backend(target: str | Path, timeout: float) -> Backend:
    """The backend for ``target``: a PostgreSQL URL string, else a SQLite file path."""
    if is_postgres_url(target):
        from r2med_core.judging.stores.postgres import PostgresBackend

        return PostgresBackend(str(target), timeout)
    from r2med_core.judging.stores.sqlite import SQLiteBackend

    return SQLiteBackend(Path(target), timeout)


__all__ = [
    "ADJUDICATION_COLUMNS",
    "COLUMNS",
    "ID_MAX",
    "INTEGER_MAX",
    "SCHEMA_VERSION",
    "URL_ENV",
    "AnnotationStoreError",
    "Backend",
    "Session",
    "configured_target",
    "is_postgres_url",
    "open_backend",
    "redact_url",
]
