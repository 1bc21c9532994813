"""One table definition (r2med_core.judging.stores.schema) for both databases: a store created or migrated in
SQLite and in PostgreSQL holds exactly the tables, columns, rules and indexes the code reads and writes."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from r2med_core.judging.adjudication import Decision
from r2med_core.judging.annotations import FIELDS, AnnotationStore
from r2med_core.judging.stores.schema import TABLES, TYPES

from .test_annotations import V1_SCHEMA

#: A column as both databases describe it: (name, "integer" or "text", NULL allowed, default).
Described = tuple[str, str, bool, str | None]

def _kind(declared: str) -> str:
    return "integer" if declared.lower() in ("integer", "bigint") else declared.lower()


def sqlite_schema(path: Path) -> tuple[dict[str, list[Described]], set[str]]:
    """Every store table's columns, and the indexes, as the SQLite file holds them."""
    with sqlite3.connect(path) as conn:
        tables = {
            table.name: [
                (name, _kind(declared), not notnull and not pk, default)
                for _, name, declared, notnull, default, pk in conn.execute(f"PRAGMA table_info({table.name})")
            ]
            for table in TABLES
        }
        indexes = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    return tables, {n for n in indexes if not n.startswith("sqlite_")}


def postgres_schema(url: str) -> tuple[dict[str, list[Described]], set[str]]:
    """The same, as the PostgreSQL schema holds them (defaults without their ``::text`` casts)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tables = {
            table.name: [
                (name, _kind(declared), nullable == "YES", default.split("::")[0] if default else None)
                for name, declared, nullable, default in conn.execute(
                    "SELECT column_name, data_type, is_nullable, column_default FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
                    (table.name,),
                )
            ]
            for table in TABLES
        }
        indexes = {
            n
            for (n,) in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")
            if not n.endswith("_pkey")
        }
    return tables, indexes


def test_a_sqlite_store_holds_the_columns_the_code_reads_and_writes(tmp_path: Path) -> None:
    AnnotationStore(tmp_path / "new.sqlite")
    tables, indexes = sqlite_schema(tmp_path / "new.sqlite")
    assert {t.name: [c[0] for c in tables[t.name]] for t in TABLES} == {t.name: list(t.names) for t in TABLES}
    assert tuple(c[0] for c in tables["annotations"]) == FIELDS  # every Annotation field, in order
    assert tuple(c[0] for c in tables["adjudications"]) == tuple(f.name for f in fields(Decision))
    assert indexes == {name for t in TABLES for name in t.indexes}


def test_an_old_sqlite_store_migrates_to_exactly_a_new_ones_schema(tmp_path: Path) -> None:
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as conn:
        conn.executescript(V1_SCHEMA)
    AnnotationStore(old)
    AnnotationStore(tmp_path / "new.sqlite")
    migrated, fresh = sqlite_schema(old), sqlite_schema(tmp_path / "new.sqlite")
    assert migrated[1] == fresh[1]
    # Only the schema-1 acceptance default differs (what a label was before reviews existed): kept as it was.
    assert {**migrated[0], "annotations": [c for c in migrated[0]["annotations"] if c[0] != "accepted"]} == {
        **fresh[0],
        "annotations": [c for c in fresh[0]["annotations"] if c[0] != "accepted"],
    }


def test_both_databases_hold_the_same_tables_columns_rules_and_indexes(
    tmp_path: Path, postgres_urls: Callable[[], str]
) -> None:
    """Generated from one table definition: a column, a NULL rule, a default or an index in one database only
    fails here. A store migrated from schema 4 (before the judging queue and the time per label) gains the
    same."""
    import psycopg

    AnnotationStore(tmp_path / "new.sqlite")
    url = postgres_urls()
    AnnotationStore(url)
    in_sqlite, in_postgres = sqlite_schema(tmp_path / "new.sqlite"), postgres_schema(url)
    assert in_sqlite == in_postgres
    old = postgres_urls()
    AnnotationStore(old)
    with psycopg.connect(old, autocommit=True) as conn:
        conn.execute("DROP TABLE assignments; DROP TABLE judging_queue; ALTER TABLE annotations DROP COLUMN time_ms")
        conn.execute("UPDATE annotations_schema SET version = 4")
    AnnotationStore(old)
    assert postgres_schema(old) == in_postgres


def test_the_rules_hold_in_both_databases(tmp_path: Path, postgres_urls: Callable[[], str]) -> None:
    """Each CHECK of the definition refuses the same row in both: an empty annotator or reviewer, a
    non-flag acceptance, a negative grade or depth."""
    import psycopg

    AnnotationStore(tmp_path / "new.sqlite")
    url = postgres_urls()
    AnnotationStore(url)
    bad = [
        "INSERT INTO annotations (dataset, task, query_id, failure_type, created_at, annotator) "
        "VALUES ('d', 't', 'q', 'x', 'a', '')",
        "INSERT INTO annotations (dataset, task, query_id, failure_type, created_at, annotator, blind) "
        "VALUES ('d', 't', 'q', 'x', 'a', 'n', 2)",
        "INSERT INTO adjudications (dataset, task, query_id, failure_type, reviewer, decided_at, grade) "
        "VALUES ('d', 't', 'q', 'x', 'r', 'a', -1)",
        "INSERT INTO adjudications (dataset, task, query_id, failure_type, reviewer, decided_at) "
        "VALUES ('d', 't', 'q', 'x', '', 'a')",
        "INSERT INTO judging_queue (dataset, task, query_id, doc_id, depth) VALUES ('d', 't', 'q', 'x', -1)",
        "INSERT INTO annotations (dataset, task, query_id, failure_type, created_at, annotator, time_ms) "
        "VALUES ('d', 't', 'q', 'x', 'a', 'n', -1)",
    ]
    with sqlite3.connect(tmp_path / "new.sqlite") as lite, psycopg.connect(url, autocommit=True) as pg:
        for statement in bad:
            for conn, refused in ((lite, sqlite3.IntegrityError), (pg, psycopg.errors.CheckViolation)):
                try:
                    conn.execute(statement)
                except refused:
                    continue
                raise AssertionError(f"{type(conn).__module__} accepted: {statement}")
    assert set(TYPES["sqlite"]) == set(TYPES["postgresql"])  # every logical type has a type in both
