"""The compute workbench: for anything long a page shows, one call says where it stands.

A page asks once — a system's run on a dataset, a reranking of it, an LLM-judge batch, a question's
verdict — and gets one of four states:

* ``Ready(value)``: here it is (from memory, from the disk cache, or computed now because it was cheap);
* ``NeedsClick``: not computed, and too long (or paid: LLM requests) to start without a click; it says
  what it would cost, and ``Workbench.start`` starts it as a background job;
* ``Running``: a background job is at it (every visitor of the server sees the same job);
* ``Failed``: it could not be done, with the message to show and, when a new try can help, the click
  that makes it.

Why one object: whether work may run now, needs a click or already has a job was decided in the app's
view layer and written four times (a run, a reranking, two judge batches), each wording the states
otherwise, and the readiness check read settings without ``.streamlit/secrets.toml``. Here the policy
— the operator's compute threshold from one ``Settings`` (secrets included), the rule that LLM
requests never start without a click, the process's job registry and its in-memory cache, all under
one key scheme — has one home, and a page only renders the state it gets (the app's
``compute_panel``). The derived questions pages share (a system's failures and a question's verdict)
come from here too, so the landing and the explorer cannot tell them differently.

Nothing here draws anything: progress goes through the usual ``Progress`` callback.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from r2med_core.analysis.diagnosis import Diagnosis, QueryDiagnosis, diagnose, judge_proposals
from r2med_core.analysis.verdicts import (
    Summary,
    Verdict,
    next_failure,
    rewrite_summary,
    summary,
    verdict,
    worst_failures,
)
from r2med_core.cache import entry_path, fingerprint
from r2med_core.compute.jobs import REGISTRY, Job, JobRegistry, JobStatus, run_job_key, start_run
from r2med_core.data import Dataset
from r2med_core.evaluation import Results, evaluate
from r2med_core.hub import ModelUnavailable
from r2med_core.judging.annotations import AnnotationStore, AnnotationStoreError
from r2med_core.judging.llm_judge import (
    JUDGE_PROMPT_VERSION,
    BatchReport,
    JudgeAgreement,
    JudgeEstimate,
    Pair,
    ProposalReport,
    estimate,
    judge_agreement,
    judge_endpoint,
    judge_model,
    judge_pairs,
    propose_labels,
    record_agreement,
)
from r2med_core.judging.visibility import Sight
from r2med_core.kinds.base import estimate_seconds, needs_click
from r2med_core.kinds.oracle import reference_answers
from r2med_core.kinds.rerank import rerank_seconds
from r2med_core.llm.client import AnyEndpoint
from r2med_core.llm.generation import generate_rewrites
from r2med_core.llm.prompts import OFFICIAL_PROMPTS, Prompts
from r2med_core.progress import Progress, notify
from r2med_core.retrieval.rerank import RerankerUnavailable, rerank, rerank_key
from r2med_core.runs import Run
from r2med_core.settings import Settings
from r2med_core.systems import (
    SpecError,
    cost_notes,
    default_rewrite,
    parse_system,
    rewrite_words,
    rewritten_name,
    run_system,
    system_words,
)

T = TypeVar("T")

#: Values kept in memory for every session of the process: runs (a real R2MED task's is ~1-2 MB), their
#: results, diagnoses and failures (small), about a third each; the app kept 64 of each kind before.
MEMO_SIZE = 192

#: Said after a Failed message when an unexpected error may come from a model that is not here.
HUB_HINT = "Models other than the offline MiniLM are downloaded from the Hugging Face hub on first use."


# --------------------------------------------------------------------------- states


@dataclass(frozen=True)
class NeedsClick:
    """Work that waits for a click: what it is, what it costs, and how to start it (``Workbench.start``).

    Its button reads ``action``, then ``subject``, then the estimate and whether it resumes
    ("Rerank with bge-reranker (≈ 3 min 05 s) (resumes where it stopped)"): ``action`` is fixed wording of
    the code's, ``subject`` a name that may come from a dataset or a setting (a renderer escapes it)."""

    key: tuple
    #: What the work is, for a sentence and the job's progress ("MiniLM", "reranking with …").
    label: str
    #: The button's fixed words ("Compute", "Rerank with", "Measure agreement (40 requests)").
    action: str
    #: Estimated seconds (None where the cost is counted otherwise, in requests).
    seconds: float | None = None
    #: What it costs besides time (requests, tokens), shown before the click.
    notes: tuple[str, ...] = ()
    #: A sentence after the label ("is not computed on this task yet."), "" for none.
    headline: str = ""
    #: A name the button shows after ``action`` (a model's), "" for none.
    subject: str = ""
    #: A short readable name of the work, stable across visits (a page's widget key for its button).
    handle: str = ""
    #: An earlier job stopped: the finished part is kept and a new start resumes from it.
    resumes: bool = False
    #: Cancel was pressed and the earlier job has not stopped yet.
    cancelling: bool = False
    #: Starts the work as a background job (``Workbench.start`` calls it).
    begin: Callable[[], object] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Ready(Generic[T]):
    """Here it is. ``again``: the click that runs it anew (a batch whose result a page shows above its button)."""

    value: T
    again: NeedsClick | None = None


@dataclass(frozen=True)
class Running:
    """A background job is at it; its status is read by key (``Workbench.status``) as it moves."""

    key: tuple
    label: str


@dataclass(frozen=True)
class Failed:
    """It could not be done: ``message`` says why, in words; ``retry`` is the click that tries again, if any.
    ``expected``: a setting or an absent model explains it (a warning, not an error)."""

    message: str
    retry: NeedsClick | None = None
    expected: bool = False


State = Ready[T] | NeedsClick | Running | Failed


def dataset_key(dataset: Dataset) -> str:
    """The key of a dataset's identity: its source, files and content (an edited folder is another key)."""
    return f"{dataset.source}|{dataset.fingerprint}|{dataset.content_digest}"


class Memo:
    """A small thread-safe LRU of computed values, shared by every session of the process (the disk
    cache keeps them across processes; this keeps a reopened page from reading them again)."""

    def __init__(self, size: int = MEMO_SIZE) -> None:
        self.size = size
        self._values: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._values

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The value under ``key``, computed (outside the lock: it may take minutes) when absent."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = compute()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


#: The process's memo (a Streamlit server: all its sessions).
MEMO = Memo()


# --------------------------------------------------------------------------- failures (derived)


@dataclass(frozen=True)
class Failures:
    """Where one system fails on a task, told once from one diagnosis: the landing's sentences and cards,
    the explorer's failure classes and its verdict above each question are all read from this value, so
    they cannot tell it differently. Every judged question's verdict is made with it (a page only looks
    one up)."""

    system: str
    diagnosis: Diagnosis
    summary: Summary
    #: Each judged question's verdict, by query id.
    verdicts: Mapping[str, Verdict] = field(repr=False)
    #: What the rewrite in view did on the task (None when its run is not ready or there is none).
    rewrite_line: str | None = None

    @property
    def failed(self) -> list[str]:
        """The failed questions in task order."""
        return [q.query_id for q in self.diagnosis.queries if q.failed]

    def worst(self, limit: int) -> list[QueryDiagnosis]:
        """The failed questions most worth a look first (``verdicts.worst_failures``)."""
        return worst_failures(self.diagnosis, limit)

    def next_after(self, query_id: str) -> str | None:
        """The failed question after ``query_id`` in task order (wrapping round), None when there is no other."""
        return next_failure(self.failed, query_id)

    def verdict(self, query_id: str) -> Verdict | None:
        """One question's verdict (None for a question the diagnosis does not hold: not judged)."""
        return self.verdicts.get(query_id)


def short_words(name: str, dataset: Dataset | None = None) -> str:
    """A system's name for a sentence: its label without the parenthesised note ("BM25")."""
    return system_words(name, dataset).split(" (", 1)[0]


# --------------------------------------------------------------------------- the workbench


class Workbench:
    """The compute policy for one set of operator settings over the process's jobs and memo."""

    def __init__(self, settings: Settings, registry: JobRegistry = REGISTRY, memo: Memo = MEMO) -> None:
        self.settings = settings
        self.registry = registry
        self.memo = memo

    # ---- runs

    def in_memory(self, dataset: Dataset, system: str) -> bool:
        """Whether the run is in memory: showing it costs nothing (a page need not say it is getting it ready)."""
        return ("run", dataset_key(dataset), system) in self.memo

    def ready(self, dataset: Dataset, system: str) -> bool:
        """Whether ``results`` would give the run without a click: in memory, on disk, or cheap (under the
        operator's threshold), and no job at it. A URL may select only such systems."""
        if self.in_memory(dataset, system):
            return True
        job = self.registry.get(run_job_key(dataset, system))
        if job is not None and job.active:
            return False
        if needs_click(dataset, system):  # LLM requests cost the operator money: never without a click
            return False
        return estimate_seconds(dataset, system) <= self.settings.compute_seconds

    def run(self, dataset: Dataset, system: str, *, progress: Progress | None = None) -> State[Run]:
        """The system's run: computed now when cheap (``progress`` reports), else the job or the click."""
        label = system_words(system, dataset)
        try:
            if not self.ready(dataset, system):
                return self._run_offer(dataset, system, label)

            def compute() -> Run:
                notify(progress, 0.0, f"Computing {label} …")
                return run_system(dataset, system, progress=progress)

            return Ready(self.memo.get(("run", dataset_key(dataset), system), compute))
        except SpecError as err:
            return Failed(str(err))
        except ModelUnavailable as err:  # its message says what to install, set or download
            return Failed(f"{label} could not run: {err}")
        except Exception as err:
            return Failed(f"{label} could not run: {type(err).__name__}: {err}. {HUB_HINT}")

    def results(self, dataset: Dataset, system: str, *, progress: Progress | None = None) -> State[tuple[Run, Results]]:
        """The run and its evaluation against the dataset's qrels (pytrec_eval), or where the run stands."""
        found = self.run(dataset, system, progress=progress)
        if not isinstance(found, Ready):
            return found
        run = found.value
        key = ("results", dataset_key(dataset), system, run.seconds, len(run.rankings))
        scored = self.memo.get(
            key, lambda: evaluate(run, dataset.qrels, dataset_name=dataset.name, seconds=run.seconds)
        )
        return Ready((run, scored))

    def _run_offer(self, dataset: Dataset, system: str, label: str) -> State[Run]:
        key = run_job_key(dataset, system)
        job = self.registry.get(key)
        if job is not None and job.active:
            return Running(key, label)
        stopped = job is not None and (job.state == "cancelled" or job.cancelling)
        offer = NeedsClick(
            key,
            label,
            "Compute",
            seconds=estimate_seconds(dataset, system),
            notes=tuple(cost_notes(dataset, system)),
            headline="is not computed on this task yet.",
            handle=f"compute:{system}",
            resumes=stopped,
            cancelling=job is not None and job.cancelling,
            begin=lambda: start_run(dataset, system),  # its own driver: the GIL turn, the encoding watcher
        )
        if job is not None and job.state == "failed":
            return Failed(f"{label} failed: {job.error}", retry=offer)
        return offer

    # ---- reranking

    def rerank(
        self, dataset: Dataset, system: str, model: str, k: int, *, progress: Progress | None = None
    ) -> State[Run]:
        """The system's run reranked by a cross-encoder over its top ``k``: computed now when on disk or
        cheap, else the job or the click; a reranker that cannot load here is ``Failed(expected=True)``,
        remembered so the hub is not asked again on every look."""
        base = self.run(dataset, system, progress=progress)
        if not isinstance(base, Ready):
            return base
        run = base.value
        memo_key = ("rerank", dataset_key(dataset), system, model, k)

        def attempt() -> Run | RerankerUnavailable:
            try:
                notify(progress, 0.0, f"Reranking with {model} …")
                return rerank(run, dataset, model, k, progress=progress)
            except RerankerUnavailable as err:
                return err

        if memo_key not in self.memo:
            try:
                key = rerank_key(run, dataset, model, k)
            except RerankerUnavailable:
                key = None  # the attempt says why reranking is off
            if key is not None:
                seconds = 0.0 if entry_path("rerank", key).is_dir() else rerank_seconds(len(run.rankings), k)
                if seconds > self.settings.compute_seconds:
                    offer = self.offer(
                        ("rerank", fingerprint("rerank", key)),
                        f"reranking with {model}",
                        "Rerank with",
                        lambda job: rerank(run, dataset, model, k, progress=job.progress),
                        seconds=seconds,
                        subject=model,
                        handle=f"rerank:{system}",
                    )
                    return self.state_of(offer)
        outcome = self.memo.get(memo_key, attempt)
        if isinstance(outcome, RerankerUnavailable):
            return Failed(f"Reranking is off: {outcome}", expected=True)
        return Ready(outcome)

    # ---- any job

    def state_of(self, offer: NeedsClick) -> State[Any]:
        """Where the work ``offer`` starts stands: not started (the offer), running or being cancelled (its
        progress: a new start would send the requests the stopping job is still sending), stopped (the
        offer, resuming), failed (the error and the offer again), or done (its result, and the offer again)."""
        job = self.registry.get(offer.key)
        if job is None:
            return offer
        if job.state == "running":
            return Running(offer.key, offer.label)
        if job.state == "done":
            return Ready(job.result, again=offer)
        if job.state == "failed":
            return Failed(f"{offer.label} failed: {job.error}", retry=offer)
        return _resuming(offer)

    def offer(
        self,
        key: tuple,
        label: str,
        action: str,
        work: Callable[[Job], Any],
        *,
        seconds: float | None = None,
        notes: tuple[str, ...] = (),
        subject: str = "",
        handle: str = "",
    ) -> NeedsClick:
        """The click that runs ``work(job)`` as the background job ``key`` (``job.progress`` reports)."""
        registry = self.registry

        def begin() -> Job:
            return registry.start(key, label, work)

        return NeedsClick(key, label, action, seconds, notes, subject=subject, handle=handle or key[0], begin=begin)

    @staticmethod
    def start(offer: NeedsClick) -> None:
        """Start the offered work as a background job (joined, when one with its key is running)."""
        if offer.begin is None:
            raise ValueError(f"{offer.label}: nothing to start")
        offer.begin()

    def cancel(self, key: tuple) -> bool:
        return self.registry.cancel(key)

    def status(self, key: tuple) -> JobStatus | None:
        return self.registry.status(key)

    # ---- LLM-judge batches

    def proposals(
        self,
        dataset: Dataset,
        store: AnnotationStore,
        endpoint: AnyEndpoint,
        pairs: list[Pair],
        threshold: int,
        cost: JudgeEstimate | None = None,
    ) -> State[tuple[BatchReport, ProposalReport]]:
        """The LLM judge grading ``pairs`` and proposing those at or above ``threshold`` for review: never
        without a click (it sends requests), its result shown above the button that runs it again."""
        cost = estimate(dataset, pairs, endpoint) if cost is None else cost  # a page showing it hands it in
        action = f"Judge {cost.requests} pairs and propose labels" if cost.requests else "Propose labels (all cached)"

        def work(job: Job) -> tuple[BatchReport, ProposalReport]:
            judged = judge_pairs(dataset, pairs, endpoint, progress=job.progress)
            return judged, propose_labels(store, dataset, pairs, judged.results, endpoint, threshold=threshold)

        key = self._judge_key("llm-judge", dataset, endpoint, pairs, threshold)
        return self.state_of(self.offer(key, f"LLM judge ({judge_model(endpoint)})", action, work))

    def agreement(
        self,
        dataset: Dataset,
        endpoint: AnyEndpoint,
        sample: list[Pair],
        threshold: int,
        cost: JudgeEstimate | None = None,
    ) -> State[tuple[BatchReport, JudgeAgreement]]:
        """The LLM judge's agreement with the qrels on ``sample`` (recorded when measured), like ``proposals``."""
        cost = estimate(dataset, sample, endpoint) if cost is None else cost

        def work(job: Job) -> tuple[BatchReport, JudgeAgreement]:
            judged = judge_pairs(dataset, sample, endpoint, progress=job.progress)
            measured = judge_agreement(dataset, sample, judged.results, endpoint, threshold=threshold)
            if measured.pairs:
                record_agreement(dataset, measured, endpoint)
            return judged, measured

        key = self._judge_key("llm-judge-agreement", dataset, endpoint, sample, threshold)
        label = f"LLM judge agreement ({judge_model(endpoint)})"
        return self.state_of(self.offer(key, label, f"Measure agreement ({cost.requests} requests)", work))

    # ---- rewrite generation

    def generation(
        self,
        dataset: Dataset,
        method: str,
        endpoint: AnyEndpoint,
        *,
        llm_name: str,
        query_ids: list[str],
        prompts: Prompts = OFFICIAL_PROMPTS,
        first_stage: Run | None = None,
        workers: int = 1,
    ) -> State[BatchReport]:
        """A batch of live rewrites (``generate_rewrites``) as a background job, only after a click (it sends
        requests): it goes on when its page is left, and a stopped batch resumes from its cached replies."""

        def work(job: Job) -> BatchReport:
            return generate_rewrites(
                dataset, method, endpoint, llm_name=llm_name, first_stage=first_stage, progress=job.progress,
                prompts=prompts, workers=workers, query_ids=query_ids,
            )  # fmt: skip

        # Keyed by what the requests are made of, not ``dataset_key``: the set this batch records is attached
        # to the dataset as a rewrite when it ends, which makes another dataset key, and the ended job unseen.
        asked = {qid: dataset.queries.get(qid) for qid in query_ids}
        key = (
            "generate",
            fingerprint(
                "generate", dataset.source, dataset.name, dataset.fingerprint, asked, method, endpoint.identity(),
                llm_name, prompts.name, prompts.examples, first_stage.name if first_stage is not None else None,
            ),
        )  # fmt: skip
        return self.state_of(self.offer(key, f"{method} rewrites by {llm_name}", "Generate", work))

    @staticmethod
    def _judge_key(kind: str, dataset: Dataset, endpoint: AnyEndpoint, pairs: list[Pair], threshold: int) -> tuple:
        """One batch per dataset, judge (model and sampling), prompt, pairs and threshold."""
        units = [(p.query_id, p.doc_id) for p in pairs]
        identity = judge_endpoint(endpoint).identity()
        return (kind, fingerprint(kind, dataset_key(dataset), identity, JUDGE_PROMPT_VERSION, units, threshold))

    # ---- derived: failures and verdicts

    def diagnosis(
        self,
        dataset: Dataset,
        system: str,
        *,
        oracle: str,
        store: AnnotationStore | None = None,
        sight: Sight | None = None,
        progress: Progress | None = None,
    ) -> State[tuple[Diagnosis, Run, Run | None]]:
        """The system's failure diagnosis against ``oracle`` (with the two runs it read), or where the
        runs stand: the oracle's run waits for a click like any other when it is not cheap. The LLM judge's
        proposals in ``store`` count (those ``sight`` may see; ``judge_proposals``)."""
        try:
            proposals = judge_proposals(store, dataset, sight) if store is not None else {}
        except AnnotationStoreError as err:
            return Failed(f"Annotations are unavailable: {err}")
        found = self.run(dataset, system, progress=progress)
        if not isinstance(found, Ready):
            return found
        oracle_run = None
        if reference_answers(dataset):  # without answers the oracle cannot run
            answered = self.run(dataset, oracle, progress=progress)
            if not isinstance(answered, Ready):
                return answered
            oracle_run = answered.value
        run = found.value
        proposed = tuple(sorted((q, tuple(sorted(d))) for q, d in proposals.items()))
        key = ("diagnosis", dataset_key(dataset), system, oracle, proposed, id(run), id(oracle_run))
        # The entry holds the runs it names by id, so no other object can take their ids while it lives.
        return Ready(
            self.memo.get(
                key,
                lambda: (
                    diagnose(dataset, run, oracle_run, oracle=oracle, proposals=proposals),
                    run,
                    oracle_run,
                ),
            )
        )

    def failures(
        self,
        dataset: Dataset,
        system: str,
        *,
        oracle: str,
        rewrite: str | None = None,
        store: AnnotationStore | None = None,
        sight: Sight | None = None,
        progress: Progress | None = None,
    ) -> State[Failures]:
        """Where ``system`` fails on the task, told against ``oracle`` (proposals as in ``diagnosis``), with
        what ``rewrite`` (``method:llm``; None: the one views start from, ``systems.default_rewrite``; "":
        none) did when its run is ready without a click (nothing is started for it here)."""
        found = self.diagnosis(dataset, system, oracle=oracle, store=store, sight=sight, progress=progress)
        if not isinstance(found, Ready):
            return found
        made, run, oracle_run = found.value
        told = _Telling(dataset, run, oracle_run, oracle)
        rewrite = default_rewrite(dataset) if rewrite is None else rewrite
        if rewrite:
            told = self._with_rewrite(told, system, rewrite, progress)
        key = ("failures", id(made), told.rewrite, id(told.rewrite_run))
        # The entry holds what it names by id (the diagnosis, the rewrite's run), so no other object takes
        # those ids while it lives.
        return Ready(self.memo.get(key, lambda: (told.failures(system, made), told.rewrite_run))[0])

    def _with_rewrite(self, told: _Telling, system: str, rewrite: str, progress: Progress | None) -> _Telling:
        """What is told of ``rewrite`` (``method:llm``): its words, and its run when ready without a click."""
        method, _, llm = rewrite.partition(":")
        told = replace(told, rewrite=(method, llm), rewrite_words=rewrite_words(rewrite, told.dataset))
        try:
            name = rewritten_name(system, rewrite)
        except SpecError:
            return told
        if name == system or not self.ready(told.dataset, name):
            return told
        rewritten, base = self.results(told.dataset, name, progress=progress), self.results(told.dataset, system)
        if not isinstance(rewritten, Ready) or not isinstance(base, Ready):
            return told
        return replace(told, rewrite_run=rewritten.value[0], results=(base.value[1], rewritten.value[1]))


@dataclass(frozen=True)
class _Telling:
    """What a system's failures are told from: the runs and the words for them."""

    dataset: Dataset
    run: Run
    oracle_run: Run | None
    oracle: str
    rewrite: tuple[str, str] | None = None
    rewrite_words: str = ""
    rewrite_run: Run | None = None
    #: The results without and with the rewrite, when its run is ready.
    results: tuple[Results, Results] | None = None

    def failures(self, system: str, made: Diagnosis) -> Failures:
        try:
            members = parse_system(self.oracle).members
        except SpecError:
            members = ()
        oracle_words = members[0].label.split(" (", 1)[0] if members else "the retriever"
        words = short_words(system, self.dataset)
        said = {
            item.query_id: verdict(
                self.dataset,
                item,
                self.run,
                system_label=words,
                oracle_label=oracle_words,
                oracle_run=self.oracle_run,
                rewrite_run=self.rewrite_run,
                rewrite_label=self.rewrite_words or "the rewrite",
                depth=made.depth,
                rewrite=self.rewrite,
            )
            for item in made.queries
        }
        line = None
        if self.results is not None and self.rewrite is not None and self.rewrite_run is not None:
            without, with_rewrite = self.results
            line = rewrite_summary(
                self.dataset, made, without, with_rewrite, self.rewrite_run, self.rewrite, self.rewrite_words
            )
        return Failures(system, made, summary(made, words, oracle_words), said, line)


def _resuming(offer: NeedsClick) -> NeedsClick:
    """The offer after a stopped job: it resumes from what the job kept (its button says so)."""
    return replace(offer, resumes=True)
