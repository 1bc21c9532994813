"""Opening Compare on two uncomputed BM25 systems in the real app, against the two CLI runs it needs.

Why: a researcher opens Compare on a big task, clicks Compute on each system and waits; that must cost
what computing the two runs costs from the command line, not the page's own work on top (issue 27's
goal: within 1.2x). One side is a ``streamlit run`` server on a fresh cache (the operator's default
compute threshold, so each system waits for its Compute click and runs as a background job), driven by
headless Chromium (Debian's /usr/bin/chromium; Playwright's own browser download is never used): open
Compare with ``bm25`` and ``bm25s`` on a local synthetic task, click both Compute buttons, wait for the
paired-significance table. It is measured as the server's whole process tree from the page's opening
to that table (CPU of every process, summed peak memory; the server's own start and the browser, the
visitor's, are not counted). The
other side is ``eval --retriever bm25`` then ``eval --retriever bm25s`` on a fresh cache, each a whole
process. Interleaved pairs, median ratio, with the load average (the machine is shared).

    python -m benchmarks.bench_compare                              # 30,000 documents
    python -m benchmarks.bench_compare --docs 357080 --queries 876  # the size of all of R2MED
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from benchmarks.bench_list_judging import CHROMIUM, CHROMIUM_ARGS, _start
from benchmarks.procs import Measurement, Pairs, TreePeak, compile_as_installed, gib, load_average, measure, tree_pids

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ("bm25", "bm25s")
GOAL = 1.2


def _tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants, live ones and those it waited for (/proc, Linux)."""
    ticks, total = os.sysconf("SC_CLK_TCK"), 0.0
    for current in tree_pids(pid):
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / ticks  # utime stime cutime cstime
    return total


def app_side(folder: Path) -> Measurement:
    """A started, idle server, from opening Compare to its table, both systems computed after their clicks.

    The server's start (importing Streamlit, ~2 s of CPU) is left out: one server serves every visitor.
    """
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="bench-compare-app-"))
    process, base = _start(work, {"R2MED_DATA_ROOTS": str(folder.parent), "R2MED_COMPUTE_SECONDS": None})
    params = [("source", "local"), ("folder", str(folder))]
    params += [("systems", s) for s in SYSTEMS] + [("compare", s) for s in SYSTEMS]
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(3_600_000)
            buttons = page.get_by_role("button", name="Compute (≈")
            load, cpu_before = load_average(), _tree_cpu(process.pid)
            peak = TreePeak(process.pid)
            peak.start()
            started = time.perf_counter()
            page.goto(f"{base}/compare?{urlencode(params)}")
            for left in range(len(SYSTEMS), 0, -1):  # a click reruns the page, which then shows one fewer
                buttons.first.wait_for(state="visible")
                while buttons.count() > left:
                    time.sleep(0.05)
                buttons.first.click()
                while buttons.count() >= left:
                    time.sleep(0.05)
            page.get_by_text("Paired significance").wait_for(state="visible")
            wall = time.perf_counter() - started
            cpu = _tree_cpu(process.pid) - cpu_before
            browser.close()
    finally:
        process.terminate()
        process.wait(30)
    return Measurement(wall, cpu, peak.stop(), load, "")


def cli_side(folder: Path) -> Measurement:
    """``eval`` of each system in turn, on one fresh cache, summed."""
    cache = Path(tempfile.mkdtemp(prefix="bench-compare-cli-"))
    env = {**os.environ, "R2MED_CACHE_DIR": str(cache / "cache")}
    runs = []
    for system in SYSTEMS:
        command = [sys.executable, "-m", "r2med_core", "eval", "--retriever", system, "--data-dir", str(folder)]
        runs.append(measure([*command, "--output-dir", str(cache / f"out-{system}")], env, str(ROOT)))
    return Measurement(
        sum(r.wall for r in runs), sum(r.cpu for r in runs), max(r.peak for r in runs), runs[0].load, ""
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=30_000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--pairs", type=int, default=1, help="interleaved pairs (median reported)")
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"error: {CHROMIUM} not found (apt-get install chromium; never `playwright install`)")
    from benchmarks.bench_bm25_scale import ensure_task

    folder = ensure_task(
        Path(tempfile.gettempdir()) / f"r2med-synthetic-{args.docs}-{args.queries}-0", args.docs, args.queries, 0
    )
    compile_as_installed()
    app, cli = [], []
    for i in range(args.pairs):
        for side in ("app", "cli") if i % 2 == 0 else ("cli", "app"):
            run = app_side(folder) if side == "app" else cli_side(folder)
            (app if side == "app" else cli).append(run)
            print(f"    {side}: {run.wall:.1f} s wall, {run.cpu:.1f} s CPU, load {run.load:.1f}", file=sys.stderr)
    pairs = Pairs(app, cli)
    low, high = pairs.loads
    print(f"Compare with {' + '.join(SYSTEMS)} uncomputed, {args.docs:,} docs × {args.queries} queries: the app's")
    print(f"server (Compute clicked on each) vs the {len(SYSTEMS)} CLI runs (load {low:.1f}–{high:.1f}):")
    for field, label in (("wall", "wall"), ("cpu", "CPU, all processes")):
        ratio = pairs.ratio(field)
        verdict = "met" if ratio <= GOAL else "NOT met"
        print(
            f"  {label:<40}{pairs.median('a', field):>10.1f} s{pairs.median('b', field):>10.1f} s"
            f"{ratio:>9.2f}x  ≤ {GOAL}x  {verdict}"
        )
    print(f"  {'peak memory, all processes (no goal)':<40}{gib(pairs.median('a', 'peak')):>12}"
          f"{gib(pairs.median('b', 'peak')):>12}{pairs.ratio('peak'):>9.2f}x")
    print(f"(median of {args.pairs} interleaved pairs; ratios are app / CLI; load = 1-minute load average)")


if __name__ == "__main__":
    main()
