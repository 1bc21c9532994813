"""The annotation store's tables, written once: both databases' DDL and column types are generated here.

Each table lists its columns with a *logical* type (a row id, a reference to another table's row id, text,
a whole number, a 0/1 flag), whether it may be NULL, its default and its rule (CHECK), and the schema
version that added it; then its indexes. ``create_table``, ``create_indexes`` and ``add_column`` turn them
into one dialect's SQL through ``TYPES``, the one map from logical to database types. So SQLite and
PostgreSQL cannot drift apart: a column exists in both or in neither, with the same rules.

Migration follows from ``since``: a table missing from an older store is created whole; a column added
after its table was created is added with ``ALTER TABLE … ADD COLUMN`` (every row kept as it was); a
table lacking a column it was created with is not the store's, and is reported and left untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Dialect = Literal["sqlite", "postgresql"]
LogicalType = Literal["id", "ref", "text", "integer", "flag"]

#: Logical type → database type, per dialect. Row ids are 64-bit in both (PostgreSQL's INTEGER is 32-bit,
#: SQLite's INTEGER holds 64 bits); an ``id`` is the table's generated primary key.
TYPES: dict[Dialect, dict[LogicalType, str]] = {
    "sqlite": {
        "id": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "ref": "INTEGER",
        "text": "TEXT",
        "integer": "INTEGER",
        "flag": "INTEGER",
    },
    "postgresql": {
        "id": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        "ref": "BIGINT",
        "text": "TEXT",
        "integer": "INTEGER",
        "flag": "INTEGER",
    },
}


@dataclass(frozen=True)
class Column:
    """One column. ``default``: an SQL literal; ``check``: a rule beyond the type's (a flag is 0 or 1 by
    its type); ``references``: for a ``ref``, the table whose row id it holds; ``since``: the schema
    version that added it."""

    name: str
    type: LogicalType
    null: bool = False
    default: str | None = None
    check: str = ""
    references: str = ""
    since: int = 1

    def sql(self, dialect: Dialect) -> str:
        """The column's definition in ``dialect``, as CREATE TABLE and ALTER TABLE ADD COLUMN take it."""
        parts = [self.name, TYPES[dialect][self.type]]
        if not self.null and self.type != "id":
            parts.append("NOT NULL")
        if self.default is not None:
            parts.append(f"DEFAULT {self.default}")
        rules = [f"{self.name} IN (0, 1)"] if self.type == "flag" else []
        rules += [self.check] if self.check else []
        parts += [f"CHECK ({rule})" for rule in rules]
        if self.references:
            parts.append(f"REFERENCES {self.references} (id)")
        return " ".join(parts)


@dataclass(frozen=True)
class Table:
    """One table: its columns in order, its indexes (name → columns) and the schema version that added it."""

    name: str
    columns: tuple[Column, ...]
    indexes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    since: int = 1

    @property
    def names(self) -> tuple[str, ...]:
        """The column names, in order: what the store's code reads and writes."""
        return tuple(c.name for c in self.columns)

    @property
    def required(self) -> tuple[str, ...]:
        """The columns it was created with: a table of this name lacking one is not the store's."""
        return tuple(c.name for c in self.columns if c.since <= self.since)

    @property
    def added(self) -> tuple[Column, ...]:
        """The columns added after the table was created: an older store gains them on open."""
        return tuple(c for c in self.columns if c.since > self.since)


def _text(name: str, *, null: bool = False, default: str | None = None, named: bool = False, since: int = 1) -> Column:
    """A text column; ``named``: it holds a person's name, which is never empty."""
    return Column(name, "text", null=null, default=default, check=f"{name} <> ''" if named else "", since=since)


_ID = Column("id", "id")
_UNIT = (_text("dataset"), _text("task"), _text("query_id"), _text("doc_id", null=True))

ANNOTATIONS = Table(
    "annotations",
    (
        _ID,
        *_UNIT,
        _text("system", default="''"),
        _text("failure_type"),
        _text("note", default="''"),
        _text("annotator", named=True),
        _text("created_at"),
        Column("accepted", "flag", default="0"),
        Column("rank", "integer", null=True, since=2),
        _text("reviewer", default="''", since=2),
        _text("reviewed_at", null=True, since=2),
        Column("blind", "flag", default="0", since=3),
        Column("time_ms", "integer", null=True, check="time_ms IS NULL OR time_ms >= 0", since=6),
    ),
    {
        "annotations_by_query": ("dataset", "task", "query_id"),
        "annotations_by_content": ("dataset", "task", "query_id", "doc_id", "annotator", "created_at"),
    },
)
#: Schema 4: reviewers' adjudication decisions, one row per decision (a later one supersedes, never
#: overwrites, an earlier one; the labels themselves are never changed by a decision).
ADJUDICATIONS = Table(
    "adjudications",
    (
        _ID,
        *_UNIT,
        _text("failure_type"),
        Column("grade", "integer", null=True, check="grade IS NULL OR grade >= 0"),
        _text("reason", default="''"),
        _text("reviewer", named=True),
        _text("decided_at"),
        Column("supersedes", "ref", null=True, references="adjudications"),
        _text("label_ids", default="''"),
    ),
    {"adjudications_by_unit": ("dataset", "task", "query_id", "doc_id")},
    since=4,
)
#: Schema 5: the judging queue, shared by every server on the store: one row per (query, document) of a
#: task sent for judging (``systems``: the pool's systems as a JSON list). Not indexed on its text: an
#: index entry must fit a PostgreSQL page, and the queue is read one task (or the whole queue) at a time.
JUDGING_QUEUE = Table(
    "judging_queue",
    (
        _ID,
        *_UNIT[:3],
        _text("doc_id"),
        _text("systems", default="'[]'"),
        Column("depth", "integer", default="0", check="depth >= 0"),
        _text("sent_by", default="''"),
        _text("sent_at", default="''"),
    ),
    since=5,
)
#: Schema 5: which annotator is to judge which queued document (``queue_id``: a ``judging_queue`` row).
ASSIGNMENTS = Table(
    "assignments",
    (
        _ID,
        Column("queue_id", "ref", references="judging_queue"),
        _text("annotator", named=True),
        _text("assigned_at"),
    ),
    {"assignments_by_item": ("queue_id",)},
    since=5,
)
#: Every table of the store, each after the tables it references.
TABLES: tuple[Table, ...] = (ANNOTATIONS, ADJUDICATIONS, JUDGING_QUEUE, ASSIGNMENTS)


def create_table(table: Table, dialect: Dialect, *, if_not_exists: bool = False) -> str:
    """``CREATE TABLE`` for ``table`` with every column of this version."""
    guard = "IF NOT EXISTS " if if_not_exists else ""
    columns = ",\n    ".join(c.sql(dialect) for c in table.columns)
    return f"CREATE TABLE {guard}{table.name} (\n    {columns}\n)"


def create_index(table: Table, name: str, *, if_not_exists: bool = False) -> str:
    """``CREATE INDEX`` for one of ``table``'s indexes (the same in both dialects)."""
    guard = "IF NOT EXISTS " if if_not_exists else ""
    return f"CREATE INDEX {guard}{name} ON {table.name} ({', '.join(table.indexes[name])})"


def add_column(table: Table, column: Column, dialect: Dialect) -> str:
    """``ALTER TABLE … ADD COLUMN`` for a column added after ``table`` was created."""
    return f"ALTER TABLE {table.name} ADD COLUMN {column.sql(dialect)}"


def missing(table: Table, present: set[str]) -> list[str]:
    """The columns ``table`` was created with that a stored table of its name lacks (then not the store's)."""
    return [name for name in table.required if name not in present]


def lacking_message(table: Table, lacks: list[str], untouched: str) -> str:
    """What a store says of its ``table`` lacking columns it was created with (it is left untouched)."""
    return f"its {table.name} table is not an annotation store's (it lacks column(s) {', '.join(lacks)}); {untouched}"


__all__ = [
    "ADJUDICATIONS",
    "ANNOTATIONS",
    "ASSIGNMENTS",
    "JUDGING_QUEUE",
    "TABLES",
    "TYPES",
    "Column",
    "Table",
    "add_column",
    "create_index",
    "create_table",
    "lacking_message",
    "missing",
]
