"""Open the served app's landing page in headless Chromium and check its headline, as a newcomer sees it.

``.ci/run`` starts the README's first command in the background, waits for Streamlit's health endpoint
and runs this from the README's ``.venv`` (Playwright comes with requirements-dev.txt; it drives
Debian's ``/usr/bin/chromium`` and never downloads a browser). Exit 0 when the page shows the app's
title and the overview's sentence ("BM25 finds a relevant document in its top 10 for 4 of 12
questions."), with no exception box; 1 otherwise, saying what it saw.

Usage: ``python .ci/landing_smoke.py http://127.0.0.1:8501``
"""

from __future__ import annotations

import re
import sys

from playwright.sync_api import Error, sync_playwright

HEADLINE = re.compile(r"finds a relevant document in its top 10 for \d+ of \d+ questions")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: landing_smoke.py URL", file=sys.stderr)
        return 2
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        try:
            page.goto(argv[0], timeout=60_000)
            page.get_by_role("heading", name="R2MED Explorer").first.wait_for(timeout=180_000)
            headline = page.get_by_text(HEADLINE).first
            headline.wait_for(timeout=180_000)
            seen = headline.inner_text()
            if page.locator('[data-testid="stException"]').count():
                shown = page.locator('[data-testid="stException"]').first.inner_text()
                raise Error(f"the landing page shows an exception: {shown}")
        except Error as error:
            print(f"error: the landing page at {argv[0]}: {error}\n--- page text ---\n{page.inner_text('body')[:3000]}")
            return 1
        finally:
            browser.close()
    print(f"landing page OK: {seen!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
