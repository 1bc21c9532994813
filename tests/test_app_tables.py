"""Every HTML table the app draws goes through ``markup.table``, which escapes its cells, headers and index:
``st.table`` reads them as Markdown, and they carry names a visitor chose (an imported run's). A bare
``www.…`` is a link in GitHub-flavoured Markdown even escaped, so ``markup.md`` breaks it with a word joiner."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from r2med_app.views.markup import WORD_JOINER, md
from r2med_core import load_demo, run_system
from r2med_core.runs import format_trec

from .test_app import open_app

APP = Path(__file__).resolve().parents[1] / "r2med_app"
TASK = "clinical-evidence"
#: The most hostile name an imported run can have (names are letters, digits and ``._-``): GitHub-flavoured
#: Markdown makes ``www.example.invalid`` a link, escaped or not.
NAME = "www.example.invalid"
LABEL = f"Run {NAME} (imported)"


def test_no_page_draws_a_table_but_through_markup_table() -> None:
    """``st.table`` (or ``container.table``) anywhere but in ``markup.table`` would render its text as Markdown."""
    raw = []
    for path in APP.rglob("*.py"):
        if path == APP / "views" / "markup.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "table":
                if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "markup"):
                    raw.append(f"{path.relative_to(APP)}:{node.lineno}")
    assert raw == []


def test_md_breaks_bare_links_and_keeps_the_text_as_written() -> None:
    for text in ("https://example.invalid/x", "see http://example.invalid", "www.example.invalid", "WWW.Ex.invalid"):
        escaped = md(text)
        assert escaped.replace("\\", "").replace(WORD_JOINER, "") == text  # the same visible text …
        assert "://" not in escaped.replace("\\", "") and "www." not in escaped.lower().replace("\\", "")  # … unlinked
    assert md("alice@example.org") == r"alice@example\.org"  # an address stays whole (see markup._AUTOLINK)
    assert md("0.25 [0.1, 0.4]") == r"0\.25 \[0\.1, 0\.4\]"  # nothing else changes


@pytest.fixture
def hostile_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A run named ``www.example.invalid`` in the operator's runs folder (an upload's name is made the same way)."""
    folder = tmp_path / "runs" / TASK
    folder.mkdir(parents=True)
    (folder / f"{NAME}.trec").write_text(format_trec(run_system(load_demo(TASK), "bm25")), encoding="utf-8")
    monkeypatch.setenv("R2MED_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")
    return f"run:{NAME}"


def _headers(table) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(c) for c in table.value.columns] + [str(i) for i in table.value.index]


def _texts(table) -> list[str]:  # type: ignore[no-untyped-def]
    """Every text of an HTML table: headers, index labels and cells."""
    return _headers(table) + [str(cell) for cell in table.value.to_numpy().ravel()]


@pytest.mark.parametrize(
    ("page", "params", "tables"),
    [
        ("metrics", {"systems": ["bm25", "run:" + NAME]}, 2),  # the official metrics and the pooling table
        ("leaderboard", {"systems": ["bm25", "run:" + NAME]}, 1),  # "Your runs"
        ("compare", {"systems": ["bm25", "run:" + NAME]}, 1),  # the paired tests (every system in play)
    ],
)
def test_an_imported_runs_name_shows_as_written_in_every_table(
    page: str, params: dict[str, list[str]], tables: int, hostile_run: str
) -> None:
    at = open_app(page, task=TASK, **params)
    assert not at.error, [e.value for e in at.error]
    assert len([t for t in at.table if md(LABEL) in _headers(t)]) == tables  # escaped, the link broken
    shown = [text for t in at.table for text in _texts(t)]
    assert not [t for t in shown if NAME in t or NAME.replace(".", r"\.") in t]  # never the name unbroken
