"""Issue 36's browser walk, the layout items, measured in headless Chromium on a real ``streamlit run``
server at 1000 px (the sidebar folded) and 1440 px (open), with a team's labels in its store: the tables of
the judging pages show the columns that matter (Adjudication's agreement table and Hard items whole,
wrapped; the table of every label with the unit and its label first and pinned), the explorer's gold table
whole and its retrieved preview readable, the Annotations chart says what it counts and shows each label
whole, Compare's y = x line runs at 45°, the diagnosis bars count whole queries from 0, and the Provenance
popover wraps its values inside itself.

    python -m pytest tests/test_browser_layout.py -q
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page

from r2med_app.views.markup import WORD_JOINER
from r2med_core import load_demo, run_system
from r2med_core.analysis.explore import gold_rows
from r2med_core.judging.adjudication import decide, history
from r2med_core.judging.agreement import agreement_report
from r2med_core.judging.annotations import STORE_FILE, Annotation, AnnotationStore
from r2med_core.judging.hard import hard_items
from r2med_core.reporting.review_tables import LABEL_KEY_COLUMNS, agreement_table, hard_table, label_counts
from tests.test_browser import SCREENSHOTS, browser, chromium, eventually, settle, streamlit_server
from tests.test_browser_fit import _cut, _page, _table_under

__all__ = ["browser", "chromium"]  # the fixtures, shared with test_browser.py

pytestmark = pytest.mark.browser

TASK = "clinical-case"
WIDTHS = [1000, 1440]
ANNOTATORS = ("annotator-alice", "annotator-bob", "annotator-carol")
#: A document id a visitor's import could hold: shown as written, never as a link or bold.
HOSTILE_DOC = "**bold**_[link](https://example.org/x)"


def _seed(store: AnnotationStore) -> None:
    """Three annotators grade four documents of six queries each (timed), two label each query's failure,
    five disagreements are decided; one document id is written as Markdown."""
    dataset = load_demo(TASK)
    rnd = random.Random(3)
    units = []
    for qid in list(dataset.queries)[:6]:
        for doc in rnd.sample(sorted(dataset.corpus), 4):
            units.append((qid, doc))
        for who in ANNOTATORS[:2]:
            store.add(
                Annotation(dataset=dataset.source, task=TASK, query_id=qid, system="bm25", annotator=who, blind=True,
                           failure_type=rnd.choice(["missing_reasoning_step", "other"]))
            )  # fmt: skip
    for who, grade in zip(ANNOTATORS, (0, 1, 2)):  # the hardest of all: the longest read, nobody agrees
        store.add(
            Annotation(dataset=dataset.source, task=TASK, query_id=units[0][0], doc_id=HOSTILE_DOC, system="bm25",
                       annotator=who, blind=True, failure_type=f"grade_{grade}", time_ms=300_000)
        )  # fmt: skip
    for qid, doc in units:
        for who in ANNOTATORS:
            store.add(
                Annotation(dataset=dataset.source, task=TASK, query_id=qid, doc_id=doc, system="bm25", annotator=who,
                           blind=True, failure_type=f"grade_{rnd.choice([0, 1, 2])}", time_ms=rnd.randint(3000, 90000),
                           note="a long note on why this document is graded as it is" if rnd.random() < 0.3 else "")
            )  # fmt: skip
    for qid, doc in units[:5]:
        decide(store, (dataset.source, TASK, qid, doc), "grade_1", "reviewer-dana", grade=1, reason="agreed")


@pytest.fixture(scope="module")
def team_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, AnnotationStore]]:
    """A server whose store (in its data folder) holds the team's labels; its URL and the store."""
    work = tmp_path_factory.mktemp("layout-app")
    store = AnnotationStore(work / "data" / STORE_FILE)
    _seed(store)
    with streamlit_server(work, {}) as base:
        yield base, store


@pytest.fixture(scope="module")
def app_url(team_store: tuple[str, AnnotationStore]) -> str:
    return team_store[0]


@contextmanager
def _opened(browser: Browser, base: str, width: int, url: str, last: str) -> Iterator[Page]:
    """A page ``width`` px wide at ``url``, settled once it drew ``last``; closed after."""
    page = _page(browser, base, width)
    try:
        page.goto(url)
        settle(page, last)
        yield page
    finally:
        page.context.close()


def _cells(table: dict, header: str) -> list[str]:
    """One column's cells of a measured HTML table (``_OVERFLOW_JS``), below its header row, as a reader sees them
    (without the invisible word joiner ``markup.md`` puts in a bare link to break it)."""
    rows = table["rows"]
    at = rows[0].index(header)
    return [row[at].replace(WORD_JOINER, "") for row in rows[1:]]


@pytest.mark.parametrize("width", WIDTHS)
def test_adjudication_shows_agreement_and_hard_items_whole(
    browser: Browser, team_store: tuple[str, AnnotationStore], width: int
) -> None:
    """Issue 36: at 1000 and 1440 px the agreement table (kappa after was past the edge at 1000 px) and Hard
    items (its last columns clipped) read whole in the page's column, with the core's values; a document id
    written as Markdown is shown as written."""
    base, store = team_store
    labels = store.list()
    expected_agreement = agreement_table(agreement_report(labels, history(store)))
    expected_hard = hard_table(hard_items(labels))
    with _opened(browser, base, width, f"/adjudication?task={TASK}&systems=bm25", "Agreement report (CSV)") as page:
        page.wait_for_timeout(500)
        agreement = _table_under(page, "Agreement before and after adjudication")
        hard = _table_under(page, "Hard items")
        for found in (agreement, hard):
            assert found["kind"] == "stTable" and not _cut(found), f"cut at {width} px: {found['heads']}"
        assert agreement["rows"][0] == list(expected_agreement.columns)
        assert _cells(agreement, "kappa after") == list(expected_agreement["kappa after"])
        assert _cells(agreement, "annotators") == list(expected_agreement["annotators"])
        assert hard["rows"][0] == list(expected_hard.columns)
        assert _cells(hard, "hardness") == list(expected_hard["hardness"])
        assert _cells(hard, "document") == list(expected_hard["document"])  # the hostile id among them, as written
        assert HOSTILE_DOC in _cells(hard, "document")
        tables = page.locator('[data-testid="stTable"]')
        assert tables.locator("strong, em, a").count() == 0  # no Markdown obeyed, not even a bare address linked
        page.get_by_role("heading", name="Hard items").first.scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENSHOTS / f"adjudication-tables-{width}.png"))


#: The headers of a data grid's columns drawn now (the grid draws only those in view, and its pinned ones).
_GRID_HEADS_JS = "grid => [...grid.querySelectorAll('th')].map(th => th.innerText.trim())"


@pytest.mark.parametrize("width", WIDTHS)
def test_annotations_shows_what_each_label_says_first_and_a_chart_that_says_what_it_counts(
    browser: Browser, team_store: tuple[str, AnnotationStore], width: int
) -> None:
    """Issue 36: at 1000 and 1440 px the table of every label spans the page's column and opens on the
    unit and what was said (query, document, label), then who and the review state; scrolled to its far
    right, the unit and label stay pinned in view. The chart beside (or under) it counts grades and failure
    types, says so, and shows every label whole ("rade 0: not relevant" was cut)."""
    base, store = team_store
    counts = label_counts(a.failure_type for a in store.list())
    with _opened(browser, base, width, f"/annotations?task={TASK}&systems=bm25", "Export and import") as page:
        page.wait_for_timeout(1000)  # the grid sizes its columns after drawing
        main = page.locator('[data-testid="stMainBlockContainer"]').bounding_box()
        grid = page.locator('[data-testid="stDataFrame"]').filter(
            has=page.locator("th", has_text=re.compile(r"^label$"))
        )
        grid.first.wait_for(timeout=30_000)
        assert grid.count() == 1
        grid.scroll_into_view_if_needed()
        box = grid.bounding_box()
        assert main is not None and box is not None
        assert box["width"] >= main["width"] - 2 * 80 - 2, "the labels table does not span the page's column"
        heads = grid.evaluate(_GRID_HEADS_JS)
        assert heads[:5] == [*LABEL_KEY_COLUMNS, "annotator", "status"], heads
        grid.evaluate("g => { const s = g.querySelector('.dvn-scroller'); s.scrollLeft = s.scrollWidth; }")

        def scrolled_right() -> None:
            scrolled = grid.evaluate(_GRID_HEADS_JS)
            assert "id" in scrolled and set(LABEL_KEY_COLUMNS) <= set(scrolled), scrolled  # far right, key ones pinned

        eventually(page, scrolled_right)
        page.screenshot(path=str(SCREENSHOTS / f"annotations-labels-{width}.png"))

        chart = page.locator(".st-key-annotation_counts .js-plotly-plot").first
        chart.scroll_into_view_if_needed()
        title = eventually(page, lambda: chart.evaluate("d => d._fullLayout.title.text"))
        assert "grade" in title.lower() and "failure type" in title.lower(), title

        def labels_whole() -> None:
            ticks = chart.evaluate(
                """d => [...d.querySelectorAll('.ytick text')].map(t => ({text: t.textContent,
                     left: t.getBoundingClientRect().left - d.getBoundingClientRect().left}))"""
            )
            assert sorted(t["text"] for t in ticks) == sorted(counts["label"]), ticks  # every label, none skipped
            assert min(t["left"] for t in ticks) >= 0, f"a label is cut at the chart's left edge: {ticks}"

        eventually(page, labels_whole)
        chart.screenshot(path=str(SCREENSHOTS / f"annotations-chart-{width}.png"))


@pytest.mark.parametrize("width", WIDTHS)
def test_the_explorers_gold_table_reads_whole_and_the_preview_has_room(
    browser: Browser, app_url: str, width: int
) -> None:
    """Issue 36: with a rewrite on, at 1000 and 1440 px the gold table (its "effect" was cut to "effe…" at
    1440 px) reads whole with each document's effect, and the retrieved preview column has room to read
    (it was squeezed to ~70 px beside the gold panel): the panels stack where a half is too narrow."""
    url = f"/explorer?task={TASK}&systems=bm25&system=bm25&q=3&rewrite=hyde:smollm2-135m"
    with _opened(browser, app_url, width, url, "Retrieved top 10") as page:
        page.wait_for_timeout(500)
        gold = _table_under(page, "Gold documents")
        assert gold["kind"] == "stTable" and not _cut(gold), f"cut at {width} px: {gold['heads']}"
        assert gold["rows"][0][-2:] == ["with rewrite", "effect"]
        dataset = load_demo(TASK)
        rows = gold_rows(dataset, run_system(dataset, "bm25"), "3", run_system(dataset, "bm25+hyde:smollm2-135m"), None)
        assert _cells(gold, "effect") == [row.rewrite_effect for row in rows]  # "lost", "up 32", "rescued"
        retrieved = (
            page.get_by_role("heading", name=re.compile("Retrieved top 10"))
            .locator("xpath=following::*[@data-testid='stTable']")
            .first
        )
        widths = retrieved.evaluate(
            "t => Object.fromEntries([...t.querySelectorAll('th')].map(th => [th.innerText.trim(), "
            "th.getBoundingClientRect().width]))"
        )
        assert widths["preview"] >= 300, f"the preview is {widths['preview']:.0f} px wide at {width} px"
        page.get_by_role("heading", name=re.compile("Gold documents")).first.scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENSHOTS / f"explorer-gold-{width}.png"))  # the main area scrolls, not the page


_AXES_JS = """d => { const L = d._fullLayout;
  return {x: L.xaxis.range, y: L.yaxis.range, xpx: L.xaxis._length, ypx: L.yaxis._length}; }"""


def _plotly(page: Page, within: str) -> tuple[Locator, dict]:
    """The Plotly chart inside ``within`` (a CSS selector), scrolled into view, and its axes (``_AXES_JS``)."""
    chart = page.locator(f"{within} .js-plotly-plot").first
    chart.scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    return chart, chart.evaluate(_AXES_JS)


@pytest.mark.parametrize("width", WIDTHS)
def test_compares_y_equals_x_runs_at_45_degrees(browser: Browser, app_url: str, width: int) -> None:
    """Issue 36: the scatter of the system's score against the baseline's has the same range on both axes,
    drawn the same length, so its y = x line runs at 45° at 1000 and 1440 px."""
    url = f"/compare?task={TASK}&systems=bm25&systems=bm25s"
    with _opened(browser, app_url, width, url, "Save this comparison") as page:
        chart, axes = _plotly(page, "[class*='st-key-scatter_']")
        assert axes["x"] == axes["y"], axes
        assert abs(axes["xpx"] - axes["ypx"]) <= 1, axes  # one unit as long on both: the diagonal is at 45°
        chart.screenshot(path=str(SCREENSHOTS / f"compare-scatter-{width}.png"))


@pytest.mark.parametrize("width", WIDTHS)
def test_the_diagnosis_bars_count_whole_queries_and_provenance_wraps_its_values(
    browser: Browser, app_url: str, width: int
) -> None:
    """Issue 36: on Metrics the diagnosis bars' axis runs from 0 to the most failed queries in whole
    numbers (it ran 0–1 in tenths); the Provenance popover holds its values whole, wrapped inside it,
    within the window (they were cut at its right edge)."""
    url = f"/metrics?task={TASK}&systems=bm25&systems=bm25s"
    with _opened(browser, app_url, width, url, "Results files and runs") as page:
        chart, axes = _plotly(page, ".st-key-diagnosis_bars")
        tallest = chart.evaluate(
            """d => { const sums = {};
                 for (const t of d._fullData) t.x.forEach((x, i) => { sums[x] = (sums[x] || 0) + t.y[i]; });
                 return Math.max(...Object.values(sums)); }"""
        )
        assert axes["y"] == [0, max(1, tallest)], (axes, tallest)
        ticks = chart.evaluate("d => [...d.querySelectorAll('.ytick text')].map(t => t.textContent)")
        assert ticks and all(re.fullmatch(r"\d+", t) for t in ticks), ticks

        page.get_by_role("button", name="Provenance").last.click()
        body = page.locator('[data-testid="stPopoverBody"]').first
        body.get_by_text("packages").wait_for()
        page.wait_for_timeout(500)
        found = body.evaluate(
            """b => { const box = b.getBoundingClientRect();
                 const cells = [...b.querySelectorAll('td')];
                 return {right: box.right, view: window.innerWidth, cells: cells.length,
                         over: Math.max(...cells.map(c => c.getBoundingClientRect().right)) - box.right,
                         cut: cells.filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.innerText)}; }"""
        )
        assert found["cells"] >= 8 and found["over"] <= 0 and found["cut"] == [], found
        assert found["right"] <= found["view"], found
        page.screenshot(path=str(SCREENSHOTS / f"metrics-provenance-{width}.png"))


def test_the_seeded_store_has_what_the_walk_needs(team_store: tuple[str, AnnotationStore]) -> None:
    """The fixture itself: disagreements with times (hard items), decisions and both kinds of label."""
    _, store = team_store
    labels = store.list()
    assert hard_items(labels) and history(store)
    assert set(label_counts(a.failure_type for a in labels)["ratings"]) == {"grade", "failure type"}
    assert Path(store.path or "").name == STORE_FILE
