"""The compute workbench (issue 37): one call says where a piece of long work stands — Ready, NeedsClick,
Running or Failed — under the operator's one Settings (secrets included), the paid-LLM click rule and the
process's jobs, so every page that shows it renders the same state."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from r2med_core.analysis.diagnosis import DEFAULT_ORACLE, diagnose
from r2med_core.analysis.verdicts import summary, verdict
from r2med_core.compute.jobs import JobRegistry, run_job_key
from r2med_core.compute.workbench import Failed, Memo, NeedsClick, Ready, Running, Workbench, short_words
from r2med_core.data import load_demo
from r2med_core.kinds.base import is_computed
from r2med_core.settings import load_settings
from r2med_core.systems import run_system

TASK = "clinical-case"


def bench(**secrets: str) -> Workbench:
    """A workbench with its own jobs and memory (a fresh server), the settings read with these secrets."""
    return Workbench(load_settings(extra=secrets), registry=JobRegistry(), memo=Memo())


def test_a_cheap_run_is_ready_at_once_and_kept_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("R2MED_COMPUTE_SECONDS", raising=False)
    dataset, wb = load_demo(TASK), bench()
    reports: list[tuple[float, str]] = []
    found = wb.results(dataset, "bm25", progress=lambda f, m: reports.append((f, m)))
    assert isinstance(found, Ready)
    run, results = found.value
    assert run.name == "bm25" and set(results.means) >= {"ndcg_at_10"}
    assert reports and reports[0] == (0.0, "Computing BM25 (R2MED official) …")  # said before any work
    assert wb.in_memory(dataset, "bm25") and wb.ready(dataset, "bm25")
    before = len(reports)
    again = wb.results(dataset, "bm25", progress=lambda f, m: reports.append((f, m)))
    assert isinstance(again, Ready) and again.value[0] is run  # from memory: nothing computed again
    assert len(reports) == before


def test_compute_seconds_from_secrets_decides_what_needs_a_click(monkeypatch: pytest.MonkeyPatch) -> None:
    """The threshold is the one Settings' (environment, then secrets): one set only in secrets counts."""
    monkeypatch.delenv("R2MED_COMPUTE_SECONDS", raising=False)
    dataset = load_demo(TASK)
    assert bench().ready(dataset, "bm25")
    strict = bench(R2MED_COMPUTE_SECONDS="0.01")
    assert not strict.ready(dataset, "bm25")
    offer = strict.run(dataset, "bm25")
    assert isinstance(offer, NeedsClick)
    assert offer.action == "Compute" and offer.seconds is not None and offer.seconds > 0.01
    assert offer.headline == "is not computed on this task yet." and offer.handle == "compute:bm25"
    assert offer.key == run_job_key(dataset, "bm25") and offer.label == "BM25 (R2MED official)"
    assert not is_computed(dataset, "bm25")  # asking computed nothing


def test_a_click_starts_one_background_job_whose_result_is_then_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("R2MED_COMPUTE_SECONDS", raising=False)
    dataset, wb = load_demo(TASK), bench(R2MED_COMPUTE_SECONDS="0.01")
    offer = wb.run(dataset, "bm25")
    assert isinstance(offer, NeedsClick)
    from r2med_core.compute.jobs import REGISTRY

    wb.registry = REGISTRY  # a run's job is started by its own driver, in the process's registry
    wb.start(offer)
    job = REGISTRY.get(offer.key)
    assert job is not None
    try:
        state = wb.run(dataset, "bm25")
        assert isinstance(state, Running) or job.state != "running"
        assert job.wait(300) and job.state == "done", job.error
        assert isinstance(wb.run(dataset, "bm25"), Ready)  # on disk now: cheap to load
    finally:
        REGISTRY.forget(offer.key)


def test_llm_requests_never_start_without_a_click_whatever_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    from r2med_core.kinds import base

    dataset = load_demo(TASK)
    monkeypatch.setattr("r2med_core.compute.workbench.needs_click", lambda dataset, system: True)
    monkeypatch.setattr(base, "needs_click", lambda dataset, system: True)
    wb = bench(R2MED_COMPUTE_SECONDS="100000")
    assert not wb.ready(dataset, "bm25")
    assert isinstance(wb.run(dataset, "bm25"), NeedsClick)


def test_a_job_is_offered_then_running_then_ready_and_offered_again() -> None:
    wb = bench()
    release = threading.Event()

    def work(job):  # type: ignore[no-untyped-def]
        while not release.wait(0.01):
            job.progress(0.5, "half")
        return 42

    offer = wb.offer(("batch", "x"), "a batch", "Run the batch", work)
    assert wb.state_of(offer) == offer
    wb.start(offer)
    assert isinstance(wb.state_of(offer), Running)
    status = wb.status(offer.key)
    assert status is not None and status.label == "a batch"
    release.set()
    job = wb.registry.get(offer.key)
    assert job is not None and job.wait(10)
    done = wb.state_of(offer)
    assert isinstance(done, Ready) and done.value == 42 and done.again == offer


def test_a_failed_job_says_why_and_offers_a_retry_and_a_cancelled_one_resumes() -> None:
    wb = bench()

    def broken(job):  # type: ignore[no-untyped-def]
        raise OSError("disk full")

    offer = wb.offer(("batch", "broken"), "a batch", "Run the batch", broken)
    wb.start(offer)
    job = wb.registry.get(offer.key)
    assert job is not None and job.wait(10)
    failed = wb.state_of(offer)
    assert isinstance(failed, Failed) and failed.message == "a batch failed: OSError: disk full"
    assert failed.retry == offer and not failed.expected

    started, reply = threading.Event(), threading.Event()

    def endless(job):  # type: ignore[no-untyped-def]
        started.set()
        while True:
            reply.wait(30)  # a reply still being written: the next report comes when it is in
            job.progress(0.1, "going")

    offer = wb.offer(("batch", "endless"), "a batch", "Run the batch", endless)
    wb.start(offer)
    assert started.wait(10)
    wb.cancel(offer.key)
    assert isinstance(wb.state_of(offer), Running)  # still stopping: its progress, never a second start
    reply.set()
    job = wb.registry.get(offer.key)
    assert job is not None and job.wait(10) and job.state == "cancelled"
    stopped = wb.state_of(offer)
    assert isinstance(stopped, NeedsClick) and stopped.resumes and stopped.action == "Run the batch"


def test_a_system_that_cannot_run_fails_with_its_reason() -> None:
    found = bench().run(load_demo(TASK), "no-such-system")
    assert isinstance(found, Failed) and "no-such-system" in found.message and found.retry is None


def test_the_landing_and_the_verdict_read_one_diagnosis(tmp_path: Path) -> None:
    """The failures the workbench tells are the analysis functions' own, on the same runs."""
    dataset, wb = load_demo(TASK), bench()
    found = wb.failures(dataset, "bm25", oracle=DEFAULT_ORACLE, rewrite="")
    assert isinstance(found, Ready)
    told = found.value
    run, oracle_run = run_system(dataset, "bm25"), run_system(dataset, DEFAULT_ORACLE)
    made = diagnose(dataset, run, oracle_run, oracle=DEFAULT_ORACLE)
    assert told.diagnosis == made
    assert told.summary == summary(made, "BM25", "BM25")
    assert short_words("bm25", dataset) == "BM25"
    assert told.failed, "the demo has failures to tell"
    for item in made.queries:
        want = verdict(
            dataset, item, run, system_label="BM25", oracle_run=oracle_run, oracle_label="BM25", depth=made.depth
        )
        assert told.verdict(item.query_id) == want
    assert told.verdict("not-a-question") is None
    first = told.failed[0]
    assert told.next_after(first) == (told.failed[1] if len(told.failed) > 1 else None)


def test_the_verdict_waits_for_the_oracle_like_any_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("R2MED_COMPUTE_SECONDS", raising=False)
    dataset = load_demo(TASK)
    wb = bench()
    assert isinstance(wb.run(dataset, "bm25"), Ready)
    wb.settings = load_settings(extra={"R2MED_COMPUTE_SECONDS": "0.0001"})
    waiting = wb.failures(dataset, "bm25", oracle=DEFAULT_ORACLE)
    assert isinstance(waiting, NeedsClick) and waiting.key == run_job_key(dataset, DEFAULT_ORACLE)


def test_an_annotation_store_that_stopped_answering_is_said_where_the_verdict_would_be() -> None:
    from r2med_core.judging.annotations import AnnotationStoreError

    class Gone:
        def list(self, **filters: object) -> list:
            raise AnnotationStoreError("the database server went away")

    found = bench().failures(load_demo(TASK), "bm25", oracle=DEFAULT_ORACLE, store=Gone())  # type: ignore[arg-type]
    assert isinstance(found, Failed)
    assert found.message == "Annotations are unavailable: the database server went away"
