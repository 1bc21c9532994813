"""The real app in headless Chromium: a Streamlit server on 127.0.0.1, driven with Playwright.

Needs Debian's /usr/bin/chromium (``apt-get install chromium``); Playwright's own browser download
is never used. Each page is saved as a full-page screenshot under ``screenshots/`` for a human look.

    python -m pytest tests/test_browser.py -q          # or: -m browser
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple, TypeVar
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Browser, FrameLocator, Page, expect, sync_playwright

from r2med_core import load_demo, run_system

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOTS = ROOT / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
VIEWPORT = {"width": 1400, "height": 1000}
MAX_SHOT_HEIGHT = 12_000  # px; a full-page screenshot taller than this is cut
STARTUP_SECONDS = 120
RENDER_MS = 120_000  # the first dense run encodes the demo corpus with MiniLM on CPU
TASK = "clinical-evidence"
SYSTEMS = "systems=bm25&systems=minilm"

# True while Streamlit runs the script (its status widget shows "Stop") or a chart has not drawn yet.
_BUSY_JS = """() => {
  const status = document.querySelector('[data-testid="stStatusWidget"]');
  if (status && /stop|running/i.test(status.innerText)) return true;
  const charts = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')];
  return charts.some(c => !c.querySelector('.main-svg'));
}"""
# Streamlit scrolls its main area, not the document, so a full-page screenshot needs its height.
_CONTENT_HEIGHT_JS = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const side = document.querySelector('[data-testid="stSidebarContent"]');
  return Math.max(main ? main.scrollHeight : 0, side ? side.scrollHeight : 0,
                  document.documentElement.scrollHeight);
}"""


#: Each app server's R2MED_DATA_HOME (its annotation store), by base URL.
APP_DATA: dict[str, Path] = {}

# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def chromium() -> Path:
    if not CHROMIUM.exists():
        message = (
            f"{CHROMIUM} not found: the browser test drives Debian's Chromium. "
            "Install it with `apt-get install chromium` (do not run `playwright install`)."
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return CHROMIUM


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextmanager
def streamlit_server(
    work: Path, env_extra: dict[str, str], secrets: Path | None = None, port: int | None = None
) -> Iterator[str]:
    """``streamlit run streamlit_app.py`` on 127.0.0.1 with its own data folder; the base URL."""
    port = port or _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("R2MED_")},
        "R2MED_CACHE_DIR": str(work / "cache"),
        "R2MED_DATA_HOME": str(work / "data"),
        "HF_HUB_OFFLINE": "1",
        "R2MED_COMPUTE_SECONDS": "100000",
        "PYTHONUNBUFFERED": "1",
        **env_extra,
    }
    command = [
        sys.executable, "-m", "streamlit", "run", "streamlit_app.py",
        "--server.address", "127.0.0.1", "--server.port", str(port), "--server.headless", "true",
        "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
        # Only the given secrets file (or none at all): never the developer's own .streamlit/secrets.toml.
        "--secrets.files", str(secrets or work / "no-secrets.toml"),
    ]  # fmt: skip
    log_path = work / "streamlit.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"streamlit exited with code {process.returncode}:\n{_log_tail(log_path)}")
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit not healthy after {STARTUP_SECONDS} s:\n{_log_tail(log_path)}")
            time.sleep(0.5)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def app_url(chromium: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``streamlit run`` on a free port with its own empty cache; stopped at the end of the module."""
    work = tmp_path_factory.mktemp("browser-app")
    with streamlit_server(work, {}) as base:
        APP_DATA[base] = work / "data"
        yield base


@pytest.fixture(scope="module")
def browser(chromium: Path) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser, app_url: str) -> Iterator[Page]:
    """A fresh browser context, hence a fresh Streamlit session."""
    context = browser.new_context(viewport=VIEWPORT, base_url=app_url)
    context.set_default_timeout(30_000)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture(scope="module")
def judged_ids() -> list[str]:
    """The explorer's query order: the demo task's judged queries, as loaded."""
    dataset = load_demo(TASK)
    return [qid for qid in dataset.queries if dataset.positives(qid)]


# --------------------------------------------------------------------------- helpers

_T = TypeVar("_T")


def eventually(page: Page, check: Callable[[], _T], timeout_ms: int = 30_000) -> _T:
    """``check()``'s value once it stops raising ``AssertionError``: for a layout that settles a moment after
    drawing (later on a loaded machine), instead of a fixed pause that a slow run outlasts."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            page.wait_for_timeout(250)


def settle(page: Page, text: str, timeout_ms: int = RENDER_MS) -> None:
    """Wait until ``text`` is visible, the script is idle and every chart has drawn (stable ~0.75 s).

    Fails at once when Streamlit shows an exception instead, with its text and a screenshot.
    """
    deadline = time.monotonic() + timeout_ms / 1000
    calm = 0
    while calm < 3:
        exceptions = page.locator('[data-testid="stException"]')
        if exceptions.count():
            shot = full_page_screenshot(page, "failure")
            raise AssertionError(f"the app raised (see {shot}):\n" + "\n".join(exceptions.all_inner_texts()))
        if time.monotonic() > deadline:
            shot = full_page_screenshot(page, "failure")
            raise AssertionError(
                f"the app did not settle within {timeout_ms / 1000:.0f} s waiting for {text!r} (see {shot})"
            )
        idle = page.get_by_text(text).first.is_visible() and not page.evaluate(_BUSY_JS)
        calm = calm + 1 if idle else 0
        page.wait_for_timeout(250)


def query_param(page: Page, name: str) -> list[str]:
    return parse_qs(urlparse(page.url).query).get(name, [])


def wait_for_param(page: Page, name: str, value: str, timeout_ms: int = 30_000) -> None:
    page.wait_for_function(
        "([name, value]) => new URLSearchParams(location.search).getAll(name).includes(value)",
        arg=[name, value],
        timeout=timeout_ms,
    )


def assert_healthy(page: Page) -> None:
    """No exception box, no error alert and no "Page not found" dialog anywhere on the page."""
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.all_inner_texts()
    errors = page.locator('[data-testid="stAlertContentError"]')
    assert errors.count() == 0, errors.all_inner_texts()
    not_found = page.get_by_role("dialog").filter(has_text="Page not found")
    assert not_found.count() == 0, f"Streamlit shows a 'Page not found' dialog (the URL is now {page.url})"


def full_page_screenshot(page: Page, name: str) -> Path:
    """Grow the viewport to the app's content height (its main area scrolls), shoot, restore."""
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    height = min(max(int(page.evaluate(_CONTENT_HEIGHT_JS)), VIEWPORT["height"]), MAX_SHOT_HEIGHT)
    page.set_viewport_size({"width": VIEWPORT["width"], "height": height})
    page.wait_for_timeout(800)  # charts and grids redraw for the new size
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(VIEWPORT)
    return path


def expander(page: Page, label: str):  # type: ignore[no-untyped-def]
    """The expander headers whose label contains ``label``."""
    return page.locator('[data-testid="stExpander"] summary').filter(has_text=label)


def assert_query_panels(page: Page, qid: str) -> None:
    """The selected query's gold and retrieved panels, with their document ids."""
    dataset = load_demo(TASK)
    page.get_by_text(f"Query {qid}", exact=True).wait_for(state="visible")
    gold = list(dataset.positives(qid))
    page.get_by_role("heading", name=re.compile(rf"Gold documents \({len(gold)}\)")).wait_for(state="visible")
    page.get_by_role("heading", name=re.compile(r"Retrieved top 10")).wait_for(state="visible")
    for doc in gold:
        assert expander(page, f"{doc} · grade").first.is_visible(), f"gold document {doc} not shown"
    top_doc, _ = run_system(dataset, "bm25").top(qid, 1)[0]
    assert expander(page, f"#1 · {top_doc} · ").first.is_visible(), f"top retrieved document {top_doc} not shown"


# --------------------------------------------------------------------------- tests


def test_the_clinician_path_from_the_landing_to_a_failures_verdict_in_one_click(page: Page) -> None:
    """Open the app, click the first failure card: the question opens with its verdict in a sentence
    (what was missed, the reasoning gap, what the real model's HyDE changed and why not more), the gold
    and retrieved documents below, and a label is saved: four clicks in all."""
    page.goto("/")
    settle(page, "Open this question")
    page.get_by_text("BM25 finds a relevant document in its top 10 for 4 of 12 questions.").wait_for()
    assert page.locator("h1").filter(has_text="R2MED Explorer").first.is_visible()
    page.get_by_role("button", name="Open this question").first.click()  # the one click
    settle(page, "Next failure")
    verdict = page.locator('[data-testid="stAlertContentWarning"]').filter(has_text="Missed:").first
    text = verdict.inner_text()
    assert "none of the 3 relevant documents is in BM25's top 10" in text
    assert "Reasoning gap: the answer, Systemic lupus erythematosus, is never named in the question" in text
    # The real model's HyDE (the demo's default rewrite), and why it did not rescue this question.
    assert "With HyDE (smollm2-135m) still none in the top 10 (ranks 19, 37, 59)." in text
    assert "Its passage never names the answer, Systemic lupus erythematosus" in text
    assert query_param(page, "q") == ["11"] and query_param(page, "task") == ["clinical-case"]
    page.get_by_role("heading", name=re.compile(r"Gold documents \(3\)")).wait_for(state="visible")
    page.get_by_role("heading", name=re.compile(r"Retrieved top 10")).wait_for(state="visible")
    full_page_screenshot(page, "landing-to-verdict")
    assert_healthy(page)
    # … and the label: clicks 2 and 3 choose the failure type, the name is typed, click 4 saves.
    _choose(page, "Failure type", "Missing reasoning step")
    page.get_by_label("Your name").fill("Dr. Path")
    page.get_by_role("button", name="Save label").click()
    page.get_by_text(re.compile(r"Saved: Missing reasoning step")).first.wait_for(timeout=RENDER_MS)


def test_a_click_anywhere_on_a_query_row_opens_it_and_folds_the_table(page: Page, judged_ids: list[str]) -> None:
    """Clicking a row's text (not the narrow checkbox) opens its query, and the table folds so the query
    is in view; a new task then opens on its own table, not on the old task's query id."""
    page.goto(f"/explorer?task={TASK}&{SYSTEMS}&system=bm25")
    settle(page, "Retrieved top 10")
    table = page.locator('[data-testid="stExpander"]').filter(has_text="All queries")
    grid = table.locator('[data-testid="stDataFrame"]')
    grid.wait_for(state="visible")
    box = grid.bounding_box()
    assert box is not None
    row_height = 35  # Streamlit's data grid: a 35 px header, then 35 px rows
    page.mouse.click(box["x"] + box["width"] * 0.75, box["y"] + row_height * 3.5)  # the third row's query text
    wait_for_param(page, "q", judged_ids[2])
    settle(page, f"Query {judged_ids[2]}")
    assert not grid.is_visible()  # folded: the opened query is what the reader sees
    assert_query_panels(page, judged_ids[2])

    _choose(page, "Demo task", "clinical-case")
    wait_for_param(page, "task", "clinical-case")
    settle(page, "Retrieved top 10")
    grid.wait_for(state="visible", timeout=10_000)  # the new task's table is open
    assert_healthy(page)


def test_explorer_selects_a_query_and_puts_it_in_the_url(page: Page, judged_ids: list[str]) -> None:
    page.goto(f"/explorer?task={TASK}&{SYSTEMS}&system=bm25")
    settle(page, "Retrieved top 10")
    assert_healthy(page)
    assert_query_panels(page, judged_ids[0])  # the first judged query opens by default

    # Next ▶ moves to the next judged query and the link follows.
    page.get_by_role("button", name="Next ▶").click()
    wait_for_param(page, "q", judged_ids[1])
    settle(page, f"Query {judged_ids[1]}")
    assert_query_panels(page, judged_ids[1])

    # The query selectbox opens any query.
    target = judged_ids[3]
    picker = page.get_by_role("combobox", name="Query")
    assert picker.input_value().startswith(f"{judged_ids[1]} · ")
    picker.click()
    page.get_by_role("option", name=re.compile(rf"^{re.escape(target)} · ")).click()
    wait_for_param(page, "q", target)
    settle(page, f"Query {target}")
    assert_query_panels(page, target)
    assert query_param(page, "q") == [target]
    assert query_param(page, "system") == ["bm25"]
    assert_healthy(page)


def test_hyde_toggle_shows_the_hypothetical_document_and_rewritten_ranks(page: Page, judged_ids: list[str]) -> None:
    qid = judged_ids[1]
    page.goto(f"/explorer?task={TASK}&{SYSTEMS}&system=bm25&q={qid}")
    settle(page, "Retrieved top 10")
    assert page.get_by_text("Hypothetical document · ").count() == 0  # (the glossary names HyDE too)
    assert page.locator('[data-testid="stTable"] th', has_text="with rewrite").count() == 0

    page.locator('[data-testid="stSidebar"]').get_by_text("HyDE / rewrite on").click()
    settle(page, "Hypothetical document · ")
    assert_healthy(page)
    # The demo's default rewrite set is the real model's, and the passage says what wrote it.
    told = page.get_by_text(re.compile(r"Hypothetical document · HyDE \(smollm2-135m\) · written by SmolLM2"))
    assert told.first.is_visible()
    header = page.locator('[data-testid="stTable"] th', has_text="with rewrite")
    assert header.count() == 1, "the gold table has no 'with rewrite' column"
    gold = list(load_demo(TASK).positives(qid))
    assert expander(page, f"{gold[0]} · grade").filter(has_text="→").first.is_visible()
    assert any(value.startswith("hyde:") for value in query_param(page, "rewrite"))
    assert query_param(page, "q") == [qid]
    full_page_screenshot(page, "explorer-hyde")


class RoutedPage(NamedTuple):
    """One page of the router (r2med_app/streamlit_app.py ``SECTIONS``) as these tests visit it."""

    path: str  # its URL path
    title: str  # its sidebar link and its h1 (the Overview's h1 is the app's name: ``heading_of``)
    params: str  # the URL after the path (QID: a judged query)
    last: str  # text the page draws last


# The router's sidebar, stated once: its sections and their pages, in the router's order.
SECTIONS: dict[str, list[RoutedPage]] = {
    "Explore questions": [
        RoutedPage("overview", "Overview", f"?task={TASK}&{SYSTEMS}", "Data source and license"),
        RoutedPage("explorer", "Query explorer", f"?task={TASK}&{SYSTEMS}&system=bm25&q=QID", "Retrieved top 10"),
        RoutedPage(
            "whatif",
            "What-if query",
            f"?task={TASK}&{SYSTEMS}&ask=young+athlete+collapses+while+sprinting",
            "in every system",
        ),
    ],
    "Score systems": [
        RoutedPage("metrics", "Metrics", f"?task={TASK}&{SYSTEMS}", "Results files and runs"),
        RoutedPage("compare", "Compare systems", f"?task={TASK}&{SYSTEMS}", "Largest gains"),
        RoutedPage("leaderboard", "Leaderboard", f"?task={TASK}&{SYSTEMS}", "Your runs on"),
        RoutedPage("rewriting", "Query rewriting", f"?task={TASK}&{SYSTEMS}", "Generate rewrites with an LLM"),
    ],
    "Judge relevance": [
        RoutedPage("judge-list", "Judge a list", f"?task={TASK}&{SYSTEMS}&system=bm25&q=QID", "rows graded"),
        RoutedPage("judging", "Judging", f"?task={TASK}&{SYSTEMS}", "Nothing to judge on this task"),
        RoutedPage("annotations", "Annotations", f"?task={TASK}&{SYSTEMS}", "Re-evaluation on"),
        RoutedPage("adjudication", "Adjudication", f"?task={TASK}&{SYSTEMS}", "Raw labels (CSV)"),
    ],
}
#: Every page by its URL path, in the sidebar's order.
PAGES = {shown.path: shown for pages in SECTIONS.values() for shown in pages}


def heading_of(name: str) -> str:
    return "R2MED Explorer" if name == "overview" else PAGES[name].title  # the Overview is the app's landing


@pytest.mark.parametrize("name", list(PAGES))
def test_every_page_renders_and_is_screenshotted(page: Page, judged_ids: list[str], name: str) -> None:
    shown = PAGES[name]
    page.goto(f"/{name}{shown.params.replace('QID', judged_ids[1])}")
    settle(page, shown.last)
    shot = full_page_screenshot(page, name)  # before the checks, so a failure can be looked at
    assert shot.stat().st_size > 10_000
    title = heading_of(name)
    heading = page.locator("h1").filter(has_text=title)
    assert heading.first.is_visible(), f"{name}: title {title!r} not shown"
    assert_healthy(page)


def test_sidebar_links_read_as_their_titles_and_the_query_table_fills_on_first_load(
    page: Page, judged_ids: list[str]
) -> None:
    """A screen reader (and a copied link) gets "Overview", not "dashboard Overview"; the explorer's
    "All queries" table has its rows on a fresh session's first load, not only its header."""
    page.goto("/explorer")
    settle(page, "judged queries")
    links = page.locator('[data-testid="stSidebarNavLink"]')
    assert [text.strip() for text in links.all_inner_texts()] == [shown.title for shown in PAGES.values()]
    grid = page.locator('[data-testid="stDataFrame"]').first
    grid.locator('[role="gridcell"]').first.wait_for(state="attached")
    assert grid.locator('[role="row"]').count() == 1 + len(judged_ids)  # header + one row per judged query
    assert judged_ids[0] in grid.locator('[role="gridcell"]').all_inner_texts()


def test_sidebar_groups_the_pages_under_section_headings_and_each_link_opens_its_page(page: Page) -> None:
    """The sidebar shows the three section headings in order, each with its own pages' links (the hidden
    Start page in none); a click on a link opens that page at its unchanged URL, its section still shown."""
    page.goto(f"/overview?task={TASK}&{SYSTEMS}")
    settle(page, "Data source and license")
    nav = page.locator('[data-testid="stSidebarNav"]')
    headers = nav.locator('[data-testid="stNavSectionHeader"]')
    assert [text.strip() for text in headers.all_inner_texts()] == list(SECTIONS)
    full_page_screenshot(page, "sidebar-sections")
    for section, pages in SECTIONS.items():
        # A section is its header's parent: the header and, below it, the section's links.
        group = headers.filter(has_text=section).locator("xpath=..")
        links = group.locator('[data-testid="stSidebarNavLink"]')
        assert [text.strip() for text in links.all_inner_texts()] == [shown.title for shown in pages], section
        for name, title, _, _ in pages:
            links.filter(has_text=re.compile(rf"^\s*{re.escape(title)}\s*$")).click()
            page.wait_for_url(re.compile(rf"/{re.escape(name)}(\?|$)"))
            page.locator("h1").filter(has_text=heading_of(name)).first.wait_for(state="visible", timeout=RENDER_MS)
            assert urlparse(page.url).path == f"/{name}"
            wait_for_param(page, "task", TASK, timeout_ms=RENDER_MS)  # the view follows (once the page ran)
    settle(page, "Raw labels (CSV)")
    assert_healthy(page)
    assert nav.locator('[data-testid="stSidebarNavLink"]').filter(has_text="Start").count() == 0
    page.goto("/")  # the hidden Start page still opens the Overview
    page.wait_for_url(re.compile(r"/overview(\?|$)"))
    settle(page, "Data source and license")
    assert_healthy(page)


# --------------------------------------------------------------------------- the triage loop


def _choose(page: Page, label: str, option: str | re.Pattern[str]) -> None:
    """Pick ``option`` in the selectbox named ``label``."""
    for attempt in range(3):  # a rerun finishing just then can close the list: open it again
        page.get_by_role("combobox", name=label).click()
        choice = page.get_by_role("option", name=option).first
        try:
            choice.wait_for(state="visible", timeout=10_000)
        except Exception:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
            continue
        choice.click()
        return


def test_the_triage_loop_end_to_end(page: Page) -> None:
    """Open the failures, step through them with Next and the J key, grade an unjudged document relevant,
    review and accept it on the Annotations page, and see the re-evaluation change."""
    from r2med_core import evaluate
    from r2med_core.analysis.explore import filter_queries, query_table, shorten

    task = "clinical-case"
    dataset = load_demo(task)
    run = run_system(dataset, "bm25")
    table = query_table(dataset, evaluate(run, dataset.qrels), run)
    failures = list(filter_queries(table, failures_only=True)["query_id"])
    assert len(failures) >= 3

    external: list[str] = []
    page.on(
        "request", lambda r: external.append(r.url) if urlparse(r.url).hostname not in ("127.0.0.1", None) else None
    )
    page.goto(f"/explorer?task={task}&systems=bm25&system=bm25")
    settle(page, "Retrieved top 10")
    assert_healthy(page)
    assert query_param(page, "task") == [task]  # the page wrote its state to the address at once

    # 1. Open the failures: the filter is in the link and the table stays open after the change.
    page.get_by_text("Failures only", exact=True).click()
    wait_for_param(page, "fail", "1")
    settle(page, f"{len(failures)} of {len(table)} judged queries")
    assert page.get_by_text("Search query text").is_visible(), "the All queries table closed after a change"
    full_page_screenshot(page, "triage-1-failures")

    # 2. Step through the filtered list: Next, then the J shortcut, then K back.
    page.get_by_role("button", name=re.compile(r"^Next ▶")).click()
    wait_for_param(page, "q", failures[0])
    settle(page, f"Query {failures[0]}")
    page.locator("h1").filter(has_text="Query explorer").click()  # focus the page, not a text field
    page.keyboard.press("j")
    wait_for_param(page, "q", failures[1])
    settle(page, f"Query {failures[1]}")
    qid = failures[1]
    picker = page.get_by_role("combobox", name="Query")
    assert picker.input_value() == f"{qid} · {shorten(dataset.queries[qid], 110)}"  # picker and body agree
    assert page.get_by_text(f"1 of {len(failures)}").count() == 0
    assert page.get_by_text(f"this query is 2 of {len(failures)} filtered queries").first.is_visible()

    # 3. Label an unjudged document of the shown ranking as relevant.
    doc, _ = next((d, s) for d, s in run.top(qid, 10) if d not in dataset.positives(qid))
    _choose(page, "Relevance grade", "Grade 1: relevant")
    _choose(page, "Document", re.compile(rf"^{re.escape(doc)}$"))
    page.get_by_label("Note").fill("answers the question; never judged")
    page.get_by_label("Your name").fill("Dr. Browser")
    page.get_by_role("button", name="Save label").click()
    settle(page, f"Saved: Grade 1: relevant on {doc}")
    assert_healthy(page)
    full_page_screenshot(page, "triage-2-labelled")

    # 4. Review and accept it; the re-evaluation uses it and says so.
    page.get_by_role("link", name="Annotations").click()
    settle(page, "Review queue")
    settle(page, "1 proposal(s) awaiting review")
    assert page.get_by_role("textbox", name="Your name").input_value() == "Dr. Browser"  # asked once per session
    full_page_screenshot(page, "triage-3-queue")
    accept = page.get_by_role("button", name="Accept")
    assert accept.is_disabled()  # nobody reviews their own label: a second person accepts it
    page.get_by_role("textbox", name="Your name").fill("Dr. Reviewer")
    page.get_by_role("textbox", name="Your name").press("Enter")
    settle(page, "1 proposal(s) awaiting review")  # the rerun with the new name has finished
    expect(accept).to_be_enabled(timeout=30_000)
    accept.click()
    settle(page, "1 accepted proposal(s)")
    assert_healthy(page)
    original = evaluate(run, dataset.qrels)
    extended = evaluate(run, {**dataset.qrels, qid: {**dataset.qrels[qid], doc: 1}})
    before, after = original.means["ndcg_at_10"], extended.means["ndcg_at_10"]
    assert after > before
    assert page.get_by_text(f"{before:.3f} → {after:.3f}").first.is_visible()
    full_page_screenshot(page, "triage-4-accepted")
    assert external == [], f"requests left this server: {external}"


def _sign(page: Page, name: str) -> FrameLocator:
    """``name`` typed as the judge's (then Enter), and the list-judging keys' frame once they may grade."""
    box = page.get_by_role("textbox", name="Your name")
    box.fill(name)
    box.press("Enter")
    frame = page.frame_locator('iframe[title*="list_judge"]')
    frame.locator("#reason").wait_for(state="hidden")
    return frame


def test_judging_a_list_by_keyboard_saves_each_grade_once_with_the_typed_name(page: Page, app_url: str) -> None:
    """Grade three rows with 2 / 0 / 1 and the arrow keys: the store holds exactly those three grades by the
    typed name, with the system and ranks shown; a rerun saves nothing again; Enter opens a document; a
    row's qrels grade appears only once it is graded (blind first)."""
    from r2med_core.judging.annotations import AnnotationStore

    task, name = "clinical-case", "Dr. Keyboard"
    dataset = load_demo(task)
    run = run_system(dataset, "bm25")
    qid = next(q for q in dataset.queries if len(run.top(q, 10)) == 10)
    docs = [doc for doc, _ in run.top(qid, 4)]
    page.goto(f"/judge-list?task={task}&systems=bm25&system=bm25&q={qid}")
    settle(page, "rows graded")
    assert_healthy(page)
    frame = page.frame_locator('iframe[title*="list_judge"]')
    rows = frame.locator(".row")
    rows.first.wait_for(state="visible")
    assert rows.count() == 10
    assert frame.get_by_text("Type your name under 'Your name' first").is_visible()  # no name: keys save nothing
    assert frame.locator(".reveal").count() == 0  # blind: no qrels grade before grading

    _sign(page, name)
    frame.locator("#hint").click()  # focus the list (its first row is focused)
    for key in ["2", "ArrowDown", "1", "ArrowUp", "ArrowUp", "0"]:  # rows 1 → 2, 3 → 1, 2 → 0
        page.keyboard.press(key)
    for doc, grade in ((docs[0], "2"), (docs[1], "0"), (docs[2], "1")):
        row = frame.locator(f'.row[data-doc="{doc}"][data-state="saved"][data-grade="{grade}"]')
        row.wait_for(state="visible", timeout=30_000)
        assert "qrels:" in row.inner_text()  # graded: the judgement is shown now
    assert "qrels:" not in frame.locator(f'.row[data-doc="{docs[3]}"]').inner_text()
    page.keyboard.press("Enter")  # focus is on row 3 after grading row 2: open it
    frame.locator(f'.row.open[data-doc="{docs[2]}"]').wait_for(state="visible")
    full_page_screenshot(page, "judge-list-graded")

    def grades() -> list[tuple]:
        store = AnnotationStore(APP_DATA[app_url] / "annotations.sqlite")
        labels = store.list(dataset=dataset.source, task=task, query_id=qid)
        assert all(a.annotator == name for a in labels if a.failure_type.startswith("grade_"))
        return sorted((a.doc_id, a.failure_type, a.system, a.rank, a.annotator, a.blind) for a in labels)

    expected = sorted(
        [
            (docs[0], "grade_2", "bm25", 1, name, False),
            (docs[1], "grade_0", "bm25", 2, name, False),
            (docs[2], "grade_1", "bm25", 3, name, False),
        ]
    )
    assert grades() == expected
    page.locator("h1").filter(has_text="Judge a list").click()
    page.keyboard.press("r")  # a whole-page rerun hands the same events to the page again
    page.wait_for_timeout(1500)
    settle(page, "3 of 10 rows graded")
    assert grades() == expected
    assert_healthy(page)


def test_the_judging_page_grades_and_skips_by_key_and_serves_the_next_without_a_page_run(
    page: Page, app_url: str
) -> None:
    """Issue 28 item 7: on the Judging page, 2 grades the document shown, s skips the next and u says unsure
    of the third (the legend names each key); each time the next document follows in the same component
    (no page reload), the judgement is stored once as the typed name with the pool as its ranking, and the
    skipped document is not judged. Issue 36: the page names each document by its place in the queue, never
    by its id (which can name the answer), and highlights no query word unless asked."""
    from r2med_core.judging.annotations import AnnotationStore
    from r2med_core.judging.pooling import pool
    from r2med_core.judging.queue import JudgingQueue

    task, name = "qa-reference", "Dr. Keys"
    dataset = load_demo(task)
    store = AnnotationStore(APP_DATA[app_url] / "annotations.sqlite")
    queue = JudgingQueue(store)
    queue.send(dataset.source, task, pool({"bm25": run_system(dataset, "bm25")}, dataset.qrels, 10), "Rev")
    first, second, third, fourth = queue.items(dataset.source, task)[:4]
    name_of = {entry: shown for shown, entry in queue.numbered(dataset.source, task).items()}
    page.goto(f"/judging?task={task}&systems=bm25")
    settle(page, "What counts as relevant")
    frame = _sign(page, name)
    row = frame.locator(".row")
    assert row.count() == 1 and row.get_attribute("data-doc") == name_of[first]
    assert "u unsure" in frame.locator("#hint").inner_text()
    inner = page.locator('iframe[title*="list_judge"]').element_handle().content_frame()
    seen = page.content() + inner.content() + page.title() + page.url
    assert first.doc_id not in seen and "<mark>" not in page.content()
    frame.locator("#hint").click()
    page.evaluate("window.__r2marker = 1")  # gone if the page reloaded
    page.keyboard.press("2")
    frame.locator(f".row[data-doc='{name_of[second]}']").wait_for(timeout=30_000)
    expect(page.get_by_text(f"Document {name_of[second]}", exact=True)).to_be_visible()
    page.keyboard.press("s")
    frame.locator(f".row[data-doc='{name_of[third]}']").wait_for(timeout=30_000)
    page.keyboard.press("u")
    frame.locator(f".row[data-doc='{name_of[fourth]}']").wait_for(timeout=30_000)
    assert page.evaluate("window.__r2marker") == 1
    assert_healthy(page)
    labels = store.list(dataset=dataset.source, task=task)
    assert [(a.query_id, a.doc_id, a.failure_type, a.system, a.annotator) for a in labels] == [
        (first.query_id, first.doc_id, "grade_2", "pool@10", name),
        (third.query_id, third.doc_id, "unsure", "pool@10", name),
    ]
    assert labels[0].time_ms is not None and labels[0].time_ms > 0  # measured in the browser: shown → key


@contextmanager
def _pressed_while_the_server_is_down(browser: Browser, tmp_path: Path, name: str) -> Iterator[tuple]:
    """A Judging tab on ``clinical-case``'s BM25 pool, on a server of its own that stopped right after
    ``name`` was typed; then the key 1 pressed on the first document, which nobody answers. Yields the
    page (marked ``window.__r2marker``: gone if it reloads), the store, the queued documents and the port."""
    from r2med_core.judging.annotations import AnnotationStore
    from r2med_core.judging.pooling import pool
    from r2med_core.judging.queue import JudgingQueue

    task = "clinical-case"
    dataset = load_demo(task)
    store = AnnotationStore(tmp_path / "data" / "annotations.sqlite")
    JudgingQueue(store).send(dataset.source, task, pool({"bm25": run_system(dataset, "bm25")}, dataset.qrels, 10), "R")
    port = _free_port()
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(60_000)
    try:
        page = context.new_page()
        with streamlit_server(tmp_path, {}, port=port) as base:
            page.goto(f"{base}/judging?task={task}&systems=bm25")
            settle(page, "What counts as relevant")
            frame = _sign(page, name)
            frame.locator("#hint").click()
            page.evaluate("window.__r2marker = 1")
        page.keyboard.press("1")  # nobody answers: the server is gone
        yield page, store, JudgingQueue(store).items(dataset.source, task), port
    finally:
        context.close()


def _kept_keys(page: Page) -> int:
    """How many keyboard components keep unacknowledged keys in this browser's localStorage."""
    inner = page.locator('iframe[title*="list_judge"]').element_handle().content_frame()
    return inner.evaluate("Object.keys(localStorage).filter(k => k.startsWith('r2med-keys:')).length")


def _wait_for_labels(store, seconds: float) -> list:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not store.list() and time.monotonic() < deadline:
        time.sleep(0.5)
    return store.list()


def test_a_key_the_server_never_acknowledged_is_kept_in_the_browser_and_saved_after_a_restart(
    browser: Browser, tmp_path: Path
) -> None:
    """Issue 28 item 7: a grade pressed while the server is down stays in the browser (localStorage) and,
    once the server is back and the page is opened again, is sent by itself (once a name is given) and
    stored once."""
    name = "Dr. Restart"
    with _pressed_while_the_server_is_down(browser, tmp_path, name) as (page, store, queued, port):
        assert _kept_keys(page) == 1 and store.list() == []
        with streamlit_server(tmp_path, {}, port=port):
            page.reload()  # a new session: the typed name is asked again
            settle(page, "What counts as relevant")
            box = page.get_by_role("textbox", name="Your name")
            box.fill(name)
            box.press("Enter")
            labels = _wait_for_labels(store, 60)
            assert [(a.doc_id, a.failure_type, a.annotator) for a in labels] == [(queued[0].doc_id, "grade_1", name)]
            page.wait_for_timeout(3000)  # nothing is sent again once acknowledged
            assert len(store.list()) == 1
            assert _kept_keys(page) == 0


def test_a_tab_reconnected_in_place_to_a_restarted_server_sends_its_kept_key_and_grades_on(
    browser: Browser, tmp_path: Path
) -> None:
    """Issue 28 item 7: a grade pressed while the server is down is saved once the same tab — not reloaded —
    reconnects to the restarted server, under the name its box still shows; the tab is live again (the
    next key grades the next document).

    The cause this guards: the keyboard lives in a fragment, the restarted server's new session knows no
    fragment until the whole page ran, and Streamlit reruns the whole page on a reconnect only when the
    page has a self-rerunning fragment (``keylist.rerun_after_reconnect``) or the last run was a fragment's."""
    from r2med_core.judging.queue import blind_name

    name = "Dr. Reconnect"
    with _pressed_while_the_server_is_down(browser, tmp_path, name) as (page, store, queued, port):
        first, second = queued[:2]
        assert store.list() == []
        with streamlit_server(tmp_path, {}, port=port):
            labels = _wait_for_labels(store, 45)
            assert [(a.doc_id, a.failure_type, a.annotator) for a in labels] == [(first.doc_id, "grade_1", name)]
            assert page.evaluate("window.__r2marker") == 1  # the same tab, never reloaded
            frame = page.frame_locator('iframe[title*="list_judge"]')
            frame.locator(f".row[data-doc='{blind_name(2)}']").wait_for(timeout=30_000)  # a fresh queue: 1, 2, 3
            frame.locator("#hint").click()
            page.keyboard.press("2")  # the tab grades on: the next document follows
            frame.locator(f".row[data-doc='{blind_name(3)}']").wait_for(timeout=30_000)
            assert [(a.doc_id, a.failure_type) for a in store.list()] == [
                (first.doc_id, "grade_1"),
                (second.doc_id, "grade_2"),
            ]
            assert_healthy(page)
            assert _kept_keys(page) == 0


@pytest.mark.parametrize("width", [1024, 1280])
def test_explorer_and_compare_fit_narrow_screens(page: Page, judged_ids: list[str], width: int) -> None:
    """At 1024 and 1280 px the query table, its filters and the Compare p-value and Δ columns are in view."""
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(f"/explorer?task={TASK}&{SYSTEMS}&system=bm25")
    settle(page, "Retrieved top 10")
    for text in ("Failures only", "Gold missed", "Search query text"):
        label = page.get_by_text(text, exact=True).first
        box = label.bounding_box()
        assert box is not None and box["x"] + box["width"] <= width, f"{text!r} is off screen at {width} px"
        assert label.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), f"{text!r} is cut short at {width} px"
    page.screenshot(path=str(SCREENSHOTS / f"explorer-{width}.png"))
    page.goto(f"/compare?task={TASK}&{SYSTEMS}")
    settle(page, "Largest gains")
    grid = page.locator('[data-testid="stTable"]', has=page.locator("th", has_text="randomization p")).first
    grid.wait_for(state="attached")
    headers = [h.strip() for h in grid.locator("th").all_text_contents() if h.strip()]
    # Δ, its interval and the p-values come right after the system name, so they are the first columns in view.
    assert headers[:4] == ["system", "Δ", "Δ 95% CI", "randomization p"], headers
    box = grid.bounding_box()
    assert box is not None and box["x"] + box["width"] <= width
    page.screenshot(path=str(SCREENSHOTS / f"compare-{width}.png"))


@pytest.mark.parametrize("width", [800, 1600])
def test_the_explorer_lays_itself_out_from_800_to_1600_px(browser: Browser, app_url: str, width: int) -> None:
    """Under 1000 px the sidebar starts folded, the rewrite's before → after values fit their cards and
    the gold and retrieved panels stack; at 1600 px the sidebar is open and the panels side by side."""
    context = browser.new_context(viewport={"width": width, "height": 1000}, base_url=app_url)
    page = context.new_page()
    try:
        page.goto("/explorer?task=clinical-case&systems=bm25&system=bm25&q=3&rewrite=hyde:demo-writer")
        settle(page, "Retrieved top 10")
        # The sidebar folds a moment after the first render (later on a loaded machine): wait for the state.
        sidebar = page.locator('[data-testid="stSidebar"]')
        expect(sidebar).to_have_attribute("data-collapsed", "true" if width < 1000 else "false", timeout=30_000)
        for value in page.locator('[data-testid="stMetricValue"]').all():
            assert value.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), f"{value.inner_text()!r} is cut"
        gold = page.get_by_role("heading", name=re.compile(r"Gold documents")).bounding_box()
        retrieved = page.get_by_role("heading", name=re.compile(r"Retrieved top 10")).bounding_box()
        assert gold is not None and retrieved is not None
        stacked = abs(gold["x"] - retrieved["x"]) < 5 and retrieved["y"] > gold["y"]
        assert stacked == (width < 1000)
        page.screenshot(path=str(SCREENSHOTS / f"explorer-layout-{width}.png"), full_page=True)
        assert_healthy(page)
    finally:
        context.close()


def test_cancel_then_compute_shows_live_progress_and_runs_the_job_to_the_end(
    browser: Browser, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Long work looks alive (documents counted every batch, an elapsed clock, an ETA), Cancel says
    "Cancelling…", and Compute clicked after it starts a job that runs to the end."""
    work = tmp_path_factory.mktemp("cancel-compute")
    with streamlit_server(work, {"R2MED_COMPUTE_SECONDS": "0.001"}) as base:  # every system waits for a click
        context = browser.new_context(viewport=VIEWPORT, base_url=base)
        context.set_default_timeout(60_000)
        page = context.new_page()
        try:
            page.goto(f"/metrics?task={TASK}&systems=minilm")
            page.get_by_role("button", name=re.compile(r"^Compute \(")).click()
            page.get_by_text(re.compile(r"\d+ s elapsed")).first.wait_for()
            page.get_by_text(re.compile(r"[1-9]\d* / \d+ documents")).first.wait_for(timeout=RENDER_MS)
            assert page.get_by_role("button", name=re.compile(r"^Compute")).count() == 0  # one control at a time
            page.get_by_role("button", name="Cancel").click()
            page.get_by_role("button", name=re.compile(r"^Compute .*resumes where it stopped")).click(timeout=RENDER_MS)
            settle(page, "Official metrics", timeout_ms=2 * RENDER_MS)
            assert page.get_by_text("cancelled").count() == 0
            assert_healthy(page)
        finally:
            context.close()
