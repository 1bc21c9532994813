"""Failures in plain words: the landing page's summary and each failed query's verdict sentence.

A clinician opening the app should not need to know what nDCG is to see where a system fails and
why. This module turns a :class:`~r2med_core.analysis.diagnosis.Diagnosis` (the failure classes, made with
the answer oracle) into sentences: "BM25 finds a relevant document in its top 10 for 4 of 12
questions", one sentence per failure class, and for one failed question what was missed, why
(the class, with the reference answer and what the oracle found given it) and what a rewrite
changed. Everything is computed from runs already made; nothing here retrieves or calls an LLM.

What a rewrite did is told with its harm: how many questions it helped, hurt or left unchanged, and
for each failed question it did not rescue, why, read from the rewrite's own text: it never names
the question's reference answer (it restated the case or reasoned to something else), or it names
the right answer and the documents still rank low (the rest of the passage outweighs it), or there
is no passage. Whether a passage names the answer is ``named_in``: every content word of the
answer's name (its stem) occurs in it.

It is a diagnostic, not the benchmark's measure: the sentences count gold documents in a top 10,
which is what nDCG@10 = 0 means, and say so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from r2med_core.analysis.diagnosis import (
    NO_REFERENCE,
    POSSIBLY_UNJUDGED,
    REASONING_GAP,
    REPRESENTATION_GAP,
    Diagnosis,
    QueryDiagnosis,
)
from r2med_core.analysis.explore import per_query_delta, query_terms, rewrite_outcomes, shorten
from r2med_core.data import Dataset
from r2med_core.evaluation import Results
from r2med_core.kinds.oracle import reference_answers
from r2med_core.runs import Run

#: How many characters of a reference answer a sentence quotes (its name, before any explanation).
ANSWER_WIDTH = 80

#: One sentence per failure class for the landing page: ``{n}`` failed questions, ``{oracle}`` the
#: retriever the oracle uses, ``{depth}`` the top k.
CLASS_SENTENCES: dict[str, str] = {
    REASONING_GAP: (
        "{n} {questions} failed for lack of reasoning (a reasoning gap): handed the reference answer, "
        "{oracle} finds a relevant document in its top {depth}, so the words are there once the diagnosis "
        "or mechanism is known, but nothing in the question leads to them."
    ),
    REPRESENTATION_GAP: (
        "{n} {questions} failed even with the answer in hand (a representation gap): given the reference "
        "answer, {oracle} still misses every relevant document, so better reasoning alone would not help."
    ),
    POSSIBLY_UNJUDGED: (
        "{n} {questions} may not be failures at all: the top {depth} holds a document the LLM judge proposed "
        "as relevant that the benchmark never judged."
    ),
    NO_REFERENCE: "{n} {questions} failed but have no reference answer, so the reason cannot be told.",
}


#: Why a rewrite did not bring a failed question's relevant documents into the top k (``rescue_failure``).
NO_PASSAGE = "no passage"
ANSWER_NOT_NAMED = "never names the answer"
ANSWER_NAMED_LOW = "names the answer, documents still low"


@dataclass(frozen=True)
class Summary:
    """The landing page's words for one system on one task."""

    headline: str
    class_lines: tuple[str, ...]
    n_failed: int
    n_judged: int


@dataclass(frozen=True)
class Verdict:
    """One question's verdict: ``sentences`` in order (what was missed, why, what a rewrite changed)."""

    query_id: str
    failed: bool
    failure_class: str
    sentences: tuple[str, ...]
    #: The answer's name as quoted (None without a reference answer).
    answer: str | None = None

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


#: Where a reference answer's name ends and its explanation begins.
_NAME_END = re.compile(r"[:;(,]|\. | (?:with|presenting|causing|due to|progressing|secondary to|after) ")


def answer_name(answer: str, width: int = ANSWER_WIDTH) -> str:
    """The part of a reference answer that names it: the text before its explanation starts
    ("Cardiac sarcoidosis: granulomatous …" → "Cardiac sarcoidosis"), cut to ``width``."""
    head = answer.strip().split("\n", 1)[0]
    cut = _NAME_END.search(head)
    if cut and cut.start() > 0:
        head = head[: cut.start()]
    return shorten(head.strip(), width)


def named_in(question: str, name: str) -> bool:
    """Whether the question already names the answer: every content word of the name is in it."""
    terms = query_terms(name)
    return bool(terms) and terms <= query_terms(question)


def rescue_failure(dataset: Dataset, query_id: str, rewrite: tuple[str, str]) -> str | None:
    """Why the rewrite's passage could not rescue a question, from its text and the reference answer:
    ``NO_PASSAGE``, ``ANSWER_NOT_NAMED`` (it never names the answer), ``ANSWER_NAMED_LOW`` (it does), or
    None when the question has no reference answer to read the passage against."""
    text = dataset.rewrites.get(rewrite, {}).get(query_id)
    if not text or not text.strip():
        return NO_PASSAGE
    answer = reference_answers(dataset).get(query_id)
    if not answer:
        return None
    return ANSWER_NAMED_LOW if named_in(text, answer_name(answer)) else ANSWER_NOT_NAMED


def _is_rescued(run: Run, dataset: Dataset, qid: str, depth: int) -> bool:
    return any((r := run.rank_of(qid, d)) is not None and r <= depth for d in dataset.positives(qid))


def rewrite_summary(
    dataset: Dataset,
    diagnosis: Diagnosis,
    without: Results,
    with_rewrite: Results,
    rewrite_run: Run,
    rewrite: tuple[str, str],
    rewrite_label: str,
    metric: str = "ndcg_at_10",
    metric_label: str = "nDCG@10",
) -> str:
    """What a rewrite did on the task, harm included: "HyDE (smollm2-135m) takes nDCG@10 from 0.212 to
    0.247: 7 questions helped, 3 hurt, 2 unchanged. It rescues 2 of the 10 failed questions; of the other
    8, its passage never names the answer for 7, it names the right answer but the documents still rank
    low for 1." """
    counts = rewrite_outcomes(per_query_delta(without, with_rewrite, metric))
    sentences = [
        f"{rewrite_label} takes {metric_label} from {without.means[metric]:.3f} to "
        f"{with_rewrite.means[metric]:.3f}: {counts['helped']} {_plural(counts['helped'], 'question', 'questions')} "
        f"helped, {counts['hurt']} hurt, {counts['unchanged']} unchanged."
    ]
    failed = [q.query_id for q in diagnosis.queries if q.failed]
    if failed:
        rescued = [q for q in failed if _is_rescued(rewrite_run, dataset, q, diagnosis.depth)]
        if len(failed) == 1:
            text = f"It {'rescues' if rescued else 'does not rescue'} the one failed question"
        else:
            text = f"It rescues {len(rescued)} of the {len(failed)} failed questions"
        reasons = [rescue_failure(dataset, q, rewrite) for q in failed if q not in rescued]
        parts = [
            f"{how} for {n}"
            for key, how in (
                (ANSWER_NOT_NAMED, "its passage never names the answer"),
                (ANSWER_NAMED_LOW, "it names the right answer but the documents still rank low"),
                (NO_PASSAGE, "it has no passage"),
            )
            if (n := reasons.count(key))
        ]
        if parts:
            text += f"; of the other {len(reasons)}, " + ", ".join(parts)
        sentences.append(text + ".")
    gained = [q.query_id for q in diagnosis.queries if not q.failed]
    lost = [q for q in gained if not _is_rescued(rewrite_run, dataset, q, diagnosis.depth)]
    if lost:
        sentences.append(
            f"It loses {len(lost)} of the {len(gained)} {_plural(len(gained), 'question', 'questions')} found "
            f"without it (no relevant document left in the top {diagnosis.depth})."
        )
    return " ".join(sentences)


def summary(diagnosis: Diagnosis, system_label: str, oracle_label: str) -> Summary:
    """"BM25 finds a relevant document in its top 10 for 4 of 12 questions", and a sentence per class."""
    judged = len(diagnosis.queries)
    found = judged - diagnosis.n_failed
    headline = (
        f"{system_label} finds a relevant document in its top {diagnosis.depth} for {found} of {judged} "
        f"{_plural(judged, 'question', 'questions')}."
    )
    lines = [
        CLASS_SENTENCES[name].format(
            n=n, questions=_plural(n, "question", "questions"), oracle=oracle_label, depth=diagnosis.depth
        )
        for name, n in diagnosis.counts().items()
        if n
    ]
    return Summary(headline, tuple(lines), diagnosis.n_failed, judged)


def _ranks_text(ranks: Sequence[int | None], depth: int) -> str:
    """"ranks 3, 1, 2" / "rank 42" / "ranks 42, 83 and not in the top 100"."""
    shown = [str(r) for r in ranks if r is not None]
    missing = len(ranks) - len(shown)
    words = f"{_plural(len(shown), 'rank', 'ranks')} {', '.join(shown)}" if shown else ""
    if missing:
        tail = "not in the top 100" if missing == 1 or not shown else f"{missing} not in the top 100"
        if not shown:
            return "not in the top 100" if len(ranks) == 1 else "none of them in the top 100"
        return f"{words} and {tail}"
    return words


def worst_failures(diagnosis: Diagnosis, limit: int = 3) -> list[QueryDiagnosis]:
    """The failed questions most worth a look first: reasoning gaps (the benchmark's point), then
    representation gaps, then the rest; within a class the gold documents ranked lowest first."""
    order = {REASONING_GAP: 0, REPRESENTATION_GAP: 1, POSSIBLY_UNJUDGED: 2, NO_REFERENCE: 3}
    failed = [q for q in diagnosis.queries if q.failed]
    failed.sort(key=lambda q: (order.get(q.failure_class, 9), -(q.best_gold_rank or 10_000)))
    return failed[:limit]


def next_failure(failed: list[str], current: str) -> str | None:
    """The failed question after ``current`` in task order (wrapping round), None when there is no other."""
    others = [q for q in failed if q != current]
    if not others:
        return None
    after = failed[failed.index(current) + 1 :] if current in failed else []
    return (after or others)[0]


def verdict(
    dataset: Dataset,
    item: QueryDiagnosis,
    run: Run,
    *,
    system_label: str,
    oracle_run: Run | None,
    oracle_label: str,
    rewrite_run: Run | None = None,
    rewrite_label: str = "the rewrite",
    depth: int = 10,
    rewrite: tuple[str, str] | None = None,
) -> Verdict:
    """The verdict on one judged question, in sentences a clinician reads without metric names.

    ``rewrite``: the ``(method, llm)`` behind ``rewrite_run``, whose passage says why a rescue failed."""
    qid = item.query_id
    gold = sorted(dataset.positives(qid), key=lambda d: (run.rank_of(qid, d) or 10_000, d))
    ranks = [run.rank_of(qid, d) for d in gold]
    n = len(gold)
    in_top = sum(1 for r in ranks if r is not None and r <= depth)
    relevant = f"{n} relevant {_plural(n, 'document', 'documents')}"
    answer = reference_answers(dataset).get(qid)
    name = answer_name(answer) if answer else None
    sentences: list[str] = []
    if not item.failed:
        sentences.append(f"Found: {system_label} has {in_top} of the {relevant} in its top {depth}.")
        if rewrite_run is not None and not _is_rescued(rewrite_run, dataset, qid, depth):
            after = [rewrite_run.rank_of(qid, d) for d in gold]
            sentences.append(
                f"With {rewrite_label} none is left in the top {depth} ({_ranks_text(after, depth)}): "
                "the rewrite hurt this question."
            )
        return Verdict(qid, False, item.failure_class, tuple(sentences), name)
    sentences.append(
        f"Missed: none of the {relevant} is in {system_label}'s top {depth} "
        f"({'it is at' if n == 1 else 'they are at'} {_ranks_text(ranks, depth)})."
    )
    if item.failure_class in (REASONING_GAP, REPRESENTATION_GAP) and name and oracle_run is not None:
        found = sum(1 for d in gold if (r := oracle_run.rank_of(qid, d)) is not None and r <= depth)
        given = f"{oracle_label} finds {found} of {n} in its top {depth}"
        if item.failure_class == REPRESENTATION_GAP:
            sentences.append(
                f"Representation gap: even given the answer, {name}, {given}: the documents do not read like it."
            )
        elif named_in(dataset.queries[qid], name):
            sentences.append(f"Reasoning gap: given the answer, {name}, {given}.")
        else:
            sentences.append(
                f"Reasoning gap: the answer, {name}, is never named in the question; given the answer, {given}."
            )
    elif item.failure_class == POSSIBLY_UNJUDGED:
        sentences.append(
            f"Possibly unjudged: the top {depth} holds {len(item.proposed_in_top)} "
            f"{_plural(len(item.proposed_in_top), 'document', 'documents')} the LLM judge proposed as relevant."
        )
    elif item.failure_class == NO_REFERENCE:
        sentences.append("The question has no reference answer, so the reason cannot be told.")
    if rewrite_run is not None:
        after = [rewrite_run.rank_of(qid, d) for d in gold]
        if any(r is not None and r <= depth for r in after):
            back = "it comes" if n == 1 else "they come"
            sentences.append(f"With {rewrite_label} {back} back at {_ranks_text(after, depth)}.")
        else:
            sentences.append(f"With {rewrite_label} still none in the top {depth} ({_ranks_text(after, depth)}).")
            if rewrite is not None:
                sentences += _why_not_rescued(dataset, qid, rewrite, name)
    return Verdict(qid, True, item.failure_class, tuple(sentences), name)


def _why_not_rescued(dataset: Dataset, qid: str, rewrite: tuple[str, str], name: str | None) -> list[str]:
    """The sentence saying why the rewrite's passage did not rescue the question (``rescue_failure``)."""
    reason = rescue_failure(dataset, qid, rewrite)
    if reason == NO_PASSAGE:
        return ["The rewrite has no passage for this question."]
    if reason == ANSWER_NAMED_LOW:
        return [f"Its passage names the right answer, {name}, but the documents still rank low."]
    if reason == ANSWER_NOT_NAMED:
        return [f"Its passage never names the answer, {name}: it restated the case or reasoned to something else."]
    return []
