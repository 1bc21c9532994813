"""The team's judging round end to end, as people do it: a real OpenID Connect provider (oidc-provider-mock),
a real PostgreSQL (``tests/pg_cluster.py``) shared by two ``streamlit run`` servers, and headless Chromium.

A reviewer pools unjudged documents and sends them for judging; two annotators, each signed in on a
different server, judge the same documents blind; the reviewer adjudicates where they disagree; the team's
qrels then hold the agreed and the adjudicated grades, and the Metrics page's "with" score is the
Adjudication page's team score. At each step each role sees and downloads only what
``r2med_core.judging.visibility`` allows; a forged proxy header names nobody.

    python -m pytest tests/test_team_browser.py -q
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from r2med_core import load_demo
from r2med_core.judging.annotations import PROPOSER_PREFIX, Annotation, AnnotationStore
from r2med_core.judging.queue import JudgingQueue
from tests.test_browser import VIEWPORT, _choose, browser, chromium, settle

pytest.importorskip("oidc_provider_mock", reason="a real OpenID Connect provider: pip install oidc-provider-mock")
from tests.test_signin import FORGED, _context, _sign_in, oidc_server, provider

__all__ = ["browser", "chromium", "provider"]  # the fixtures, shared with test_browser.py and test_signin.py
pytestmark = pytest.mark.browser

TASK = "clinical-evidence"
ALICE, BOB, ROB, CAROL = "alice@example.org", "bob@example.org", "rob@example.org", "carol@example.org"
ROLES = f'"{ALICE}" = "annotator"\n"{BOB}" = "annotator"\n"{ROB}" = "reviewer"\n"{CAROL}" = "admin"\n'
MODEL = f"{PROPOSER_PREFIX}demo-judge"
#: Buttons that hand out the whole store: admins only.
STORE_WIDE = ("All labels (CSV)", "All labels (JSONL)", "Download a full backup", "Raw labels (CSV)")
TEAM_QRELS = f"Team qrels for {TASK} (TREC)"
TEAM_CHANGES = f"Team qrels changes for {TASK} (TREC)"


@pytest.fixture
def servers(
    chromium: Path, provider: str, postgres_urls: Callable[..., str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, str]]:
    """Two app servers signing people in through ``provider``, on one PostgreSQL store (an empty schema of
    the test server, over TCP with a password); (server 1, server 2, the store's URL)."""
    url = postgres_urls(tcp=True)
    with ExitStack() as stack:
        one, two = (
            stack.enter_context(
                oidc_server(tmp_path_factory.mktemp(f"team-{n}"), provider, ROLES, {"R2MED_ANNOTATIONS_URL": url})
            )
            for n in (1, 2)
        )
        yield one, two, url


# --------------------------------------------------------------------------- helpers


def _person(browser: Browser, base: str, who: str | None, **kwargs: object) -> Page:
    """A fresh browser session on ``base``, signed in as ``who`` through the provider (None: signed out)."""
    page = _context(browser, base, **kwargs).new_page()
    if who is not None:
        _sign_in(page, who)
    return page


def _buttons(page: Page) -> set[str]:
    """The labels of every download button on the page."""
    return {text.strip() for text in page.locator('[data-testid="stDownloadButton"]').all_inner_texts()}


def _download(page: Page, label: str) -> str:
    with page.expect_download() as info:
        page.locator('[data-testid="stDownloadButton"]').filter(has_text=label).first.click()
    return Path(info.value.path()).read_text(encoding="utf-8")


def _main(page: Page) -> str:
    return page.locator('[data-testid="stMain"]').inner_text()


def _grid_rows(page: Page, heading: str) -> list[dict[str, str]]:
    """The rows of the first data grid under the subheader ``heading``. Streamlit's grid keeps an accessible
    table of the cells in view beside the canvas it draws: a wide window puts every column in view."""
    page.set_viewport_size({"width": 4000, "height": VIEWPORT["height"]})
    try:
        grid = page.get_by_role("heading", name=heading).locator("xpath=following::*[@data-testid='stDataFrame']")
        grid.first.locator("td").first.wait_for(state="attached")
        page.wait_for_timeout(500)  # the grid redraws for the new width
        header = [h.strip() for h in grid.first.locator("th").all_inner_texts()]
        rows = [[c.strip() for c in row.locator("td").all_inner_texts()] for row in grid.first.locator("tr").all()]
        return [dict(zip(header, cells, strict=True)) for cells in rows if cells]
    finally:
        page.set_viewport_size(VIEWPORT)


def _table_rows(page: Page, heading: str) -> dict[str, list[str]]:
    """The rows of the first HTML table (st.table) under the subheader ``heading``: each row's cells by its
    first cell."""
    table = page.get_by_role("heading", name=heading).locator("xpath=following::*[@data-testid='stTable']").first
    rows = [[c.strip() for c in row.locator("th, td").all_inner_texts()] for row in table.locator("tr").all()]
    return {cells[0]: cells[1:] for cells in rows if cells}


def _annotations(page: Page) -> str:
    page.goto(f"/annotations?task={TASK}&systems=bm25")
    settle(page, "Export and import")
    return _main(page)


def _turn(page: Page) -> tuple[str, str]:
    """Open the Judging page; the (query, document) it serves now, the document as the page names it."""
    page.goto(f"/judging?task={TASK}")
    settle(page, "Grade this document")
    main = page.locator('[data-testid="stMain"]')
    query = main.get_by_text(re.compile(r"^Query \S+$")).first.inner_text().split()[1]
    doc = main.get_by_text(re.compile(r"^Document \S+$")).first.inner_text().split()[1]
    return query, doc


def _grade(page: Page, doc: str, grade: str) -> None:
    """Grade the document the Judging page shows (it must be ``doc``) and wait for the save."""
    assert _turn(page)[1] == doc
    _choose(page, "Relevance grade", grade)
    page.get_by_role("button", name="Save label").click()
    settle(page, f"Saved: {grade} on {doc}")


def _team_score(page: Page) -> tuple[str, str]:
    """The Adjudication page's nDCG@10 of BM25 with the original qrels and with the team's ("0.123 → 0.456")."""
    card = page.locator('[data-testid="stMetric"]').filter(has_text="nDCG@10").first
    before, after = card.locator('[data-testid="stMetricValue"]').inner_text().split("→")
    return before.strip(), after.strip()


def _sees_nothing(page: Page, secrets: list[str]) -> None:
    """Someone signed out is told to sign in and shown none of ``secrets`` (names, documents judged) on the
    Annotations, Adjudication and Judging pages, nor any download of labels or qrels, nor the team's progress."""
    body = _annotations(page)
    assert "Sign in to see labels" in body and "Signed in as" not in page.content()
    assert not [s for s in secrets if s in body] and not _buttons(page)
    page.goto(f"/adjudication?task={TASK}&systems=bm25")
    settle(page, "Sign in to see labels")
    body = _main(page)
    assert not [s for s in secrets if s in body] and not _buttons(page)
    assert page.get_by_role("button", name="Record decision").count() == 0
    page.goto(f"/judging?task={TASK}")
    settle(page, "Sign in (in the sidebar) to save labels")
    body = _main(page)
    assert not [s for s in secrets[:3] if s in body] and "Progress" not in body


# --------------------------------------------------------------------------- the round


def test_a_judging_round_across_two_servers_shows_each_role_only_its_share(
    browser: Browser, servers: tuple[str, str, str]
) -> None:
    one, two, url = servers
    dataset = load_demo(TASK)

    # The reviewer pools the unjudged top 10 of BM25 and sends it for judging (on server 1).
    rob = _person(browser, one, ROB)
    rob.goto(f"/metrics?task={TASK}&systems=bm25")
    settle(rob, "Pooling and holes")
    rob.get_by_role("button", name=re.compile(r"^Send the pool \(\d+\) to the judging queue")).click()
    settle(rob, "new document(s) in the judging queue")
    rob.context.close()

    # Bob (annotator, server 2) is served the first two queued documents, sees the query and the document
    # only, and grades them; a model proposes a grade on each, as the LLM judge does. The page names each
    # document by its place in the queue, never by its id (issue 36).
    bob = _person(browser, two, BOB)
    qid, first_shown = _turn(bob)
    bob_saw = _main(bob)
    assert "proposed by" not in bob_saw and not re.search(r"grade \d", bob_saw), bob_saw
    _grade(bob, first_shown, "Grade 1: relevant")
    qid_2, second_shown = _turn(bob)
    assert second_shown != first_shown
    _grade(bob, second_shown, "Grade 2: highly relevant")
    store = AnnotationStore(url)
    queued = JudgingQueue(store).numbered(dataset.source, TASK)
    first, second = queued[first_shown].doc_id, queued[second_shown].doc_id
    assert first not in bob_saw
    for query, doc in ((qid, first), (qid_2, second)):
        proposal = {"failure_type": "grade_2", "annotator": MODEL, "note": "the model's reading"}
        store.add(Annotation(dataset=dataset.source, task=TASK, query_id=query, doc_id=doc, **proposal))

    # Alice (annotator, server 1) is served the same first document: before her grade she sees neither
    # Bob's label, the model's proposal nor any judgement of it; she agrees on it.
    alice = _person(browser, one, ALICE)
    assert _turn(alice) == (qid, first_shown)
    body = _main(alice)
    assert BOB not in body and "proposed by" not in body and not re.search(r"grade \d", body), body
    body = _annotations(alice)
    assert BOB not in body and "proposed by" not in body and first not in body and second not in body, body
    assert not _buttons(alice) & {*STORE_WIDE, TEAM_QRELS}
    _grade(alice, first_shown, "Grade 1: relevant")
    # Now she sees the others' labels on that document, and still nothing on the second.
    _annotations(alice)
    rows = _grid_rows(alice, "All labels")
    seen = {(row["document"], row["annotator"]) for row in rows}
    assert seen == {(first, ALICE), (first, BOB), (first, MODEL)}, rows
    assert not _buttons(alice) & {*STORE_WIDE, TEAM_QRELS}
    # … and she disagrees with Bob on the second. Her progress is hers alone: no team figures, nobody else's.
    _grade(alice, second_shown, "Grade 0: not relevant")
    alice.reload()  # the Progress table is as of opening the page (a grade redraws only the document)
    settle(alice, "Progress")
    progress = _grid_rows(alice, "Progress")
    assert [(row["annotator"], row["judged"]) for row in progress] == [(ALICE, "2")], progress
    alice.goto(f"/adjudication?task={TASK}")
    settle(alice, "Agreement figures, adjudication and the downloads are for reviewers")
    assert not _buttons(alice) and alice.get_by_role("button", name="Record decision").count() == 0
    alice.context.close()
    bob.context.close()

    # The reviewer (server 2) adjudicates the disagreement; he downloads the team's qrels, not the store.
    rob = _person(browser, two, ROB)
    rob.goto(f"/adjudication?task={TASK}&systems=bm25")
    settle(rob, "Waiting for a decision (1)")
    item = rob.locator('[data-testid="stVerticalBlock"]').filter(has_text=f"document {second}")
    assert item.first.is_visible()
    _choose(rob, "Adjudicated grade", "Grade 2: highly relevant")
    rob.get_by_label("Reason (optional)").fill("answers the question directly")
    rob.get_by_role("button", name="Record decision").click()
    settle(rob, "The labels are kept as they were")
    rob.goto(f"/adjudication?task={TASK}&systems=bm25")
    settle(rob, f"Re-evaluation on {TASK}")
    assert not _buttons(rob) & set(STORE_WIDE)
    changes = _download(rob, TEAM_CHANGES)
    assert f"{qid} 0 {first} 1" in changes and f"{qid_2} 0 {second} 2" in changes, changes
    original, adjudicated = _team_score(rob)
    assert original != adjudicated  # the team's grades change BM25's score
    _annotations(rob)
    assert not _buttons(rob) & set(STORE_WIDE)
    qrels = _download(rob, TEAM_QRELS).splitlines()
    assert f"{qid} 0 {first} 1" in qrels and f"{qid_2} 0 {second} 2" in qrels
    assert f"{qid} 0 {first} 2" not in qrels  # the model's proposal is a suggestion, never a judgement
    # Metrics' "with the team's judgements" is the Adjudication page's team score.
    rob.goto(f"/metrics?task={TASK}&systems=bm25")
    settle(rob, "Pooling and holes")
    _what, with_team = _table_rows(rob, "Pooling and holes")["nDCG@10 with"]  # BM25's, the one system here
    assert f"{float(with_team):.3f}" == adjudicated, (with_team, adjudicated)
    rob.context.close()

    # The admin downloads the whole store.
    carol = _person(browser, one, CAROL)
    _annotations(carol)
    assert {"All labels (CSV)", "All labels (JSONL)", "Download a full backup", TEAM_QRELS} <= _buttons(carol)
    carol.context.close()

    # Signed out, or with a forged proxy header naming the admin (these servers trust no proxy): no label,
    # name, judgement or download, on either server.
    for base, headers in ((one, {}), (two, FORGED)):
        page = _person(browser, base, None, extra_http_headers=headers)
        _sees_nothing(page, [ALICE, BOB, MODEL, first, second])
        page.context.close()

