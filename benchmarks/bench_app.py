"""Time the Streamlit app on the demo data with AppTest: cold start, warm start, and query-switch reruns.

Why: the explorer is used by stepping through queries, so a query switch must feel instant once runs are
cached (target < 200 ms), and a restart must not rebuild what is cached on disk.

    python -m benchmarks.bench_app                      # from the repo root
    python -m benchmarks.bench_app --switches 36 --task clinical-case

Every start is timed in a fresh Python process (so Streamlit's in-memory caches, imported modules and
loaded models are really gone), all sharing one temporary R2MED_CACHE_DIR:

(a) cold start: empty cache folder; the first explorer render builds the index and the run;
(b) warm start: same folder, new process; the runs are read from disk;
(b') new session on a running server: a second AppTest in the same process (Streamlit caches hot);
(c) rerun when the selected query changes: the query picker's ``set_value(qid).run()``.

AppTest runs the script without a browser or websocket, so the figures leave out network and drawing
time; they are the server-side share of what a user waits for.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "r2med_app" / "streamlit_app.py")
EXPLORER = "views/pages/explorer.py"
TARGET_MS = 200.0
SYSTEM_LABELS = {"bm25": "BM25", "minilm": "MiniLM"}


# --------------------------------------------------------------------------- in the child process


def _picker(at: Any) -> Any:
    """The explorer's query picker (its key, ``w_q.<dataset scope>``, names the dataset it belongs to)."""
    return next(s for s in at.selectbox if str(s.key).startswith("w_q."))


def _open_explorer(task: str, system: str) -> tuple[Any, float, float]:
    """A new AppTest on the explorer; returns it with the seconds of the first run and of the explorer run."""
    from streamlit.testing.v1 import AppTest

    started = time.perf_counter()
    at = AppTest.from_file(APP, default_timeout=900)
    at.query_params["source"] = "demo"
    at.query_params["task"] = task
    at.query_params["system"] = system
    at.run()
    first = time.perf_counter()
    at.switch_page(EXPLORER).run()
    done = time.perf_counter()
    _check(at, "opening the explorer")
    if at.selectbox(key="w_system").value != system:
        raise SystemExit(f"the explorer opened on {at.selectbox(key='w_system').value}, not {system}")
    return at, first - started, done - first


def _check(at: Any, what: str) -> None:
    """Stop when the app raised or showed an error, or the explorer's two panels are missing."""
    headers = [s.value for s in at.subheader]
    if not (any(h.startswith("Gold documents") for h in headers) and any(h.startswith("Retrieved") for h in headers)):
        raise SystemExit(f"the explorer did not draw its gold and retrieved panels while {what}")
    if at.exception:
        raise SystemExit(f"the app raised while {what}: " + "; ".join(str(e.value) for e in at.exception))
    if at.error:
        raise SystemExit(f"the app showed an error while {what}: " + "; ".join(str(e.value) for e in at.error))


def _switch_times(at: Any, query_ids: list[str], switches: int) -> list[float]:
    """Seconds per query switch, visiting the queries in turn (never re-selecting the current one)."""
    times = []
    current = _picker(at).value
    order = [q for q in query_ids if q != current] + ([current] if current in query_ids else [])
    for i in range(switches):
        qid = order[i % len(order)]
        started = time.perf_counter()
        _picker(at).set_value(qid).run()
        times.append(time.perf_counter() - started)
        if _picker(at).value != qid:
            raise SystemExit(f"switching to query {qid} left {at.selectbox(key='w_q').value} selected")
    _check(at, "switching queries")
    return times


def child(mode: str, task: str, system: str, switches: int) -> dict[str, Any]:
    import streamlit.testing.v1  # noqa: F401  (a running server has Streamlit imported already)

    at, first_run, explorer_run = _open_explorer(task, system)
    out: dict[str, Any] = {"first_run": first_run, "explorer_run": explorer_run}
    if mode == "open":
        return out

    from r2med_core import load_demo

    query_ids = list(load_demo(task).queries)
    _, first_run, explorer_run = _open_explorer(task, system)  # a second session, same process
    out["session"] = {"first_run": first_run, "explorer_run": explorer_run}
    out["switch"] = _switch_times(at, query_ids, switches)
    at.toggle(key="w_rewrite_on").set_value(True).run()  # builds the rewritten run once, not timed
    _check(at, "switching HyDE on")
    out["switch_hyde"] = _switch_times(at, query_ids, switches)
    return out


# --------------------------------------------------------------------------- the parent


def _in_child(mode: str, args: argparse.Namespace, cache: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.bench_app", "--child", mode, "--task", args.task]
    command += ["--system", args.system, "--switches", str(args.switches)]
    # A cold start computes by itself, as the figure means: by default work estimated over 2 s waits
    # for a click on "Compute" (R2MED_COMPUTE_SECONDS), and an empty cache would render that button.
    env = {**os.environ, "R2MED_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1", "R2MED_COMPUTE_SECONDS": "3600"}
    return run_child(command, env, f"{mode} ({args.system})")


def run_child(command: list[str], env: dict[str, str], what: str) -> dict[str, Any]:
    """Run a benchmark child process and return the JSON it printed on its ``RESULT`` line."""
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    result_lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not result_lines:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"benchmark child {what} failed with code {done.returncode}")
    return json.loads(result_lines[-1].removeprefix("RESULT "))


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="clinical-evidence", help="demo task (qa-reference|clinical-evidence|…)")
    parser.add_argument("--switches", type=int, default=24, help="query switches timed (at least 20)")
    parser.add_argument("--systems", default="bm25,minilm", help="explorer systems to start on, comma-separated")
    parser.add_argument("--child", choices=["open", "switch"], help=argparse.SUPPRESS)
    parser.add_argument("--system", default="bm25", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.switches = max(20, args.switches)

    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.task, args.system, args.switches)), flush=True)
        return

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    starts: list[tuple[str, dict[str, Any]]] = []
    reruns: list[tuple[str, list[float]]] = []
    with tempfile.TemporaryDirectory(prefix="r2med-bench-app-") as tmp:
        cache = Path(tmp) / "cache"
        print(f"demo task {args.task}; R2MED_CACHE_DIR={cache} (empty); each start in a new process")
        for system in systems:
            args.system = system
            name = SYSTEM_LABELS.get(system, system)
            starts.append((f"(a) cold start, explorer on {name}", _in_child("open", args, cache)))
            starts.append((f"(b) warm start (disk cache), {name}", _in_child("open", args, cache)))
        args.system = systems[0]
        measured = _in_child("switch", args, cache)
        name = SYSTEM_LABELS.get(systems[0], systems[0])
        starts.append((f"(b') new session, running server, {name}", measured["session"]))
        reruns.append((f"(c) query switch, {name}", measured["switch"]))
        reruns.append((f"(c) query switch, {name}, HyDE on", measured["switch_hyde"]))

    print(f"\n{'start':<44}{'total (s)':>11}{'1st run (s)':>13}{'explorer (s)':>14}")
    for label, timing in starts:
        total = timing["first_run"] + timing["explorer_run"]
        print(f"{label:<44}{total:>11.2f}{timing['first_run']:>13.2f}{timing['explorer_run']:>14.2f}")
    print("  1st run: at.run() (router, sidebar, default page); explorer: at.switch_page(explorer).run().")

    print(f"\n{'rerun':<44}{'n':>4}{'median (ms)':>13}{'p90 (ms)':>10}{'max (ms)':>10}   target")
    for label, times in reruns:
        ms = [t * 1000 for t in times]
        median, p90 = statistics.median(ms), _percentile(ms, 0.9)
        verdict = "ok" if p90 < TARGET_MS else "MISSED"
        print(f"{label:<44}{len(ms):>4}{median:>13.1f}{p90:>10.1f}{max(ms):>10.1f}   < {TARGET_MS:.0f} ms ({verdict})")


if __name__ == "__main__":
    main()
