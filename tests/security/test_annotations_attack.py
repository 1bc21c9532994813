"""Attacks on the annotation store and the Annotations page (issue 9, items 2, 5 and 9).

A visitor controls an upload's name, size and content; another tool (or an older version) may have
written rows the app would not write; a bulk import runs while annotators are saving.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pytest

from r2med_app.views.markup import md
from r2med_core.judging.annotations import Annotation, AnnotationStore, AnnotationStoreError

from ..test_annotations import WRITER, label
from ..test_app import by_label, open_app, save_label

REPO = Path(__file__).resolve().parents[2]


def _line(**overrides: object) -> str:
    return json.dumps(asdict(label(created_at="2025-01-01T00:00:00Z", **overrides)))


def _upload(at, name: str, content: bytes) -> None:  # type: ignore[no-untyped-def]
    at.file_uploader(key="w_ann_upload").upload(name, content, "application/jsonl").run()
    at.button(key="w_ann_import").click().run()


# --------------------------------------------------------------------------- item 2: the upload's name and size


@pytest.mark.parametrize("shape", ["absolute", "relative"])
def test_an_upload_name_never_becomes_a_path(tmp_path: Path, shape: str) -> None:
    target = tmp_path / "escaped.jsonl"
    # "relative" climbs out of any temporary folder to the filesystem root, then back down to the target.
    name = str(target) if shape == "absolute" else "../" * 12 + str(target).lstrip("/")
    at = open_app("annotations")
    _upload(at, name, (_line(doc_id="d1") + "\n" + _line(doc_id="d2") + "\n").encode())
    assert not at.exception, [e.value for e in at.exception]
    assert not target.exists(), "the upload was written where its client-supplied name pointed"
    assert {a.doc_id for a in AnnotationStore().list()} == {"d1", "d2"}  # read from memory instead
    assert any("Imported 2 labels" in s.value for s in at.success)


def test_an_upload_over_the_size_limit_is_refused_with_a_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_UPLOAD_MAX_MB", "0.001")  # ≈ 1 KB
    at = open_app("annotations")
    big = ("\n".join(_line(doc_id=f"d{i}") for i in range(40)) + "\n").encode()
    assert len(big) > 1100
    _upload(at, "big.jsonl", big)
    assert not at.exception
    assert any("over the" in e.value and "upload limit" in e.value for e in at.error)
    assert len(AnnotationStore()) == 0


def test_the_core_import_refuses_over_the_limit_and_names_no_path() -> None:
    from r2med_core.data import DataError

    store = AnnotationStore()
    with pytest.raises(DataError, match="upload limit"):
        store.import_jsonl_bytes(b"x" * 2000, "../../etc/x.jsonl", max_bytes=1000)
    assert len(store) == 0


# --------------------------------------------------------------------------- item 5: any stored row renders


def test_a_stored_row_the_app_would_not_write_is_flagged_and_deletable() -> None:
    store = AnnotationStore()
    # An accepted addition whose document id has whitespace (as an older version or another tool wrote it)
    # made the page raise on every visit (the TREC export refused it).
    bad = store.add(
        label(
            doc_id="doc with space",
            accepted=True,
            reviewer="legacy",
            task="clinical-evidence",
            dataset="demo:clinical-evidence",
        )
    )
    good = store.add(
        label(doc_id="d7", accepted=True, reviewer="rev", task="clinical-evidence", dataset="demo:clinical-evidence")
    )
    import sqlite3

    with sqlite3.connect(store.path) as conn:  # a failure type this version does not know, written directly
        conn.execute(
            "INSERT INTO annotations (dataset, task, query_id, doc_id, system, failure_type, note, annotator, "
            "created_at, accepted) VALUES ('demo:clinical-evidence', 'clinical-evidence', 'q1', NULL, '', "
            "'from_the_future', '', 'zed', 'not a time', 0)"
        )
    at = open_app("annotations", task="clinical-evidence")
    assert not at.exception, [e.value for e in at.exception]
    assert any("2 stored label(s) break a rule" in w.value for w in at.warning)
    assert at.get("download_button"), "the export widgets must still be drawn"
    assert at.file_uploader(key="w_ann_upload") is not None
    # The team's qrels cannot be written as TREC with that id: said where the download would be, never raised.
    team_download = "Team qrels for clinical-evidence (TREC)"
    assert any("doc with space" in e.value and "cannot hold" in e.value for e in at.error)
    assert team_download not in {b.proto.label for b in at.get("download_button")}
    at.selectbox(key="w_ann_flagged").set_value(bad.id).run()
    at.button(key="w_ann_flag_delete").click().run()
    assert not at.exception
    assert team_download in {b.proto.label for b in at.get("download_button")}
    assert bad.id not in {a.id for a in store.list()} and good.id in {a.id for a in store.list()}
    assert any("1 stored label(s) break a rule" in w.value for w in at.warning)


# --------------------------------------------------------------------------- item 9: imports never lose work


def test_one_bad_line_never_aborts_an_import() -> None:
    at = open_app("annotations")
    content = "\n".join(
        [
            _line(doc_id="d1"),
            "{broken",
            _line(doc_id="d2"),
            '{"dataset": 1}',
            _line(doc_id="d3"),
            "[" * 100_000,  # nesting deep enough to exhaust the parser's recursion
            json.dumps({**json.loads(_line(doc_id="d4")), "note": "\ud800"}),  # a lone surrogate SQLite cannot store
        ]
    )
    _upload(at, "mixed.jsonl", content.encode())
    assert not at.exception
    assert {a.doc_id for a in AnnotationStore().list()} == {"d1", "d2", "d3"}
    errors = [e.value for e in at.error]
    assert any(e.startswith(md("mixed.jsonl:2: malformed JSON")) for e in errors), errors
    assert any(e.startswith(md('mixed.jsonl:4: missing field(s) "task"')) for e in errors), errors
    assert any(e.startswith(md("mixed.jsonl:6: JSON nested too deeply")) for e in errors), errors
    assert any(e.startswith(md("mixed.jsonl:7:")) and "surrogate" in e for e in errors), errors
    assert any("Imported 3 labels" in s.value and "4 line(s) could not be read" in s.value for s in at.success)


#: An importer process. After its first committed write it waits (up to a minute) until an annotator's save
#: is in, so the test does not depend on how fast this machine imports: if the import held the write lock
#: throughout, its first commit would come only at the end and every save would follow the whole import.
IMPORTER = """
import sys, time
from contextlib import contextmanager
from r2med_core.judging.annotations import AnnotationStore

store = AnnotationStore(sys.argv[1])
opened = store._connection
commits = 0

@contextmanager
def pausing_after_first_commit(write=False):
    global commits
    with opened(write) as conn:
        yield conn
    if write:
        commits += 1
        if commits == 1:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not store.list(annotator="w0"):
                time.sleep(0.01)

store._connection = pausing_after_first_commit
report = store.import_jsonl(sys.argv[2])
print(report.added, flush=True)
"""


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def test_a_large_import_lets_concurrent_saves_through(tmp_path: Path, new_target: Callable[[str], str | Path]) -> None:
    """A bulk import in one process while eight annotators save in eight others: every save succeeds,
    and saves land *during* the import (its rows go in short batches, not one long transaction), in the
    SQLite file and in PostgreSQL alike."""
    path = new_target("shared")
    AnnotationStore(path)
    rows = 30_000
    bulk = tmp_path / "bulk.jsonl"
    bulk.write_text(
        "".join(_line(doc_id=f"bulk{i}", query_id=f"q{i % 300}", annotator="bulk") + "\n" for i in range(rows))
    )
    go = tmp_path / "go"
    writers = []
    for n in range(8):
        proc = _python(WRITER, str(path), f"w{n}", "5", str(go))
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        writers.append(proc)
    importer = _python(IMPORTER, str(path), str(bulk))
    deadline = time.monotonic() + 120
    while len(AnnotationStore(path)) == 0:  # the first batch is in: the import is under way
        assert importer.poll() is None, importer.stderr.read() if importer.stderr else ""
        assert time.monotonic() < deadline, "the import never committed a batch"
        time.sleep(0.05)
    go.touch()
    saved = []
    for proc in writers:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err  # no "database is locked"
        saved += [int(x) for x in out.split()]
    out, err = importer.communicate(timeout=600)
    assert importer.returncode == 0, err
    assert int(out) == rows and len(saved) == 40
    store = AnnotationStore(path)
    bulk_ids = [a.id for a in store.list(annotator="bulk")]
    assert len(bulk_ids) == rows and len(store) == rows + 40
    assert min(saved) < max(bulk_ids), "every save waited for the whole import: the write lock was held throughout"


def test_a_failed_save_in_the_app_shows_a_message_and_keeps_the_note(monkeypatch: pytest.MonkeyPatch) -> None:
    def locked(self: AnnotationStore, annotation: Annotation) -> Annotation:
        raise AnnotationStoreError(f"{self.path}: database is locked")

    at = open_app("explorer", task="clinical-evidence", system="bm25")
    working = AnnotationStore.add
    monkeypatch.setattr(AnnotationStore, "add", locked)
    by_label(at.selectbox, "Failure type").set_value("missing_reasoning_step")
    by_label(at.text_area, "Note").input("twenty minutes of careful reading")
    at.text_input(key="w_annotator").input("Dr. Test")
    save_label(at)
    assert not at.exception, [e.value for e in at.exception]
    assert any("database is locked" in e.value and "Your note is kept" in e.value for e in at.error)
    assert by_label(at.text_area, "Note").value == "twenty minutes of careful reading"
    assert by_label(at.selectbox, "Failure type").value == "missing_reasoning_step"
    monkeypatch.setattr(AnnotationStore, "add", working)  # (not undo(): that would drop the test's data folder)
    save_label(at)  # the store is back: the same form saves
    assert [a.note for a in AnnotationStore().list()] == ["twenty minutes of careful reading"]
