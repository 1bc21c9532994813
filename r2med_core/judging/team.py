"""The team's judgements: one definition of what a team's grades make of a task's qrels.

A relevance judgement is a grade 0-2 wherever it is made (the Judging page, Judge a list, the explorer;
``annotations.grade_of`` reads the codes older versions wrote as grades too). Per (query, document) of
a task, each person's latest grade counts (names compare case-insensitively); a model's proposals are
suggestions, never a judge:

* **accepted** — a reviewer accepted a proposal on the pair: that settles the pair with its grade,
  whoever proposed it, and every identical proposal with it (a pair the qrels judge relevant is never a
  proposal);
* **agreed** — two or more people graded the pair and all gave the same grade: the team's judgement,
  without a review;
* **not relevant** — one person's grade 0 on a pair the qrels do not judge: counted without a review
  (it changes no metric; it tells Judged@k somebody looked, and keeps the pair out of later pools);
* people who disagree wait for adjudication (``adjudication``), and so does a pair on which someone's
  latest judgement is *unsure* (``annotations.UNSURE``: no grade, however many others agree), and a
  lone grade above 0 or a model's waits for a reviewer (``review_queue``): none counts meanwhile. A
  reviewer's rejection takes that grade out.

What people say after a pair is settled: a reviewer's word (an accepted proposal, an adjudicated grade)
is final — a later different grade or unsure leaves it standing and the pair is not counted as waiting
(the Adjudication page still shows the doubt to a reviewer, who may decide again); an automatic
settlement (agreed, a lone grade 0) holds only while everyone's latest judgement agrees — a later
unsure or different grade takes it out and the pair waits for adjudication. ``PairGrades.judgement``
and ``team_qrels`` apply this, nowhere else.

``team_qrels`` is the team's qrels: the original, then the agreed grades and accepted proposals, then
the standing adjudicated grades (additions and corrections: a decision replaces whatever the labels
said). A query the original qrels do not judge joins only with a relevant (grade > 0) judgement, since
judged all-0 it would join the means with a score of 0. This is the only definition: the Metrics page's
"with", the Annotations and Adjudication pages' re-evaluation and downloads, and the command line's
``qrels`` and ``pool --store`` all call it, and its counts (``TeamQrels.caption``) are theirs.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from r2med_core.data import DataError, Dataset, Problem
from r2med_core.judging.adjudication import Decision, current, history
from r2med_core.judging.annotations import Annotation, AnnotationStore, Qrels, grade_of, is_unsure

Pair = tuple[str, str, str, str]  # (dataset, task, query_id, doc_id)
#: Where a team judgement comes from.
Source = Literal["agreed", "accepted", "not relevant", "adjudicated"]


# --------------------------------------------------------------------------- one pair's grades


@dataclass(frozen=True)
class PairGrades:
    """The grades given on one (query, document): each person's latest judgement (a grade, or unsure; keyed
    by the name as compared, stripped and lower-case), each model's latest, the latest accepted label and
    the grades a reviewer rejected on it."""

    pair: Pair
    people: Mapping[str, Annotation]
    models: Mapping[str, Annotation]
    accepted: Annotation | None
    rejected: frozenset[int]

    @property
    def unsure(self) -> bool:
        """Someone's latest judgement on the pair is unsure: no grade of theirs counts, a reviewer decides."""
        return any(is_unsure(a) for a in self.people.values())

    @property
    def disputed(self) -> bool:
        """Waits for adjudication: two or more people gave different grades, or someone is unsure, and no
        reviewer accepted a grade on it (final: what people say afterwards does not unsettle it)."""
        return self.accepted is None and (self.unsure or len({grade_of(a) for a in self.people.values()}) >= 2)

    def _standing(self) -> list[Annotation]:
        return [a for a in self.people.values() if a.status != "rejected"]

    def judgement(self) -> tuple[int, Source] | None:
        """The grade the labels give the pair and where it comes from; None while nothing settles it. A
        reviewer's acceptance comes first and is final; agreement and a lone grade 0 hold only undisputed."""
        if self.accepted is not None:
            return grade_of(self.accepted) or 0, "accepted"
        if self.disputed:
            return None
        standing = self._standing()
        grades = {grade_of(a) for a in standing}
        if len(standing) >= 2 and len(grades) == 1:
            return grades.pop() or 0, "agreed"
        if len(standing) == 1 and grades == {0}:
            return 0, "not relevant"
        return None

    def proposals(self) -> tuple[Annotation, ...]:
        """What waits for a reviewer, oldest first: a lone person's grade above 0 and the models', not yet
        reviewed; none once the pair is settled (accepted, agreed, disputed) or for a grade a reviewer
        rejected on it."""
        standing = self._standing()
        if self.accepted is not None or self.disputed or len(standing) >= 2:
            return ()
        waiting = [
            a
            for a in (*standing, *self.models.values())
            if a.status == "proposed" and (grade_of(a) or 0) > 0 and grade_of(a) not in self.rejected
        ]
        return tuple(sorted(waiting, key=lambda a: (a.created_at, a.id or 0)))


def pair_grades(labels: Iterable[Annotation]) -> dict[Pair, PairGrades]:
    """The grades on every (query, document) among ``labels`` (failure types and whole-query labels are
    not grades and are left out; an unsure stands for its annotator as their latest judgement), pairs in
    the order first graded."""
    people: dict[Pair, dict[str, Annotation]] = {}
    models: dict[Pair, dict[str, Annotation]] = {}
    accepted: dict[Pair, Annotation] = {}
    rejected: dict[Pair, set[int]] = {}
    for label in sorted(labels, key=lambda a: (a.created_at, a.id or 0)):
        grade = grade_of(label)
        if (grade is None and not is_unsure(label)) or label.doc_id is None:
            continue
        pair = (label.dataset, label.task, label.query_id, label.doc_id)
        people.setdefault(pair, {})
        models.setdefault(pair, {})
        (models if label.by_model else people)[pair][label.annotator.strip().lower()] = label
        if label.accepted:
            accepted[pair] = label
        elif label.reviewer and grade is not None:
            rejected.setdefault(pair, set()).add(grade)
    return {
        pair: PairGrades(pair, people[pair], models[pair], accepted.get(pair), frozenset(rejected.get(pair, ())))
        for pair in people
    }


def _decided(decisions: Iterable[Decision]) -> dict[Pair, Decision]:
    """Per (query, document), the latest standing decision that gives it a grade."""
    out: dict[Pair, Decision] = {}
    for decision in sorted(current(decisions).values(), key=lambda d: d.id or 0):
        if decision.doc_id is not None and decision.judged is not None:
            out[(decision.dataset, decision.task, decision.query_id, decision.doc_id)] = decision
    return out


def _no_change(source: Source, original: int | None) -> bool:
    """A lone grade 0 only fills a hole; an accepted proposal only adds to a pair not judged relevant (on
    one that is, it was never a proposal: ``review_queue`` leaves such pairs out)."""
    return (source == "not relevant" and original is not None) or (source == "accepted" and (original or 0) > 0)


def _judged_relevant(qrels: Mapping[str, Mapping[str, int]] | None, pair: Pair) -> bool:
    return qrels is not None and qrels.get(pair[2], {}).get(pair[3], 0) > 0


# --------------------------------------------------------------------------- the team's qrels


@dataclass(frozen=True)
class TeamChange:
    """One pair the team's qrels judge differently from the original (``original`` None: not judged
    there), with where its grade comes from: the decision behind an adjudicated grade, the accepted
    label behind an accepted one."""

    query_id: str
    doc_id: str
    original: int | None
    grade: int
    source: Source
    decision: Decision | None = None
    accepted: Annotation | None = None

    @property
    def kind(self) -> Literal["addition", "correction"]:
        return "addition" if self.original is None else "correction"


@dataclass(frozen=True)
class TeamQrels:
    """A task's qrels with the team's judgements applied, what changed and where from, and what waits:
    ``proposed`` pairs wait for a reviewer, ``disputed`` pairs (grades differ, or someone is unsure) for
    adjudication (neither is used)."""

    qrels: Qrels
    changes: tuple[TeamChange, ...]
    proposed: int = 0
    disputed: int = 0

    def count(self, source: Source) -> int:
        """Pairs the team's qrels judge differently from the original because of ``source``."""
        return sum(change.source == source for change in self.changes)

    def caption(self) -> str:
        """What the team's qrels change in the original, counted as they count it: the changes first, split
        by what they do to the original (an addition or a correction), then the same changes by where
        their grade comes from (each source counts changes only), so no count reads as part of another."""
        additions = sum(change.kind == "addition" for change in self.changes)
        return (
            f"{len(self.changes)} change(s) to the original qrels — {additions} addition(s) (pairs it did not "
            f"judge) and {len(self.changes) - additions} correction(s) (pairs it graded otherwise) — coming from "
            f"{self.count('agreed')} agreed grade(s), {self.count('accepted')} accepted proposal(s), "
            f"{self.count('not relevant')} judged not relevant by one annotator and {self.count('adjudicated')} "
            f"adjudicated grade(s). Not used: {self.proposed} proposal(s) awaiting review, {self.disputed} "
            "disagreement(s) or unsure judgement(s) awaiting adjudication."
        )


def team_qrels(
    original: Mapping[str, Mapping[str, int]],
    labels: Iterable[Annotation],
    decisions: Iterable[Decision],
    *,
    dataset: str,
    task: str,
) -> TeamQrels:
    """One task's qrels as the team judges them (the module's rules), from its ``original`` qrels, the
    labels and the adjudication decisions (other tasks' are ignored). Nothing given is changed."""
    mine = [a for a in labels if (a.dataset, a.task) == (dataset, task)]
    decided = {pair[2:]: d for pair, d in _decided(decisions).items() if pair[:2] == (dataset, task)}
    merged = {qid: dict(grades) for qid, grades in original.items()}
    sources: dict[tuple[str, str], tuple[Source, Decision | None, Annotation | None]] = {}
    proposed = disputed = 0
    for pair, grades in pair_grades(mine).items():
        query_id, doc_id = key = pair[2:]
        if key in decided:  # a reviewer's grade replaces whatever the labels said, before or after it
            continue
        disputed += grades.disputed
        proposed += bool(grades.proposals()) and not _judged_relevant(original, pair)
        found = grades.judgement()
        if found is None or _no_change(found[1], original.get(query_id, {}).get(doc_id)):
            continue
        merged.setdefault(query_id, {})[doc_id] = found[0]
        sources[key] = (found[1], None, grades.accepted if found[1] == "accepted" else None)
    for (query_id, doc_id), decision in decided.items():
        merged.setdefault(query_id, {})[doc_id] = decision.judged or 0
        sources[(query_id, doc_id)] = ("adjudicated", decision, None)
    for query_id in [q for q, g in merged.items() if not original.get(q) and not any(v > 0 for v in g.values())]:
        if query_id in original:  # judged all-0 by the team alone, it would join the means with a 0
            merged[query_id] = dict(original[query_id])
        else:
            del merged[query_id]
    changes = tuple(
        TeamChange(q, d, original.get(q, {}).get(d), grade, *sources[(q, d)])
        for q in sorted(merged)
        for d, grade in sorted(merged[q].items())
        if (q, d) in sources and original.get(q, {}).get(d) != grade
    )
    return TeamQrels(merged, changes, proposed, disputed)


def read_team_qrels(store: AnnotationStore, dataset: Dataset) -> TeamQrels:
    """``team_qrels`` of one task, from every label and decision the store holds on it (whoever looks:
    the team's judgements are the same for everyone)."""
    return team_qrels(
        dataset.qrels,
        store.list(dataset=dataset.source, task=dataset.name),
        history(store, dataset=dataset.source, task=dataset.name),
        dataset=dataset.source,
        task=dataset.name,
    )


# --------------------------------------------------------------------------- the review queue


@dataclass(frozen=True)
class Proposal:
    """A (query, document) waiting for a reviewer, with every proposal on it (a person's, the models'),
    oldest first. However many proposed it, it is one item: reviewing a grade settles them all."""

    pair: Pair
    labels: tuple[Annotation, ...]

    @property
    def annotators(self) -> tuple[str, ...]:
        return tuple(a.annotator for a in self.labels)

    def by_grade(self) -> dict[int, tuple[Annotation, ...]]:
        """The proposals per grade, grades in the order first proposed: one review per grade (recorded on
        its first label) settles every identical proposal."""
        out: dict[int, list[Annotation]] = {}
        for label in self.labels:
            out.setdefault(grade_of(label) or 0, []).append(label)
        return {grade: tuple(found) for grade, found in out.items()}


def review_queue(
    labels: Iterable[Annotation],
    decisions: Iterable[Decision],
    *,
    qrels: Mapping[tuple[str, str], Mapping[str, Mapping[str, int]]] | None = None,
    task: str | None = None,
    annotator: str | None = None,
) -> list[Proposal]:
    """The pairs whose proposals wait for a reviewer (``PairGrades.proposals``), oldest first, optionally
    only one task's or those one annotator proposed. A pair with a standing adjudicated grade is settled,
    and so is one its task's qrels judge relevant (``qrels`` by (dataset, task), where known)."""
    labels = [a for a in labels if task is None or a.task == task]
    decided = _decided(decisions)
    items = []
    for pair, grades in pair_grades(labels).items():
        waiting = grades.proposals()
        known = (qrels or {}).get(pair[:2])
        if not waiting or pair in decided or _judged_relevant(known, pair):
            continue
        if annotator is None or annotator in (a.annotator for a in waiting):
            items.append(Proposal(pair, waiting))
    return sorted(items, key=lambda item: (item.labels[0].created_at, item.labels[0].id or 0))


# --------------------------------------------------------------------------- exports


def _trec_safe(identifier: str) -> bool:
    return bool(identifier) and not re.search(r"\s", identifier)


def qrels_text(qrels: Mapping[str, Mapping[str, int]], label: str = "qrels") -> str:
    """Whole qrels as TREC text (``qid 0 docid grade`` per line). An id a TREC line cannot hold raises
    DataError (``label`` names the qrels): a full qrels file never silently loses a judgement."""
    bad = [(q, d) for q, grades in qrels.items() for d in grades if not (_trec_safe(q) and _trec_safe(d))]
    if bad:
        raise DataError(
            [Problem(label, None, f"query {q!r}, document {d!r}: an id a TREC line cannot hold") for q, d in bad[:20]]
        )
    return "".join(f"{q} 0 {d} {grade}\n" for q, grades in qrels.items() for d, grade in grades.items())


def changes_text(changes: Iterable[TeamChange]) -> str:
    """The changes as TREC qrels lines (``qid 0 docid grade``): applied after the original file, each line
    overrides the pair's grade. Ids a TREC line cannot hold (with whitespace) are left out."""
    return "".join(
        f"{c.query_id} 0 {c.doc_id} {c.grade}\n" for c in changes if _trec_safe(c.query_id) and _trec_safe(c.doc_id)
    )


CHANGES_CSV_HEADER = (
    "kind",
    "source",
    "query_id",
    "doc_id",
    "original_grade",
    "team_grade",
    "reviewer",
    "reviewed_at",
    "reason",
    "decision_id",
)


def changes_csv(changes: Iterable[TeamChange]) -> str:
    """The changes as CSV, each with where it comes from (an empty original grade: not judged); the
    reviewer and time of the decision, or of the acceptance, behind it."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CHANGES_CSV_HEADER)
    for c in changes:
        d, a = c.decision, c.accepted
        reviewer, at = (d.reviewer, d.decided_at) if d else (a.reviewer, a.reviewed_at or "") if a else ("", "")
        original = "" if c.original is None else c.original
        reason, decision_id = (d.reason, d.id) if d else ("", "")
        writer.writerow([c.kind, c.source, c.query_id, c.doc_id, original, c.grade, reviewer, at, reason, decision_id])
    return buffer.getvalue()
