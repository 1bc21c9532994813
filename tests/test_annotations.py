"""Failure annotations: taxonomy rules, the store (filters, exchange, concurrency, crashes) on SQLite and on a
real PostgreSQL server, re-evaluation."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from r2med_core.data import DataError
from r2med_core.judging.annotations import (
    DATA_ENV,
    FIELDS,
    TAXONOMY,
    URL_ENV,
    Annotation,
    AnnotationStore,
    AnnotationStoreError,
    default_store_path,
    register_failure_type,
)
from r2med_core.judging.stores import SCHEMA_VERSION, is_postgres_url
from r2med_core.judging.team import team_qrels

REPO = Path(__file__).resolve().parent.parent
DATASET, TASK = "demo:clinical-case", "clinical-case"

#: A writer process: says "ready", waits for the go file, opens the store (creating it if it is the first), then
#: adds ``count`` labels (or until killed when negative), printing each id once it is committed.
WRITER = """
import sys, time
from pathlib import Path
from r2med_core.judging.annotations import Annotation, AnnotationStore

path, who, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
store = AnnotationStore(path)
i = 0
while count < 0 or i < count:
    label = Annotation(
        dataset="demo:clinical-case", task="clinical-case", query_id=f"q{i % 7}", doc_id=f"{who}-{i}",
        system="bm25", failure_type="relevant_unjudged", note=f"{who} {i}", annotator=who,
    )
    print(store.add(label).id, flush=True)
    i += 1
"""


@pytest.fixture
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep every store of this module out of the user's data folder."""
    home = tmp_path / "r2med-data"
    monkeypatch.setenv(DATA_ENV, str(home))
    return home


Target = str | Path  # a SQLite file or a PostgreSQL URL; `new_target` (conftest) makes one per backend


@pytest.fixture
def store_target(new_target: Callable[[str], Target], data_home: Path, monkeypatch: pytest.MonkeyPatch) -> Target:
    """Where ``AnnotationStore()`` keeps labels in this test: the default file, or $R2MED_ANNOTATIONS_URL."""
    target = new_target("default")
    if is_postgres_url(target):
        monkeypatch.setenv(URL_ENV, str(target))
        return target
    return data_home / "annotations.sqlite"


@pytest.fixture
def store(store_target: Target) -> AnnotationStore:
    return AnnotationStore()


@pytest.fixture
def sqlite_store(data_home: Path) -> AnnotationStore:
    """A store in the default SQLite file, for what only a file has (WAL, a damaged file)."""
    return AnnotationStore()


@pytest.fixture
def restore_taxonomy() -> Iterator[None]:
    saved = dict(TAXONOMY)
    yield
    TAXONOMY.clear()
    TAXONOMY.update(saved)


def label(**overrides: object) -> Annotation:
    values: dict[str, object] = {
        "dataset": DATASET,
        "task": TASK,
        "query_id": "q1",
        "doc_id": "d1",
        "system": "bm25+hyde:gpt4",
        "failure_type": "relevant_unjudged",
        "note": "",
        "annotator": "alice",
    }
    values.update(overrides)
    return Annotation(**values)  # type: ignore[arg-type]


def accepted_pairs(store: AnnotationStore) -> dict[str, dict[str, int]]:
    """What the team's judgements (``team.team_qrels``) add to empty qrels from the store's labels."""
    return team_qrels({}, store.list(), [], dataset=DATASET, task=TASK).qrels


def _start_writer(path: Target, who: str, count: int, go: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), who, str(count), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first == "ready\n", proc.stderr.read() if proc.stderr else first
    return proc


# --------------------------------------------------------------------------- where the store lives


def test_default_path_follows_r2med_data_home(data_home: Path) -> None:
    assert default_store_path() == data_home / "annotations.sqlite"
    store = AnnotationStore()
    assert store.path == data_home / "annotations.sqlite" and store.path.is_file()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="XDG rule")
def test_default_path_without_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DATA_ENV, raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_store_path() == tmp_path / ".local/share/r2med_explorer/annotations.sqlite"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg/r2med_explorer/annotations.sqlite"


def test_store_uses_wal_and_waits_for_other_writers(sqlite_store: AnnotationStore) -> None:
    conn = sqlite_store._backend._open()  # type: ignore[attr-defined]
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000
        assert conn.execute("PRAGMA synchronous").fetchone()[0] in (1, 2)  # NORMAL or FULL
        indexes = [row[1] for row in conn.execute("PRAGMA index_list(annotations)")]
        assert "annotations_by_query" in indexes
        assert [r[2] for r in conn.execute("PRAGMA index_info(annotations_by_query)")] == [
            "dataset",
            "task",
            "query_id",
        ]
    finally:
        conn.close()


# --------------------------------------------------------------------------- taxonomy


def test_default_taxonomy() -> None:
    for code in (
        "relevant_unjudged",
        "gold_questionable",
        "wrong_aspect",
        "lexical_trap",
        "missing_reasoning_step",
        "rewrite_hallucination",
        "other",
    ):
        assert TAXONOMY[code].code == code and TAXONOMY[code].label and TAXONOMY[code].description
    assert TAXONOMY["relevant_unjudged"].scope == "document"
    assert TAXONOMY["rewrite_hallucination"].scope == "query"
    assert TAXONOMY["missing_reasoning_step"].scope in ("query", "both")


def test_unknown_type_is_rejected_naming_the_valid_codes(store: AnnotationStore) -> None:
    with pytest.raises(ValueError, match="unknown failure type 'bad_ranking'") as err:
        label(failure_type="bad_ranking")
    for code in TAXONOMY:
        assert code in str(err.value)
    assert len(store) == 0


def test_scope_mismatch_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"'lexical_trap'.*\(query, document\) pair: a doc_id is required"):
        label(failure_type="lexical_trap", doc_id=None)
    with pytest.raises(ValueError, match="doc_id is required"):
        label(failure_type="relevant_unjudged", doc_id="")  # empty means none
    with pytest.raises(ValueError, match=r"'rewrite_hallucination'.*whole query: doc_id must be empty"):
        label(failure_type="rewrite_hallucination", doc_id="d1")
    assert label(failure_type="rewrite_hallucination", doc_id=None).doc_id is None
    assert label(failure_type="missing_reasoning_step", doc_id=None).doc_id is None
    assert label(failure_type="missing_reasoning_step", doc_id="d1").doc_id == "d1"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"annotator": ""}, "annotator must be a non-empty string"),
        ({"annotator": "   "}, "annotator must be a non-empty string"),
        ({"query_id": ""}, "query_id must be a non-empty string"),
        ({"created_at": "yesterday"}, "created_at must be an ISO 8601 time"),
        ({"accepted": "yes"}, "accepted must be True or False"),
    ],
)
def test_invalid_labels_are_rejected(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        label(**overrides)


def test_created_at_is_utc_iso8601() -> None:
    assert label(created_at="2025-03-01T12:00:00+02:00").created_at == "2025-03-01T10:00:00.000000Z"
    assert label(created_at="2025-03-01T10:00:00Z").created_at == "2025-03-01T10:00:00.000000Z"
    assert label().created_at.endswith("Z")


@pytest.mark.usefixtures("restore_taxonomy")
def test_the_taxonomy_can_be_extended(store: AnnotationStore) -> None:
    new = register_failure_type("negation_missed", "Negation missed", "The system ignored a 'not'.", "document")
    assert TAXONOMY["negation_missed"] is new and list(TAXONOMY)[-1] == "negation_missed"
    stored = store.add(label(failure_type="negation_missed"))
    assert store.get(stored.id or 0).failure_type == "negation_missed"
    assert store.counts_by_type()["negation_missed"] == 1
    with pytest.raises(ValueError, match="doc_id is required"):
        label(failure_type="negation_missed", doc_id=None)
    with pytest.raises(ValueError, match="already registered"):
        register_failure_type("negation_missed", "Something else", scope="query")
    register_failure_type("negation_missed", "Something else", scope="query", replace=True)
    assert TAXONOMY["negation_missed"].scope == "query"
    with pytest.raises(ValueError, match="scope"):
        register_failure_type("bad_scope", "Bad", scope="passage")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lower_snake_case"):
        register_failure_type("Has Spaces", "Bad")


# --------------------------------------------------------------------------- the store


def test_round_trip(store: AnnotationStore, store_target: Target) -> None:
    first = store.add(label(note="Sepsis guideline — answers it.\nSecond line", created_at="2025-01-02T03:04:05Z"))
    second = store.add(label(annotator="bob"))  # same pair, another annotator: a second row
    third = store.add(label(annotator="bob"))  # even the same annotator again: nothing is overwritten
    query_level = store.add(label(failure_type="rewrite_hallucination", doc_id=None, system="", accepted=False))
    assert [a.id for a in (first, second, third, query_level)] == [1, 2, 3, 4]
    assert first == label(
        id=1, note="Sepsis guideline — answers it.\nSecond line", created_at="2025-01-02T03:04:05.000000Z"
    )
    reopened = AnnotationStore(store_target)
    assert reopened.list() == [first, second, third, query_level]
    assert reopened.get(4).doc_id is None and reopened.get(4).accepted is False and reopened.get(4).system == ""
    assert len(reopened) == 4
    with pytest.raises(KeyError):
        reopened.get(99)


def test_delete_and_review(store: AnnotationStore) -> None:
    a, b = store.add(label()), store.add(label(doc_id="d2"))
    assert a.status == "proposed" and not a.accepted  # a new label is a proposal, never a judgement
    accepted = store.review(a.id or 0, True, " Dr. Reviewer ")
    assert (accepted.accepted, accepted.reviewer, accepted.status) == (True, "Dr. Reviewer", "accepted")
    assert accepted.reviewed_at and accepted.reviewed_at >= accepted.created_at
    assert store.review(a.id or 0, False, "Dr. Other").status == "rejected"
    with pytest.raises(ValueError, match="reviewer"):
        store.review(a.id or 0, True, "  ")
    store.delete(b.id or 0)
    assert [x.id for x in store.list()] == [a.id]
    with pytest.raises(KeyError):
        store.delete(b.id or 0)
    with pytest.raises(KeyError):
        store.review(12345, True, "x")
    assert store.add(label()).id == 3  # ids are never reused


def test_nobody_reviews_their_own_label_even_calling_the_store_directly(store: AnnotationStore) -> None:
    """The store refuses a forged self-review (no page in between), whatever the name's case or spaces, and
    records nothing; another reviewer's review goes through."""
    from r2med_core.judging.identity import PermissionDenied, SelfReview

    mine = store.add(label(annotator="Alice"))
    for forged in ("Alice", " alice ", "ALICE"):
        for accept in (True, False):
            with pytest.raises(SelfReview, match=r"made label #1: nobody reviews their own label"):
                store.review(mine.id or 0, accept, forged)
    assert store.get(mine.id or 0).status == "proposed" and store.get(mine.id or 0).reviewer == ""
    assert issubclass(SelfReview, PermissionDenied)  # the pages' "Not done: …" for every refused permission
    assert store.review(mine.id or 0, True, "Bob").status == "accepted"


def _fill(store: AnnotationStore) -> None:
    store.add(label(query_id="q1", failure_type="relevant_unjudged", annotator="alice", system="bm25"))
    store.add(label(query_id="q1", failure_type="lexical_trap", annotator="bob", system="bm25"))
    store.add(label(query_id="q2", failure_type="lexical_trap", annotator="alice", system="minilm"))
    store.add(label(query_id="q2", failure_type="rewrite_hallucination", doc_id=None, annotator="bob", system=""))
    store.add(label(task="Biology", dataset="hf:R2MED/Biology", failure_type="wrong_aspect", annotator="carol"))


def test_filters_and_counts(store: AnnotationStore) -> None:
    _fill(store)
    assert len(store.list()) == 5
    assert len(store.list(dataset=DATASET, task=TASK)) == 4
    assert [a.failure_type for a in store.list(task=TASK, query_id="q1")] == ["relevant_unjudged", "lexical_trap"]
    assert len(store.list(query_id="q1")) == 3  # the Biology label has a q1 too
    assert {a.query_id for a in store.list(failure_type="lexical_trap")} == {"q1", "q2"}
    assert len(store.list(system="bm25")) == 2 and len(store.list(system="")) == 1
    assert [a.annotator for a in store.list(annotator="alice", query_id="q2")] == ["alice"]
    assert store.list(annotator="nobody") == []
    counts = store.counts_by_type(dataset=DATASET)
    assert counts == {
        "relevant_unjudged": 1,
        "gold_questionable": 0,
        "wrong_aspect": 0,
        "lexical_trap": 2,
        "missing_reasoning_step": 0,
        "rewrite_hallucination": 1,
        "not_relevant": 0,
        "other": 0,
        "grade_0": 0,  # list judging's relevance grades are registered types too
        "grade_1": 0,
        "grade_2": 0,
        "unsure": 0,  # the Judging page's "unsure" (no grade) too
    }
    assert store.counts_by_type(annotator="carol")["wrong_aspect"] == 1
    with pytest.raises(TypeError, match="unknown filter"):
        store.counts_by_type(colour="red")
    frame = store.to_dataframe(annotator="bob")
    assert list(frame.columns) == [*FIELDS, "status"] and len(frame) == 2
    assert list(frame["failure_type"]) == ["lexical_trap", "rewrite_hallucination"]
    assert list(frame["status"]) == ["proposed", "proposed"]
    assert list(store.to_dataframe(annotator="nobody").columns) == [*FIELDS, "status"]


# --------------------------------------------------------------------------- exchange


def test_jsonl_export_import_round_trip(
    store: AnnotationStore, tmp_path: Path, new_target: Callable[[str], Target]
) -> None:
    _fill(store)
    store.add(label(note='quotes " and, commas\nand a newline — é', accepted=False))
    path = store.export_jsonl(tmp_path / "out" / "labels.jsonl")
    assert sorted(p.name for p in path.parent.iterdir()) == ["labels.jsonl"]  # no temp file left behind
    assert len(path.read_text(encoding="utf-8").splitlines()) == 6
    fresh = AnnotationStore(new_target("fresh"))
    report = fresh.import_jsonl(path)
    assert (report.added, report.skipped_duplicates, report.errors) == (6, 0, ())
    assert [a.content() for a in fresh.list()] == [a.content() for a in store.list()]
    again = fresh.import_jsonl(path)
    assert (again.added, again.skipped_duplicates) == (0, 6) and len(fresh) == 6
    # Merging into the original: only the genuinely new label is added.
    fresh.add(label(annotator="dora"))
    merged = store.import_jsonl(fresh.export_jsonl(tmp_path / "fresh.jsonl"))
    assert (merged.added, merged.skipped_duplicates) == (1, 6) and len(store) == 7


def test_csv_export_import_round_trip(
    store: AnnotationStore, tmp_path: Path, new_target: Callable[[str], Target]
) -> None:
    _fill(store)
    store.add(label(note='quotes " and, commas\nand a newline — é', accepted=False))
    path = store.export_csv(tmp_path / "labels.csv")
    assert path.read_text(encoding="utf-8").splitlines()[0] == ",".join(FIELDS)
    fresh = AnnotationStore(new_target("fresh"))
    report = fresh.import_csv(path)
    assert (report.added, report.skipped_duplicates, report.errors) == (6, 0, ())
    assert [a.content() for a in fresh.list()] == [a.content() for a in store.list()]
    assert fresh.list(failure_type="rewrite_hallucination")[0].doc_id is None
    assert fresh.import_csv(path).skipped_duplicates == 6 and len(fresh) == 6
    with_bom = tmp_path / "excel.csv"  # as a spreadsheet saves it
    with_bom.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert AnnotationStore(new_target("third")).import_csv(with_bom).added == 6


def test_a_nul_character_is_refused_on_its_line_in_every_store(store: AnnotationStore) -> None:
    with pytest.raises(ValueError, match="note contains a NUL character"):
        label(note="copied from a PDF\x00")
    data = (_line(doc_id="d1") + "\n" + _line(doc_id="d2", note="\u0000") + "\n" + _line(doc_id="d3") + "\n").encode()
    report = store.import_jsonl_bytes(data, "pdf.jsonl")
    assert report.added == 2 and [(p.line, "NUL" in p.message) for p in report.errors] == [(2, True)]
    assert [a.doc_id for a in store.list()] == ["d1", "d3"]


def _line(**overrides: object) -> str:
    values = asdict(label(created_at="2025-01-01T00:00:00Z", doc_id=str(overrides.pop("doc_id"))))
    return json.dumps({**values, **overrides})


def test_import_reports_bad_lines_and_keeps_the_rest(store: AnnotationStore, tmp_path: Path) -> None:
    good = asdict(label(created_at="2025-01-01T00:00:00Z"))
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({**good, "failure_type": "nonsense"}),
        "",
        json.dumps({**good, "failure_type": "lexical_trap", "doc_id": None}),
        json.dumps({k: v for k, v in good.items() if k != "annotator"}),
        json.dumps({**good, "colour": "red"}),
        "[1, 2]",
        json.dumps({**good, "doc_id": "d9"}),
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = store.import_jsonl(path)
    assert (report.added, report.skipped_duplicates) == (2, 0)
    messages = [str(p) for p in report.errors]
    assert [p.line for p in report.errors] == [2, 3, 5, 6, 7, 8]
    assert all(m.startswith(f"{path}:") for m in messages)
    assert "malformed JSON" in messages[0]
    assert "unknown failure type 'nonsense'" in messages[1]
    assert "doc_id is required" in messages[2]
    assert 'missing field(s) "annotator"' in messages[3]
    assert 'unknown field(s) "colour"' in messages[4]
    assert "expected a JSON object" in messages[5]
    assert {a.doc_id for a in store.list()} == {"d1", "d9"}
    with pytest.raises(DataError, match="file not found"):
        store.import_jsonl(tmp_path / "missing.jsonl")


def test_import_reports_hostile_numbers_and_times_by_line_and_keeps_the_rest(store: AnnotationStore) -> None:
    good = asdict(label(created_at="2025-01-01T00:00:00Z"))
    end, start = "9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"  # outside years 1-9999 in UTC
    hostile = {  # line → what its message says
        '{"rank": ' + "9" * 5000 + "}": "team.jsonl:2: a number too long to read",
        json.dumps({**good, "created_at": end}): f"created_at '{end}' is out of range",
        json.dumps({**good, "created_at": start}): f"created_at '{start}' is out of range",
        json.dumps({**good, "reviewer": "r", "reviewed_at": end}): f"reviewed_at '{end}' is out of range",
        json.dumps({**good, "rank": 10**30}): "rank must be a positive integer (at most 2147483647)",
        json.dumps({**good, "note": "\ud800"}): "note is not valid Unicode text",
    }
    lines = [json.dumps(good), *hostile, json.dumps({**good, "doc_id": "d9"})]
    report = store.import_jsonl_bytes(("\n".join(lines) + "\n").encode(), "team.jsonl")
    assert [p.line for p in report.errors] == list(range(2, 2 + len(hostile)))
    for problem, expected in zip(report.errors, hostile.values()):
        assert expected in str(problem)
    assert report.added == 2 and {a.doc_id for a in store.list()} == {"d1", "d9"}


def test_csv_import_reports_hostile_cells_by_line_and_keeps_the_rest(store: AnnotationStore, tmp_path: Path) -> None:
    store.add(label(created_at="2025-01-01T00:00:00Z"))
    store.add(label(created_at="2025-01-02T00:00:00Z", doc_id="d9"))
    header, first, second = store.csv_text().splitlines()
    store.delete(store.list()[0].id)
    cells = dict(zip(header.split(","), first.split(",")))
    hostile = [
        {**cells, "rank": "9" * 5000},
        {**cells, "created_at": "9999-12-31T23:59:59-14:00"},
        {**cells, "reviewer": "r", "reviewed_at": "0001-01-01T00:00:00+14:00"},
    ]
    path = tmp_path / "team.csv"
    path.write_text("\n".join([header, *(",".join(row.values()) for row in hostile), first, second]) + "\n")
    report = store.import_csv(path)
    messages = [str(p) for p in report.errors]
    assert [p.line for p in report.errors] == [2, 3, 4], messages
    assert "rank must be a positive integer" in messages[0] and "out of range" in messages[1]
    assert "reviewed_at '0001-01-01T00:00:00+14:00' is out of range" in messages[2]
    assert (report.added, report.skipped_duplicates) == (1, 1) and len(store) == 2


# --------------------------------------------------------------------------- extending the judgements


def test_a_file_that_is_not_a_store_is_reported_and_left_alone(tmp_path: Path) -> None:
    garbage = tmp_path / "thesis.sqlite"
    content = b"my thesis, not a database\n" * 200
    garbage.write_bytes(content)
    with pytest.raises(AnnotationStoreError, match="not an annotation store") as err:
        AnnotationStore(garbage)
    assert str(garbage) in str(err.value) and "left untouched" in str(err.value)
    assert garbage.read_bytes() == content
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("thesis")] == ["thesis.sqlite"]  # no -wal/-shm

    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE patients (name TEXT)")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    with pytest.raises(AnnotationStoreError, match="SQLite database but not an annotation store"):
        AnnotationStore(other)
    assert other.read_bytes() == before

    with pytest.raises(AnnotationStoreError, match="is a folder"):
        AnnotationStore(tmp_path)


def test_a_damaged_store_is_reported_and_left_alone(sqlite_store: AnnotationStore) -> None:
    store = sqlite_store
    assert store.path is not None
    for i in range(50):
        store.add(label(doc_id=f"d{i}"))
    raw = bytearray(store.path.read_bytes())
    raw[0:16] = b"garbage garbage!"
    store.path.write_bytes(bytes(raw))
    with pytest.raises(AnnotationStoreError, match=str(store.path)):
        AnnotationStore(store.path)
    assert store.path.read_bytes() == bytes(raw)


def test_opening_a_current_store_never_waits_for_a_writer(new_target: Callable[[str], Target]) -> None:
    """Issue 29 item 8: opening wrote (or locked) the store, so it waited behind a long import and failed."""
    target = new_target("busy")
    kept = AnnotationStore(target).add(label())
    holder = AnnotationStore(target)
    with holder._connection(write=True):  # another writer holds the store's write lock throughout
        started = time.monotonic()
        reader = AnnotationStore(target, timeout=5)
        assert reader.list() == [kept] and reader.jsonl_text().count("\n") == 1
        assert time.monotonic() - started < 4


#: Opens a store in a process whose files may not grow at all (as on a full disk, even for root): prints
#: what reading, exporting and backing up found, and what saving said.
FULL_DISK = """
import json, resource, signal, sys
from r2med_core.judging.annotations import Annotation, AnnotationStore, AnnotationStoreError
from r2med_core.judging.backup import backup_text

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
store = AnnotationStore(sys.argv[1])
found = {"ids": [a.id for a in store.list()], "export": store.jsonl_text(), "backup": backup_text(store)}
try:
    store.add(Annotation(dataset="d", task="t", query_id="q", doc_id="x", failure_type="other", annotator="bob"))
except AnnotationStoreError as err:
    found["save"] = str(err)
print(json.dumps(found))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")
def test_a_full_disk_still_lets_labels_be_read_exported_and_backed_up(sqlite_store: AnnotationStore) -> None:
    """Issue 29 item 8: with no room to grow a file, the store could not be opened even to read."""
    labels = [sqlite_store.add(label(doc_id=f"d{i}")) for i in range(5)]
    path = sqlite_store.path
    assert path is not None
    before = path.read_bytes()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(path)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["ids"] == [a.id for a in labels]
    assert [json.loads(line)["doc_id"] for line in found["export"].splitlines()] == [f"d{i}" for i in range(5)]
    assert json.loads(found["backup"].splitlines()[0])["counts"]["label"] == 5
    assert found["save"].startswith(f"{path}: cannot save (") and "nothing was written" in found["save"]
    assert path.read_bytes() == before
    again = AnnotationStore(path)  # with room again: nothing lost, and saving works
    assert again.list() == labels
    again.add(label(doc_id="later"))
    assert len(again) == 6


def test_a_read_only_store_is_read_and_exported_and_saving_says_why_not(
    sqlite_store: AnnotationStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 29 item 8: a store SQLite may only read (a read-only file or folder; root ignores chmod, so
    every connection is opened ``mode=ro`` here) is opened, listed and exported; a save is refused clearly."""
    labels = [sqlite_store.add(label(doc_id=f"d{i}")) for i in range(3)]
    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda db, **kw: connect(re.sub(r"mode=rwc?", "mode=ro", db), **kw))
    store = AnnotationStore(sqlite_store.path)
    assert store.list() == labels
    assert store.export_csv(tmp_path / "labels.csv").read_text().count("\n") == 4
    with pytest.raises(AnnotationStoreError, match=r"cannot save \(attempt to write a readonly database\)"):
        store.add(label(doc_id="new"))
    monkeypatch.undo()
    assert AnnotationStore(sqlite_store.path).list() == labels


# --------------------------------------------------------------------------- several writers, crashes


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path, new_target: Callable[[str], Target]) -> None:
    go, path = tmp_path / "go", new_target("shared")
    writers = [_start_writer(path, who, 200, go) for who in ("alice", "bob")]  # both also create the store
    go.touch()
    printed: list[int] = []
    for proc in writers:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        printed += [int(line) for line in out.split()]
    store = AnnotationStore(path)
    rows = store.list()
    assert len(rows) == 400 and len(printed) == 400
    assert sorted(a.id for a in rows) == sorted(printed)
    for who in ("alice", "bob"):
        assert sorted(a.note for a in store.list(annotator=who)) == sorted(f"{who} {i}" for i in range(200))


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_killed_writer_leaves_every_committed_row(
    store: AnnotationStore, store_target: Target, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    proc = _start_writer(store_target, "crash", -1, go)  # writes until killed
    go.touch()
    assert proc.stdout is not None
    printed: list[int] = []
    deadline = time.monotonic() + 30
    while len(printed) < 150 and time.monotonic() < deadline:
        printed.append(int(proc.stdout.readline()))
    os.kill(proc.pid, signal.SIGKILL)
    rest, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    printed += [int(line) for line in rest.split("\n")[:-1]]  # complete lines only: each was committed
    assert len(printed) >= 150

    reopened = AnnotationStore(store_target)
    if store.path is not None:
        conn = sqlite3.connect(store.path)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            conn.close()
    stored = {a.id: a for a in reopened.list()}
    assert set(printed) <= set(stored)
    assert len(stored) <= len(printed) + 1  # at most the label being written when killed, and never half of one
    for position, annotation_id in enumerate(printed):
        assert stored[annotation_id].note == f"crash {position}"
    after = reopened.add(label()).id or 0  # still writable after the crash; ids are never reused
    # (SQLite hands out the next id; PostgreSQL's sequence may skip the one the killed transaction drew)
    assert after == max(stored) + 1 if store.path is not None else after > max(stored)


# --------------------------------------------------------------------------- review and schema migration


V1_SCHEMA = """
CREATE TABLE annotations (
    id INTEGER PRIMARY KEY AUTOINCREMENT, dataset TEXT NOT NULL, task TEXT NOT NULL, query_id TEXT NOT NULL,
    doc_id TEXT, system TEXT NOT NULL DEFAULT '', failure_type TEXT NOT NULL, note TEXT NOT NULL DEFAULT '',
    annotator TEXT NOT NULL CHECK (annotator <> ''), created_at TEXT NOT NULL,
    accepted INTEGER NOT NULL DEFAULT 1 CHECK (accepted IN (0, 1))
);
CREATE INDEX annotations_by_query ON annotations (dataset, task, query_id);
PRAGMA user_version = 1;
"""


def test_a_schema_1_store_is_migrated_and_keeps_every_row(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(V1_SCHEMA)
    rows = [
        (DATASET, TASK, "q1", "d1", "bm25", "relevant_unjudged", "old", "alice", "2024-01-01T00:00:00.000000Z", 1),
        (DATASET, TASK, "q1", "d2", "bm25", "relevant_unjudged", "", "bob", "2024-01-02T00:00:00.000000Z", 0),
        (DATASET, TASK, "q2", None, "", "rewrite_hallucination", "", "bob", "2024-01-03T00:00:00.000000Z", 1),
    ]
    conn.executemany(
        "INSERT INTO annotations (dataset, task, query_id, doc_id, system, failure_type, note, annotator, "
        "created_at, accepted) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.commit()
    conn.close()

    store = AnnotationStore(path)
    labels = store.list()
    assert [(a.query_id, a.doc_id, a.note, a.accepted) for a in labels] == [
        ("q1", "d1", "old", True),
        ("q1", "d2", "", False),
        ("q2", None, "", True),
    ]
    assert [a.status for a in labels] == ["accepted", "proposed", "accepted"]  # accepted rows stay accepted
    assert all(a.reviewer == "" and a.rank is None and a.reviewed_at is None for a in labels)
    assert accepted_pairs(store) == {"q1": {"d1": 1}}
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    # The migrated store takes new labels with the new fields, and reopens without a second migration.
    new = store.add(label(query_id="q3", rank=4))
    assert AnnotationStore(path).get(new.id or 0).rank == 4 and len(AnnotationStore(path)) == 4


def test_an_acceptance_without_a_reviewer_is_imported_as_a_proposal(store: AnnotationStore) -> None:
    v1_export = asdict(label(created_at="2024-01-01T00:00:00Z"))
    v1_export.update(accepted=True)
    for name in ("rank", "reviewer", "reviewed_at"):
        v1_export.pop(name)
    reviewed = asdict(label(doc_id="d2", created_at="2024-01-01T00:00:00Z", accepted=True, reviewer="rev"))
    data = (json.dumps(v1_export) + "\n" + json.dumps(reviewed) + "\n").encode()
    report = store.import_jsonl_bytes(data, "old-export.jsonl")
    assert report.added == 2 and not report.errors
    assert {a.doc_id: a.status for a in store.list()} == {"d1": "proposed", "d2": "accepted"}
    assert accepted_pairs(store) == {"q1": {"d2": 1}}


def test_labels_record_the_rank_in_the_ranking_shown() -> None:
    assert label(rank=3).rank == 3
    for bad in (0, -1, "3", True):
        with pytest.raises(ValueError, match="rank must be a positive integer"):
            label(rank=bad)


def test_check_unjudged_refuses_a_gold_document() -> None:
    from r2med_core.judging.annotations import check_unjudged

    qrels = {"q1": {"d1": 2, "d0": 0}}
    with pytest.raises(ValueError, match=r"d1 is already judged relevant \(grade 2\) for query q1"):
        check_unjudged(label(doc_id="d1"), qrels)
    check_unjudged(label(doc_id="d0"), qrels)  # judged not relevant: an addition may overturn it
    check_unjudged(label(doc_id="d9"), qrels)
    check_unjudged(label(doc_id="d1", failure_type="gold_questionable"), qrels)  # disputing gold is fine


IMPORTER = """
import sys, time
from pathlib import Path
from r2med_core.judging.annotations import AnnotationStore

store = AnnotationStore(sys.argv[1])
go = Path(sys.argv[3])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
report = store.import_jsonl(sys.argv[2])
print(report.added, report.skipped_duplicates, flush=True)
"""


def test_two_imports_of_one_file_at_once_add_each_label_once(
    tmp_path: Path, new_target: Callable[[str], Target], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The duplicate check and the insert share the writer's lock: racing imports never double a label."""
    target = new_target("imports")
    AnnotationStore(target)  # created first, so both importers race on the rows, not the schema
    path = tmp_path / "labels.jsonl"
    rows = [asdict(label(doc_id=f"d{i}", created_at="2025-01-01T00:00:00Z")) for i in range(1200)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    monkeypatch.setattr("r2med_core.judging.annotations.IMPORT_BATCH", 500)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", IMPORTER, str(target), str(path), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    go.touch()
    added = skipped = 0
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        a, s = map(int, out.split())
        added, skipped = added + a, skipped + s
    assert (added, skipped) == (1200, 1200)
    assert sorted(a.doc_id or "" for a in AnnotationStore(target).list()) == sorted(f"d{i}" for i in range(1200))


# --------------------------------------------------------------------------- PostgreSQL


def test_postgres_store_has_the_sqlite_schema(postgres_urls: Callable[[], str]) -> None:
    import psycopg

    url = postgres_urls()
    store = AnnotationStore(url)
    assert (store.kind, store.path) == ("PostgreSQL", None)
    with psycopg.connect(url, autocommit=True) as conn:
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = 'annotations' ORDER BY ordinal_position"
        ).fetchall()
        assert tuple(c for (c,) in columns) == FIELDS
        indexes = dict(
            conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                "AND tablename = 'annotations'"
            ).fetchall()
        )
        assert "(dataset, task, query_id)" in indexes["annotations_by_query"]
        assert "(dataset, task, query_id, doc_id, annotator, created_at)" in indexes["annotations_by_content"]
        assert conn.execute("SELECT version FROM annotations_schema").fetchall() == [(SCHEMA_VERSION,)]
        # The same rules as the SQLite table: a label without annotator, or a non-boolean acceptance, is refused.
        for bad in (
            "annotator) VALUES ('d', 't', 'q', 'x', 'a', '')",
            "annotator, accepted) VALUES ('d', 't', 'q', 'x', 'a', 'n', 2)",
        ):
            with pytest.raises(psycopg.errors.CheckViolation):
                conn.execute(f"INSERT INTO annotations (dataset, task, query_id, failure_type, created_at, {bad}")
    AnnotationStore(url)  # reopening an up-to-date store changes nothing
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM annotations_schema").fetchone() == (1,)


PG_V1_SCHEMA = """
CREATE TABLE annotations (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, dataset TEXT NOT NULL, task TEXT NOT NULL,
    query_id TEXT NOT NULL, doc_id TEXT, system TEXT NOT NULL DEFAULT '', failure_type TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT '', annotator TEXT NOT NULL CHECK (annotator <> ''), created_at TEXT NOT NULL,
    accepted INTEGER NOT NULL DEFAULT 1 CHECK (accepted IN (0, 1))
)
"""


def test_a_postgres_schema_1_table_is_migrated_and_keeps_every_row(postgres_urls: Callable[[], str]) -> None:
    import psycopg

    url = postgres_urls()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PG_V1_SCHEMA)
        conn.execute(
            "INSERT INTO annotations (dataset, task, query_id, doc_id, system, failure_type, note, annotator, "
            "created_at, accepted) VALUES (%s, %s, 'q1', 'd1', 'bm25', 'relevant_unjudged', 'old', 'alice', "
            "'2024-01-01T00:00:00.000000Z', 1), (%s, %s, 'q2', NULL, '', 'rewrite_hallucination', '', 'bob', "
            "'2024-01-03T00:00:00.000000Z', 0)",
            (DATASET, TASK, DATASET, TASK),
        )
    store = AnnotationStore(url)
    labels = store.list()
    assert [(a.query_id, a.doc_id, a.note, a.status) for a in labels] == [
        ("q1", "d1", "old", "accepted"),
        ("q2", None, "", "proposed"),
    ]
    assert all(a.reviewer == "" and a.rank is None and a.reviewed_at is None for a in labels)
    assert accepted_pairs(store) == {"q1": {"d1": 1}}
    new = store.add(label(query_id="q3", rank=4))
    assert AnnotationStore(url).get(new.id or 0).rank == 4 and len(AnnotationStore(url)) == 3
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM annotations_schema").fetchall() == [(SCHEMA_VERSION,)]


def test_a_postgres_table_that_is_not_a_store_is_reported_and_left_alone(postgres_urls: Callable[[], str]) -> None:
    import psycopg

    url = postgres_urls()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE annotations (patient TEXT)")
        conn.execute("INSERT INTO annotations VALUES ('someone else''s data')")
        conn.execute("CREATE TABLE unrelated (x INTEGER)")
    with pytest.raises(AnnotationStoreError, match=r"annotations table is not .*lacks column") as err:
        AnnotationStore(url)
    assert "left untouched" in str(err.value) and str(err.value).startswith("postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1"
        ).fetchall()
        assert tables == [("annotations",), ("unrelated",)]  # no schema table, no index added
        assert conn.execute("SELECT * FROM annotations").fetchall() == [("someone else's data",)]
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema()").fetchone() == (0,)

    other = postgres_urls()  # other tables in the schema are fine: the store only uses its own two
    with psycopg.connect(other, autocommit=True) as conn:
        conn.execute("CREATE TABLE unrelated (x INTEGER)")
    assert len(AnnotationStore(other)) == 0

    newer = postgres_urls()
    AnnotationStore(newer).add(label())
    with psycopg.connect(newer, autocommit=True) as conn:
        conn.execute("UPDATE annotations_schema SET version = 99")
    with pytest.raises(AnnotationStoreError, match=r"newer version of R2MED Explorer \(schema 99"):
        AnnotationStore(newer)


def test_a_missing_schema_is_a_clear_error(postgres_cluster: object) -> None:
    url = postgres_cluster.socket_url("no_such_schema")  # type: ignore[attr-defined]
    with pytest.raises(AnnotationStoreError, match="no schema to create the annotations table in"):
        AnnotationStore(url)


def test_the_password_in_the_url_is_used_but_never_shown(postgres_cluster: object, postgres_urls: object) -> None:
    from tests.pg_cluster import PASSWORD

    cluster = postgres_cluster
    url = cluster.tcp_url(schema="public")  # type: ignore[attr-defined]
    store = AnnotationStore(url)  # over TCP the server checks the password
    stored = store.add(label())
    assert store.get(stored.id or 0) == stored
    port = cluster.port  # type: ignore[attr-defined]
    assert store.location == f"postgresql://127.0.0.1:{port}/r2med"
    for shown in (store.location, repr(store), str(store.to_dataframe())):
        assert PASSWORD not in shown and "r2med:" not in shown and "s3cret" not in shown

    wrong = cluster.tcp_url(password="Wr0ng-guess")  # type: ignore[attr-defined]
    with pytest.raises(AnnotationStoreError) as err:
        AnnotationStore(wrong)
    message = str(err.value)
    assert message.startswith(f"postgresql://127.0.0.1:{port}/r2med: cannot connect")
    assert "password authentication failed" in message
    assert "Wr0ng" not in message and err.value.__cause__ is None and err.value.__suppress_context__
    with pytest.raises(AnnotationStoreError) as err:
        AnnotationStore(f"postgresql://r2med:{PASSWORD.replace(':', '%3A').replace('@', '%40')}@127.0.0.1:1/r2med")
    assert "s3cret" not in str(err.value) and "127.0.0.1:1/r2med" in str(err.value)


def test_psycopg_is_needed_only_for_postgres(monkeypatch: pytest.MonkeyPatch, data_home: Path) -> None:
    code = (
        "import sys\nfrom r2med_core.judging.annotations import AnnotationStore\n"
        f"AnnotationStore({str(data_home / 'a.sqlite')!r}).list()\nprint('psycopg' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.strip() == "False", done.stderr
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if it were not installed
    with pytest.raises(AnnotationStoreError, match=r"needs psycopg .*pip install 'psycopg\[binary\]'") as err:
        AnnotationStore("postgresql://annotator:hunter2@db.example.org:5432/labels")
    assert str(err.value).startswith("postgresql://db.example.org:5432/labels:") and "hunter2" not in str(err.value)


def test_the_url_variable_chooses_the_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, data_home: Path) -> None:
    from r2med_core.judging.annotations import default_store_target
    from r2med_core.judging.stores import redact_url

    assert default_store_target() == data_home / "annotations.sqlite"  # unset: SQLite, the default
    monkeypatch.setenv(URL_ENV, f"sqlite://{tmp_path}/team/labels.sqlite")
    assert AnnotationStore().path == tmp_path / "team" / "labels.sqlite"
    monkeypatch.setenv(URL_ENV, str(tmp_path / "plain.sqlite"))
    assert AnnotationStore().kind == "SQLite" and AnnotationStore().path == tmp_path / "plain.sqlite"
    monkeypatch.setenv(URL_ENV, "mysql://root:hunter2@db/labels")
    with pytest.raises(AnnotationStoreError, match="R2MED_ANNOTATIONS_URL: unsupported scheme 'mysql'") as err:
        AnnotationStore()
    assert "hunter2" not in str(err.value)
    assert redact_url("postgresql://u:p%40ss@db.example.org:5433/labels?sslmode=require&password=x") == (
        "postgresql://db.example.org:5433/labels"
    )
    assert redact_url("postgres://u@/labels?host=/run/pg&user=u&password=x&port=5") == (
        "postgres:///labels?host=/run/pg&port=5"
    )


def test_a_role_with_only_row_rights_uses_an_existing_store(postgres_urls: Callable[[], str]) -> None:
    """Once the schema exists, annotators need SELECT, INSERT, UPDATE, DELETE, not CREATE (as the README says)."""
    import psycopg

    url = postgres_urls()
    owner = AnnotationStore(url)
    owner.add(label())
    schema = re.search(r"search_path%3D(\w+)", url).group(1)  # type: ignore[union-attr]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS annotator_only")
        conn.execute("CREATE ROLE annotator_only LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO annotator_only")
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO annotator_only")
    limited = url.replace("postgresql://r2med@", "postgresql://annotator_only@")
    try:
        store = AnnotationStore(limited)
        added = store.add(label(doc_id="d2", annotator="bob"))
        assert store.review(added.id or 0, True, "rev").status == "accepted"
        assert store.import_jsonl_bytes(owner.jsonl_text().encode()).skipped_duplicates == 2
        store.delete(added.id or 0)
        assert [a.doc_id for a in store.list()] == ["d1"]
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM annotator_only")
            conn.execute(f"REVOKE ALL ON SCHEMA {schema} FROM annotator_only")
            conn.execute("DROP ROLE annotator_only")


def test_the_blind_flag_is_stored_exported_and_imported(store: AnnotationStore, tmp_path: Path) -> None:
    blind = store.add(label(blind=True))
    seen = store.add(label(annotator="bob"))
    assert store.get(blind.id).blind is True and store.get(seen.id).blind is False
    for export, load in ((store.export_jsonl, "import_jsonl"), (store.export_csv, "import_csv")):
        path = export(tmp_path / f"labels.{load[7:]}")
        fresh = AnnotationStore(tmp_path / f"{load}.sqlite")
        assert getattr(fresh, load)(path).added == 2
        assert [a.blind for a in fresh.list()] == [True, False]
    with pytest.raises(ValueError, match="blind must be True or False"):
        label(blind="yes")


def test_the_time_spent_on_a_label_is_stored_exported_and_imported(tmp_path: Path) -> None:
    """Issue 28 item 7: a grade keeps how long its document was shown (``time_ms``); a schema-5 store gains
    the column with its labels kept (no time), and exports carry the time back in."""
    path = tmp_path / "v5.sqlite"
    AnnotationStore(path).add(label(query_id="q1", doc_id="d1"))
    with sqlite3.connect(path) as conn:  # as a schema-5 store was: no time_ms column
        conn.execute("ALTER TABLE annotations DROP COLUMN time_ms")
        conn.execute("PRAGMA user_version = 5")
    store = AnnotationStore(path)
    assert [(a.doc_id, a.time_ms) for a in store.list()] == [("d1", None)]
    store.add(label(query_id="q1", doc_id="d2", time_ms=4200))
    for export, load in ((store.export_jsonl, "import_jsonl"), (store.export_csv, "import_csv")):
        fresh = AnnotationStore(tmp_path / f"fresh-{load}.sqlite")
        getattr(fresh, load)(export(tmp_path / f"labels-{load}"))
        assert sorted((a.doc_id, a.time_ms) for a in fresh.list()) == [("d1", None), ("d2", 4200)]
    for bad in (-1, 1.5, "4200"):
        with pytest.raises(ValueError, match="time_ms must be a whole number of 0 or more"):
            label(time_ms=bad)
