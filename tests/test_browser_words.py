"""Issue 36's browser walk, the items about what a page says and when (headless Chromium, a real
``streamlit run``): the first text a fresh session receives is the app's name; the Judging card and its
Progress table count one person's work alike while grading by key; Judge a list says which row the keys
grade after a click mid-list, and offers the next query once every row is judged.

No wall-clock assertion: each test waits (generously) for what will happen, and checks an order the
server fixes (the messages it sends, in the order sent), never how fast."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from r2med_core import load_demo, run_system
from tests.test_browser import VIEWPORT, browser, chromium, full_page_screenshot, settle, streamlit_server

__all__ = ["browser", "chromium"]  # the fixtures, shared with test_browser.py
pytestmark = pytest.mark.browser
WAIT_MS = 60_000


@pytest.fixture(scope="module")
def server(chromium: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    work = tmp_path_factory.mktemp("browser-words")
    with streamlit_server(work, {}) as base:
        yield base, work / "data"


@pytest.fixture
def page(browser: Browser, server: tuple[str, Path]) -> Iterator[Page]:
    context = browser.new_context(viewport=VIEWPORT, base_url=server[0])
    context.set_default_timeout(WAIT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


def _texts(msg: ForwardMsg) -> list[str]:
    """The words a message draws: a new element's markdown, heading or text body, else nothing."""
    if msg.WhichOneof("type") != "delta" or msg.delta.WhichOneof("type") != "new_element":
        return []
    element = msg.delta.new_element
    kind = element.WhichOneof("type")
    body = getattr(getattr(element, kind, None), "body", "") if kind else ""
    return [body] if isinstance(body, str) and body.strip() else []


def test_the_first_words_a_fresh_session_receives_are_the_apps_name(page: Page) -> None:
    """A fresh session (a first visit) gets the app's name as the first text of its first run, before the
    sidebar, the data and the page: the name is on screen while the rest loads, never a blank page."""
    received: list[bytes] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda data: received.append(data)))
    page.goto("/")
    settle(page, "Systems in play")
    texts = [text for frame in received if isinstance(frame, bytes) for text in _texts(ForwardMsg.FromString(frame))]
    assert texts, "no text came over the websocket"
    assert texts[0].startswith("# R2MED Explorer") and "Loading" in texts[0], texts[:3]
    # … and once the page drew itself the note is gone (the Overview's own title stays)
    assert page.get_by_text("Loading the app and its data").count() == 0
    assert page.locator("h1").filter(has_text="R2MED Explorer").count() == 1


def _name(page: Page, name: str) -> None:
    page.get_by_role("textbox", name="Your name").fill(name)
    page.get_by_role("textbox", name="Your name").press("Enter")


def test_the_judging_card_and_the_progress_table_count_the_same_labels_while_grading_by_key(
    page: Page, server: tuple[str, Path]
) -> None:
    """Grading by key reruns only the card's fragment: the Progress table below it is read in that same
    run, so "N of the M queued document(s) judged by you" and the table's "judged" for this person agree
    after every key (before, the table stood as of the page's opening: 0 below a card saying 3)."""
    from r2med_core.judging.annotations import AnnotationStore
    from r2med_core.judging.pooling import pool
    from r2med_core.judging.queue import JudgingQueue

    task, name = "clinical-evidence", "Dr. Counts"
    dataset = load_demo(task)
    queue = JudgingQueue(AnnotationStore(server[1] / "annotations.sqlite"))
    queue.send(dataset.source, task, pool({"bm25": run_system(dataset, "bm25")}, dataset.qrels, 10), "Rev")
    queued = len(queue.items(dataset.source, task))
    page.goto(f"/judging?task={task}&systems=bm25")
    settle(page, "What counts as relevant")
    _name(page, name)
    frame = page.frame_locator('iframe[title*="list_judge"]')
    frame.locator("#reason").wait_for(state="hidden")
    frame.locator("#hint").click()
    for done in (1, 2, 3):
        shown = frame.locator(".row").get_attribute("data-doc")
        page.keyboard.press("1")
        frame.locator(f".row:not([data-doc='{shown}'])").wait_for()  # the next document is served
        card = page.get_by_text(f"{done} of the {queued} queued document(s) judged by you")
        card.first.wait_for()
        # the grid draws on a canvas; Streamlit keeps its cells in a table for screen readers, read here
        page.wait_for_function(
            """([name, done]) => [...document.querySelectorAll('[data-testid="stDataFrame"] tbody tr')]
                 .map(r => [...r.querySelectorAll('td')].map(c => c.textContent))
                 .some(cells => cells[0] === name && cells[3] === String(done))""",
            arg=[name, done],
            timeout=WAIT_MS,
        )
    full_page_screenshot(page, "judging-counts-agree")


def test_judge_a_list_says_which_row_the_keys_grade_and_offers_the_next_query_once_done(page: Page) -> None:
    """A click mid-list moves the keys there, and the line above the rows says so (with the rows above it
    not graded yet); once all 10 rows are graded, "Next query" opens the following one."""
    from playwright.sync_api import expect

    task = "clinical-case"
    dataset = load_demo(task)
    run = run_system(dataset, "bm25")
    listed = [q for q in dataset.queries if run.top(q, 1)]
    qid = next(q for q in listed[:-1] if len(run.top(q, 10)) == 10)
    following = listed[listed.index(qid) + 1]
    page.goto(f"/judge-list?task={task}&systems=bm25&system=bm25&q={qid}")
    settle(page, "rows graded")
    _name(page, "Dr. Lists")
    frame = page.frame_locator('iframe[title*="list_judge"]')
    frame.locator("#reason").wait_for(state="hidden")
    where = frame.locator("#where")
    expect(where).to_have_text("Keys grade #1 (highlighted)")
    frame.locator(".row").nth(3).click()  # mid-list: the keys now grade row 4, and the page says so
    expect(where).to_have_text(
        "Keys grade #4 (highlighted) · above it, 3 row(s) not graded yet: #1, #2, #3 (↑ to go back)"
    )
    assert page.get_by_role("button", name="Next query").count() == 0
    frame.locator(".row").nth(0).click()  # back to the top: 10 grades of 0 fill the list
    for _ in range(10):
        page.keyboard.press("0")
    expect(frame.locator(".row[data-state='saved']")).to_have_count(10, timeout=WAIT_MS)
    expect(where).to_have_text("Keys grade #10 (highlighted)")
    page.get_by_text("Every row of this list is judged.").wait_for()
    full_page_screenshot(page, "judge-list-done")
    page.get_by_role("button", name="Next query").click()
    page.wait_for_function("q => new URLSearchParams(location.search).get('q') === q", arg=following, timeout=WAIT_MS)
    settle(page, "0 of 10 rows graded")
    assert page.get_by_text("Every row of this list is judged.").count() == 0
