"""Time the Judging page by keyboard in the real app: keypress to the next document shown.

Why: blind judging of a pool is hundreds of documents in a row, graded by one key each, so the next
document must be there before the annotator looks up: the goal is under 150 ms per graded document.
The script queues a pool of the demo task (bm25 and bm25s, top 10) in a fresh store, starts ``streamlit
run`` on it (``bench_list_judging``'s server and browser: Debian's /usr/bin/chromium, never Playwright's
own download), opens the Judging page and grades ``--documents`` documents with 0/1/2. For each it reports
the app's own latency, measured inside the keyboard component from the keydown to the next document
drawn, and the wall time the driver saw until the next document's row appeared; at the end it checks
that the store holds one label per keypress, each with its time spent. It prints median and p90 next to
the goal, with the load average (the machine is shared); it asserts nothing.

    python -m benchmarks.bench_judging                   # from the repo root
    python -m benchmarks.bench_judging --documents 60 --task qa-reference
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from benchmarks.bench_list_judging import CHROMIUM, CHROMIUM_ARGS, _start, print_latencies, require_chromium

ANNOTATOR = "Bench Judge"
SYSTEMS = ("bm25", "bm25s")
DEPTH = 10


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="clinical-evidence", help="demo task (default: clinical-evidence)")
    parser.add_argument("--documents", type=int, default=40, help="documents to grade (default: 40)")
    args = parser.parse_args(argv)
    if args.documents < 1:
        parser.error("--documents must be at least 1")
    require_chromium()

    from playwright.sync_api import sync_playwright

    from r2med_core import load_demo, run_system
    from r2med_core.judging.annotations import AnnotationStore
    from r2med_core.judging.pooling import pool
    from r2med_core.judging.queue import JudgingQueue

    dataset = load_demo(args.task)
    work = Path(tempfile.mkdtemp(prefix="bench-judging-"))
    store = AnnotationStore(work / "data" / "annotations.sqlite")
    pooled = pool({name: run_system(dataset, name) for name in SYSTEMS}, dataset.qrels, DEPTH)
    queued = JudgingQueue(store).send(dataset.source, dataset.name, pooled, "Bench Sender")
    if queued < args.documents:
        raise SystemExit(f"error: the pool holds {queued} documents, fewer than --documents {args.documents}")
    process, base = _start(work)
    seen_ms: list[float] = []
    app_ms: list[float] = []
    load_before = os.getloadavg()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(120_000)
            page.goto(f"{base}/judging?task={args.task}&systems=bm25")
            page.get_by_role("textbox", name="Your name").fill(ANNOTATOR)
            page.get_by_role("textbox", name="Your name").press("Enter")
            frame = page.frame_locator('iframe[title*="list_judge"]')
            frame.locator("#reason").wait_for(state="hidden")
            frame.locator("#hint").click()
            inner = page.locator('iframe[title*="list_judge"]').element_handle().content_frame()
            for n in range(args.documents):
                shown = frame.locator(".row").get_attribute("data-doc")
                started = time.perf_counter()
                page.keyboard.press(str(n % 3))
                inner.wait_for_function(
                    "d => { const r = document.querySelector('.row'); return r && r.dataset.doc !== d; }", arg=shown
                )
                seen_ms.append((time.perf_counter() - started) * 1000)
            app_ms = [float(ms) for ms in inner.evaluate("window.__judgeShownMs")]
            browser.close()
    finally:
        process.terminate()
        process.wait(timeout=20)
    load_after = os.getloadavg()
    stored = store.list(annotator=ANNOTATOR)

    print(f"Judging page on the demo ({args.task}, pool of {', '.join(SYSTEMS)} at {DEPTH}: {queued} documents)")
    print(f"{len(seen_ms)} documents graded by keyboard")
    rows = [("app: keydown to the next document drawn", app_ms), ("driver: keypress to the next row seen", seen_ms)]
    print_latencies("document", rows, load_before[0], load_after[0])
    timed = sum(a.time_ms is not None for a in stored)
    verdict = "one label per keypress" if len(stored) == len(seen_ms) else f"{len(stored)} labels"
    print(f"\nstore: {verdict} (by {ANNOTATOR!r}), {timed} with their time spent")


if __name__ == "__main__":
    main()
