"""Issue 39 in headless Chromium on a real ``streamlit run`` server: MTEB result files uploaded on the
Leaderboard become rows of their own, a hostile one is refused where the user looks, naming the file and
the field, and the page stays alive with every table inside its column.

    python -m pytest tests/test_browser_mteb.py -q
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from tests.test_browser import SCREENSHOTS, browser, chromium, settle, streamlit_server
from tests.test_browser_fit import _cut_tables

__all__ = ["browser", "chromium"]  # the fixtures, shared with test_browser.py

pytestmark = pytest.mark.browser

FIXTURE = Path(__file__).parent / "fixtures" / "mteb" / "R2MEDBiologyRetrieval.json"


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with streamlit_server(tmp_path_factory.mktemp("mteb-app"), {}) as base:
        yield base


def test_uploaded_mteb_results_are_rows_and_a_bad_one_is_refused_naming_the_field(
    browser: Browser, app_url: str, tmp_path: Path
) -> None:
    evil = json.loads(FIXTURE.read_text())
    evil["scores"]["test"][0]["ndcg_at_10"] = "0.5"
    bad = tmp_path / "evil.json"
    bad.write_text(json.dumps(evil))
    context = browser.new_context(viewport={"width": 1000, "height": 1000}, base_url=app_url)
    context.set_default_timeout(60_000)
    page = context.new_page()
    try:
        page.goto("/leaderboard")
        settle(page, "Your MTEB result files")
        page.locator('[data-testid="stFileUploader"]').filter(has_text="MTEB result files").locator(
            "input[type=file]"
        ).set_input_files([str(FIXTURE), str(bad)])
        settle(page, "evil.json: scores.test[0].ndcg_at_10: expected a number, got str")
        row = page.locator('[data-testid="stDataFrame"]').filter(has_text="R2MEDBiologyRetrieval.json")
        assert row.count() == 1
        assert page.get_by_text("Same model, two protocols").count() == 1  # the page is alive below the error
        assert _cut_tables(page) == []
        page.screenshot(path=str(SCREENSHOTS / "leaderboard-mteb-uploads.png"), full_page=True)
    finally:
        context.close()
