"""Time every in-session click of the triage loop on the demo, as server time measured with AppTest.

Why: triage is hundreds of clicks (filter, Next, label, review), so each must feel instant once the
session is warm: the goal is under 300 ms of server time per click. The script prints each click's
median over ``--repeats`` and its ratio to the goal; it asserts nothing (timings belong in a benchmark,
not in a test).

    python -m benchmarks.bench_clicks                 # from the repo root
    python -m benchmarks.bench_clicks --repeats 9 --task clinical-case

It runs against a fresh temporary cache and annotation store. The first render (building the demo runs)
is done before timing and printed apart. AppTest runs the script without a browser, so the figures
leave out network and drawing time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "r2med_app" / "streamlit_app.py")
GOAL_MS = 300.0


def _by_label(widgets: Any, label: str) -> Any:
    return next(w for w in widgets if w.label == label)


def _picker(at: Any) -> Any:
    return next(s for s in at.selectbox if str(s.key).startswith("w_q."))


def _check(at: Any, what: str) -> None:
    if at.exception:
        raise SystemExit(f"{what}: the app raised {[e.value for e in at.exception]}")


def _timed(at: Any, what: str, click: Callable[[], Any]) -> float:
    started = time.perf_counter()
    click()
    elapsed = time.perf_counter() - started
    _check(at, what)
    return elapsed * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="clinical-case", help="demo task (default: clinical-case)")
    parser.add_argument("--repeats", type=int, default=5, help="times each click is repeated (default: 5)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-clicks-"))
    os.environ["R2MED_CACHE_DIR"] = str(work / "cache")
    os.environ["R2MED_DATA_HOME"] = str(work / "data")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from streamlit.testing.v1 import AppTest

    from r2med_core.judging.annotations import AnnotationStore

    started = time.perf_counter()
    at = AppTest.from_file(APP, default_timeout=900)
    for name, value in {"task": args.task, "systems": ["bm25", "minilm"], "system": "bm25"}.items():
        at.query_params[name] = value
    at.run()
    at.switch_page("views/pages/explorer.py").run()
    _check(at, "opening the explorer")
    at.toggle(key="w_rewrite_on").set_value(True).run()  # builds the rewritten runs too
    at.toggle(key="w_rewrite_on").set_value(False).run()
    at.selectbox(key="w_system").set_value("minilm").run()  # encodes the corpus once
    at.selectbox(key="w_system").set_value("bm25").run()
    print(f"first render (builds the demo runs, not timed below): {time.perf_counter() - started:.1f} s")

    timings: dict[str, list[float]] = {}

    def record(what: str, click: Callable[[], Any]) -> None:
        timings.setdefault(what, []).append(_timed(at, what, click))

    store = AnnotationStore()
    for i in range(args.repeats):
        record("Next ▶", lambda: at.button(key="w_next").click().run())
        record("◀ Previous", lambda: at.button(key="w_prev").click().run())
        record("filter: nDCG@10 = 0 on", lambda: at.checkbox(key="w_fail").check().run())
        record("Next ▶ (filtered)", lambda: at.button(key="w_next").click().run())
        record("filter: nDCG@10 = 0 off", lambda: at.checkbox(key="w_fail").uncheck().run())
        record("search text", lambda i=i: at.text_input(key="w_search").input(f"pain {i}").run())
        record("clear search", lambda: at.text_input(key="w_search").input("").run())
        record("Show top 20", lambda: at.select_slider(key="w_depth").set_value(20).run())
        record("Show top 10", lambda: at.select_slider(key="w_depth").set_value(10).run())
        record("pick a query", lambda i=i: _picker(at).set_value(str(i % 12)).run())
        record("system → minilm", lambda: at.selectbox(key="w_system").set_value("minilm").run())
        record("system → bm25", lambda: at.selectbox(key="w_system").set_value("bm25").run())
        record("HyDE on", lambda: at.toggle(key="w_rewrite_on").set_value(True).run())
        record("ranking → rewritten", lambda: at.radio(key="w_ranking").set_value("rewritten query").run())
        record("HyDE off", lambda: at.toggle(key="w_rewrite_on").set_value(False).run())
        _by_label(at.selectbox, "Failure type").set_value("missing_reasoning_step")
        _by_label(at.text_area, "Note").input(f"note {i}")
        at.text_input(key="w_annotator").input("bench")
        record("Save label", lambda: at.button[[b.label for b in at.button].index("Save label")].click().run())
        record("open Annotations", lambda: at.switch_page("views/pages/annotations.py").run())
        proposed = store.add(_proposal(store, args.task, i))  # a proposal to review, as another annotator made it
        at.run()
        record("Accept (review)", lambda pid=proposed.id: at.button(key=f"w_accept_{pid}").click().run())
        record("open Compare", lambda: at.switch_page("views/pages/compare.py").run())
        record("open Query explorer", lambda: at.switch_page("views/pages/explorer.py").run())

    print(f"\nserver time per click, median of {args.repeats} (goal < {GOAL_MS:.0f} ms; ratio = median / goal)")
    print(f"{'click':<28}{'median ms':>10}{'max ms':>9}{'ratio':>8}")
    worst = 0.0
    for what, values in timings.items():
        median = statistics.median(values)
        worst = max(worst, median)
        flag = "  over" if median > GOAL_MS else ""
        print(f"{what:<28}{median:>10.0f}{max(values):>9.0f}{median / GOAL_MS:>8.2f}{flag}")
    print(f"\nslowest click: {worst:.0f} ms ({worst / GOAL_MS:.2f} × the goal)")


def _proposal(store: Any, task: str, i: int) -> Any:
    from r2med_core import load_demo, run_system
    from r2med_core.judging.annotations import Annotation

    dataset = load_demo(task)
    qid = list(dataset.queries)[i % len(dataset.queries)]
    doc = next(d for d, _ in run_system(dataset, "bm25").top(qid, 100) if d not in dataset.positives(qid))
    return Annotation(
        dataset=dataset.source,
        task=dataset.name,
        query_id=qid,
        doc_id=doc,
        system="bm25",
        failure_type="relevant_unjudged",
        annotator=f"colleague{i}",
    )


if __name__ == "__main__":
    main()
