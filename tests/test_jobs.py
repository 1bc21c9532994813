"""Background jobs and compute gating: a URL selects only what is computed or cheap; long work runs in a
shared background job with progress, docs/s, ETA and Cancel, and resumes after a cancel or a crash."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from r2med_core import load_demo, run_system
from r2med_core.compute.jobs import REGISTRY, Job, JobRegistry, estimate_seconds, is_computed, run_job_key, start_run
from r2med_core.systems import SpecError

APP = str(Path(__file__).resolve().parent.parent / "r2med_app" / "streamlit_app.py")
TASK = "clinical-case"


def test_one_job_per_key_with_progress_cancel_and_failure() -> None:
    registry = JobRegistry()
    gate = threading.Event()
    calls: list[int] = []

    def work(job):  # type: ignore[no-untyped-def]
        calls.append(1)
        for i in range(1000):
            job.progress(i / 1000, f"step {i}")
            gate.wait(0.01)
        return "finished"

    first = registry.start(("k",), "slow", work)
    second = registry.start(("k",), "slow", work)
    assert second is first  # a second visitor joins the running job
    time.sleep(0.3)
    status = registry.status(("k",))
    assert status is not None and status.state == "running" and 0 < status.fraction < 1
    assert status.message.startswith("step")
    assert registry.cancel(("k",))
    assert first.wait(10) and first.state == "cancelled"
    assert len(calls) == 1

    def broken(job):  # type: ignore[no-untyped-def]
        raise ValueError("bad input in corpus.jsonl:3")

    failed = registry.start(("bad",), "broken", broken)
    assert failed.wait(10)
    assert failed.state == "failed" and "corpus.jsonl:3" in registry.status(("bad",)).error

    again = registry.start(("k",), "slow", lambda job: "quick")  # a finished key can start again
    assert again is not first and again.wait(10) and again.result == "quick"


def test_estimates_say_what_is_cheap_and_what_needs_a_click() -> None:
    dataset = load_demo(TASK)
    assert not is_computed(dataset, "bm25")
    assert estimate_seconds(dataset, "bm25") < 2  # 100 documents: cheap, a URL may start it
    assert estimate_seconds(dataset, "minilm") > 2  # a model to load and a corpus to encode
    assert estimate_seconds(dataset, "rrf(bm25,minilm)") > estimate_seconds(dataset, "minilm")
    run_system(dataset, "bm25")
    assert is_computed(dataset, "bm25") and estimate_seconds(dataset, "bm25") == 0.0
    with pytest.raises(SpecError):
        estimate_seconds(dataset, "bm25+hyde:no-such-llm")


def test_a_dense_job_reports_docs_per_second_and_eta_and_resumes_after_cancel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import r2med_core.retrieval.encoding as encoding

    monkeypatch.setattr(encoding, "CHUNK_DOCS", 8)
    monkeypatch.setattr(encoding, "busy_factor", lambda: 1.0)  # the two estimates compare work, not load
    dataset = load_demo(TASK)
    cold = estimate_seconds(dataset, "minilm")
    job = start_run(dataset, "minilm")
    assert REGISTRY.get(run_job_key(dataset, "minilm")) is job
    seen = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and job.state == "running":
        status = job.status()
        if status.done and status.docs_per_s and status.eta_seconds is not None:
            seen = status
            break
        time.sleep(0.2)
    assert seen is not None, "no documents/s and ETA while encoding"
    assert 0 < seen.done < seen.total == len(dataset.corpus)
    REGISTRY.cancel(job.key)
    assert job.wait(120) and job.state == "cancelled"
    assert not is_computed(dataset, "minilm")
    assert estimate_seconds(dataset, "minilm") < cold  # the finished chunks count

    resumed = start_run(dataset, "minilm")
    assert resumed.wait(600) and resumed.state == "done", resumed.error
    assert is_computed(dataset, "minilm")
    assert resumed.result.rankings == run_system(dataset, "minilm").rankings


def _fresh_server() -> None:
    """Forget what earlier AppTests of this process kept in memory (a new server starts empty)."""
    import streamlit as st

    st.cache_resource.clear()
    st.cache_data.clear()


def test_a_url_naming_slow_systems_starts_nothing_until_compute_is_clicked(_isolated_cache: Path) -> None:
    _fresh_server()
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params["task"] = TASK
    at.query_params["systems"] = ["bm25-okapi", "minilm"]
    at.run()
    at.switch_page("views/pages/metrics.py").run()
    assert not at.exception, [e.value for e in at.exception]

    def dense_entries() -> list[Path]:
        return [p for kind in ("dense", "dense-chunks") for p in (_isolated_cache / kind).glob("*")]

    assert dense_entries() == []  # no encoding started by opening a link
    buttons = [b for b in at.button if b.label.startswith("Compute (≈")]
    assert len(buttons) == 1 and "minilm" in buttons[0].key
    assert not is_computed(load_demo(TASK), "minilm")
    means = next(t.value for t in at.table if "what it says" in t.value.columns)  # a column per system
    assert len(means.columns) == 2  # the cheap system is shown meanwhile

    buttons[0].click().run()
    job = REGISTRY.get(run_job_key(load_demo(TASK), "minilm"))
    assert job is not None
    assert at.get("progress") or job.state != "running"  # the progress of the job, not a frozen page
    assert any(b.label == "Cancel" for b in at.button) or job.state != "running"
    assert job.wait(600) and job.state == "done", job.error
    at.run()
    assert not at.exception
    means = next(t.value for t in at.table if "what it says" in t.value.columns)
    assert len(means.columns) == 3
    assert not [b for b in at.button if b.label.startswith("Compute (≈")]


def test_reranking_from_a_link_waits_for_a_click_then_runs_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from .test_app import gold_table
    from .test_rerank import build_cross_encoder

    model = str(build_cross_encoder(tmp_path / "ce", num_labels=1, seed=3))
    monkeypatch.setenv("R2MED_ALLOW_MODELS", model)  # a link names a local model only if the operator allows it
    _fresh_server()
    at = AppTest.from_file(APP, default_timeout=300)
    for name, value in {"task": TASK, "system": "bm25", "rerank": model}.items():
        at.query_params[name] = value
    at.run()
    at.switch_page("views/pages/explorer.py").run()
    assert not at.exception, [e.value for e in at.exception]
    gold = gold_table(at)
    assert "after rerank" not in gold.columns  # nothing reranked yet
    button = next(b for b in at.button if b.label.startswith("Rerank with"))
    button.click().run()
    job = next(j for j in REGISTRY.jobs() if j.key[0] == "rerank" and j.label.endswith(model))
    assert job.wait(600) and job.state == "done", job.error
    at.run()
    gold = gold_table(at)
    assert "after rerank" in gold.columns


def test_progress_comes_every_batch_not_every_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 256-document chunk on a slow CPU took 45 s before its first report: now every batch reports,
    and Cancel stops the work within a batch."""
    import r2med_core.retrieval.encoding as encoding

    seen: list[int] = []
    texts = [f"document number {i} " * 5 for i in range(100)]

    def encode(batch: list[str]):  # type: ignore[no-untyped-def]
        return np.ones((len(batch), 4), dtype=np.float32)

    def progress(fraction: float, message: str) -> None:
        status = encoding.status({"test": "batches"})
        if status is not None:
            seen.append(status.done)

    vectors = encoding.encode_corpus(encode, texts, {"test": "batches"}, chunk_docs=256, progress=progress)
    assert vectors.shape == (100, 4)
    assert seen[:5] == [0, 32, 64, 96, 100]  # one chunk, four batches, each reported


def test_the_eta_counts_down_between_reports_and_estimates_follow_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    import r2med_core.retrieval.encoding as encoding

    status = encoding.EncodeStatus(10, 100, 2.0, 30.0, measured_at=time.monotonic() - 12)
    assert 17.5 < status.eta_now() <= 18.0  # type: ignore[operator]
    assert encoding.EncodeStatus(10, 100, 2.0, 5.0, measured_at=time.monotonic() - 60).eta_now() == 0.0

    monkeypatch.setattr(encoding, "busy_factor", lambda: 1.0)
    idle = encoding.docs_per_s("minilm", "cpu")
    monkeypatch.setattr(encoding, "busy_factor", lambda: 4.0)  # four times as much work as cores
    assert encoding.docs_per_s("minilm", "cpu") == pytest.approx(idle / 4)
    assert encoding.docs_per_s("minilm", "cuda") == encoding.docs_per_s("minilm", "cuda")  # a GPU: not scaled


def test_compute_right_after_cancel_starts_a_new_job_that_runs_to_the_end() -> None:
    """Compute clicked while the old job is still stopping used to return the dying job."""
    started = threading.Event()
    release = threading.Event()

    def slow(job):  # type: ignore[no-untyped-def]
        started.set()
        while not release.wait(0.01):
            job.progress(0.5, "working")
        job.progress(0.9, "last report")  # raises Cancelled if Cancel was pressed
        return "finished"

    key = ("test", "cancel-then-compute")
    first = REGISTRY.start(key, "slow", slow)
    assert started.wait(5)
    assert REGISTRY.cancel(key)
    assert first.cancelling and REGISTRY.status(key).state == "cancelling"  # type: ignore[union-attr]
    second = REGISTRY.start(key, "slow", lambda job: "finished")
    assert second is not first
    release.set()
    assert first.wait(5) and first.state == "cancelled"
    assert second.wait(5) and second.state == "done" and second.result == "finished"
    assert REGISTRY.get(key) is second


def test_a_page_shows_a_running_job_instead_of_computing_the_same_run_again(_isolated_cache: Path) -> None:
    """A cheap system whose job is still running (its index built, its queries not yet searched) used to
    be computed a second time by every page opened meanwhile: at 357k documents, seconds of duplicate
    work on the page's thread. The page shows the job's progress instead."""
    _fresh_server()
    dataset = load_demo(TASK)
    assert estimate_seconds(dataset, "bm25") <= 60  # cheap: a page would compute it by itself
    started, release = threading.Event(), threading.Event()

    def slow(job):  # type: ignore[no-untyped-def]
        started.set()
        while not release.wait(0.01):
            job.progress(0.5, "Searching")

    key = run_job_key(dataset, "bm25")
    REGISTRY.start(key, "BM25", slow)
    try:
        assert started.wait(5)
        at = AppTest.from_file(APP, default_timeout=300)
        at.query_params["task"] = TASK
        at.query_params["systems"] = ["bm25"]
        at.run()
        at.switch_page("views/pages/metrics.py").run()
        assert not at.exception, [e.value for e in at.exception]
        assert not is_computed(dataset, "bm25")  # the page did not run it itself
        assert any(b.label == "Cancel" for b in at.button)  # it shows the running job
    finally:
        release.set()
        REGISTRY.get(key).wait(5)  # type: ignore[union-attr]
        REGISTRY.forget(key)


def test_bm25_jobs_take_turns_and_a_waiting_one_can_be_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two BM25 runs computed in two threads of one server cost 1.13x the CPU and wall time of one after
    the other (they only contend for the GIL; benchmarks/bench_compare.py), so BM25 jobs take turns; a
    job that does not hold the GIL (a dense encoding) does not wait, and a waiting job still cancels."""
    import r2med_core.systems

    dataset = load_demo(TASK)
    spans: dict[str, list[float]] = {}
    release = threading.Event()

    def fake_run_system(dataset, spec, k=100, progress=None):  # type: ignore[no-untyped-def]
        spans[spec.name] = [time.monotonic()]
        if spec.name == "bm25":
            assert release.wait(10)
        else:
            time.sleep(0.2)
        spans[spec.name].append(time.monotonic())

    monkeypatch.setattr(r2med_core.systems, "run_system", fake_run_system)
    names = ("bm25", "bm25s", "bm25-okapi", "minilm")
    for name in names:
        REGISTRY.forget(run_job_key(dataset, name))
    first = start_run(dataset, "bm25")
    second = start_run(dataset, "bm25s")
    third = start_run(dataset, "bm25-okapi")
    dense = start_run(dataset, "minilm")
    try:
        assert dense.wait(5) and dense.state == "done"  # ran while the first BM25 job held the turn
        time.sleep(0.3)
        assert "bm25s" not in spans and second.state == "running" and second.message.startswith("Waiting")
        REGISTRY.cancel(third.key)
        assert third.wait(5) and third.state == "cancelled" and "bm25-okapi" not in spans
        release.set()
        assert first.wait(5) and second.wait(5) and second.state == "done"
        assert spans["bm25s"][0] >= spans["bm25"][1]  # one after the other
    finally:
        release.set()
        for job in (first, second, third, dense):
            job.wait(5)
        for name in names:
            REGISTRY.forget(run_job_key(dataset, name))


def test_a_jobs_eta_never_grows_while_its_fraction_stands_still(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    job = Job(("eta",), "an LLM job")
    job.progress(0.0, "0/4 requests")
    clock[0] = 120.0
    job.progress(0.25, "1/4 requests")  # one reply in 20 s: three more at that rate
    seen = []
    for now in (120.0, 130.0, 150.0, 185.0):  # the next reply is pending (the same fraction is reported again)
        clock[0] = now
        job.progress(0.25, "1/4 requests")
        seen.append(job.status().eta_seconds)
    assert seen == [60.0, 50.0, 30.0, 0.0]
