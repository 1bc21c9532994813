"""Who sees what of a team's labels: one rule, here, that every page and every download asks.

Labels hold judgements, notes and people's identities; judgements made blind are only worth their
kappa if nobody saw the others' first. So what a visitor may see is decided once, in this module, and
the pages only ask it (``Sight``): never a role test in a page.

Without sign-in the app is one trusted team (``identity``): everyone sees everything, downloads and
backups included. With sign-in configured — or configured but broken, when nobody is believed:

| who | labels (notes, identities, model proposals) | review work | store-wide exports and backups |
|---|---|---|---|
| signed out, or signed in with no role | none | no | no |
| annotator (labels, does not review) | their own, and others' on units revealed to them | no | no |
| reviewer | every label | yes | no |
| admin | every label | yes | yes |

*Review work* is what a reviewer reviews: agreement figures, adjudication and its decisions (and the
hard items, ``hard``), the LLM
judge's proposals panel, the task-level qrels exports, and the team's judging progress (every
annotator's, and per task); an annotator sees their own progress only. *Store-wide exports* are every label (CSV,
JSONL) and the full backup.

**Blind per judging unit.** A unit is a (query, document) pair, or a whole query. An annotator who
labels blind (signed in, may label, does not review) sees the others' labels, the qrels grade, the
scores and the model's proposals on a (query, document) only once they saved their own label on that
document, or on the whole query (the explorer then shows the whole query's judgements); the whole
query's scores and judgements only once they labelled the whole query. A label is recorded ``blind``
when its unit was still hidden from its annotator (``Sight.hidden``): so every blind judgement counts
in agreement, not only the first on a query. A reviewer sees every label to review it, so never
labels blind.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from r2med_core.judging.identity import ROLES_FILE_ENV, Person, is_own

Unit = tuple[str, str, str, str | None]  # (dataset, task, query_id, doc_id or None for the whole query)


class _Named(Protocol):
    @property
    def annotator(self) -> str: ...


class _Label(_Named, Protocol):  # read-only members, so a frozen dataclass (an Annotation) is one
    @property
    def dataset(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def query_id(self) -> str: ...
    @property
    def doc_id(self) -> str | None: ...


T = TypeVar("T", bound=_Label)
N = TypeVar("N", bound=_Named)


def _unit(label: _Label) -> Unit:
    return (label.dataset, label.task, label.query_id, label.doc_id)


@dataclass(frozen=True)
class Sight:
    """What one visitor may see. ``person``: who is signed in (or typed a name), None for nobody;
    ``signed_in``: sign-in is configured (also when its configuration is broken: then nobody is)."""

    person: Person | None
    signed_in: bool

    @property
    def reviews(self) -> bool:
        """Sees every label and the review work (agreement, adjudication, proposals, task qrels exports)."""
        return not self.signed_in or (self.person is not None and self.person.may("review"))

    @property
    def exports_store(self) -> bool:
        """May download every label (CSV, JSONL) and the full backup: the store as a whole."""
        return not self.signed_in or (self.person is not None and self.person.may("manage"))

    def store_place(self, location: str, *, public: bool = False) -> str:
        """Where the labels are stored, as this visitor may be told: the store's ``location`` (a server path
        or a database URL, never its password) to whoever manages the store as a whole (``exports_store``:
        an admin, or anyone on a server without sign-in), "on this server" to everyone else and on a
        ``public`` read-only demo, whose folders and database hosts are nobody's business."""
        return "on this server" if public or not self.exports_store else f"in {location}"

    @property
    def blind(self) -> bool:
        """Labels blind: signed in, may label, does not review (sees others' work unit by unit)."""
        person = self.person
        return self.signed_in and person is not None and person.may("label") and not person.may("review")

    def notice(self) -> str:
        """What is withheld from this person and why, for a page to say; "" when nothing is."""
        if self.reviews:
            return ""
        if self.blind:
            return (
                "Blind per document: other people's labels, the judgements and the model's proposals on a document "
                "appear once you have saved your own label on it (on the whole query, once you labelled the whole "
                "query). Agreement figures, adjudication and the downloads are for reviewers."
            )
        if self.person is None:
            return (
                "Sign in to see labels: on this server labels, notes, who made them, the model's proposals and "
                "agreement figures are shown only to annotators (their own work), reviewers and admins."
            )
        roles = ", ".join(sorted(self.person.roles)) or "no role"
        return (
            f"{self.person.name} ({roles}) sees no labels: they are shown to annotators (their own work), reviewers "
            f"and admins; the operator grants roles in the roles file ({ROLES_FILE_ENV})."
        )

    def _own(self, label: _Named) -> bool:
        return self.labelled([label])

    def labelled(self, labels: Iterable[_Named]) -> bool:
        """This person made one of ``labels`` (``identity.is_own``), so may not review or adjudicate them:
        the store refuses it, whoever asks."""
        return self.person is not None and is_own(self.person.name, (a.annotator for a in labels))

    def may_review(self, labels: Iterable[_Named]) -> bool:
        """Whether to offer this person the review of ``labels`` (accept, reject, adjudicate): they see the
        review work and made none of them. Without sign-in a name is still needed to record the review;
        the page asks for it when one is missing."""
        return self.reviews and not self.labelled(labels)

    def revealed(self, labels: Iterable[_Label]) -> frozenset[Unit]:
        """The units this person labelled themselves among ``labels`` (their own and others')."""
        return frozenset(_unit(a) for a in labels if self._own(a))

    def hidden(self, labels: Iterable[_Label], unit: Unit) -> bool:
        """Whether ``unit`` is still hidden from this person, who labels blind: ``labels`` (the store's, at
        least the unit's query's) hold no label of theirs on the unit, nor, for a document, on its whole
        query. A label saved on a hidden unit is recorded blind."""
        return self.blind and not _shown(unit, self.revealed(labels))

    def hidden_queries(
        self, labels: Iterable[_Label], dataset: str, task: str, query_ids: Iterable[str]
    ) -> frozenset[str]:
        """Of ``query_ids`` (one task's), those whose whole query is still hidden from this person."""
        if not self.blind:
            return frozenset()
        done = self.revealed(labels)
        return frozenset(q for q in query_ids if (dataset, task, q, None) not in done)

    def labels(self, labels: Iterable[T]) -> list[T]:
        """The labels this person may see, in the order given: all of them for a reviewer (and without
        sign-in), none for someone signed out or without a role; for someone who labels blind, their own
        and the others' on the units revealed to them."""
        labels = list(labels)
        if self.reviews:
            return labels
        if not self.blind:
            return []
        done = self.revealed(labels)
        return [a for a in labels if self._own(a) or _shown(_unit(a), done)]

    def progress(self, rows: Iterable[N]) -> list[N]:
        """Of judging-progress rows, one per annotator (``judging.AnnotatorProgress``), those this person may
        see: everyone's for a reviewer (and without sign-in), their own for someone who labels, none
        otherwise. The team's figures per task go with ``reviews``."""
        rows = list(rows)
        if self.reviews:
            return rows
        may_label = self.person is not None and self.person.may("label")
        return [row for row in rows if may_label and self._own(row)]


def _shown(unit: Unit, done: frozenset[Unit]) -> bool:
    """A unit is revealed by its annotator's own label on it, and a document also by one on its whole query."""
    dataset, task, query_id, doc_id = unit
    return unit in done or (doc_id is not None and (dataset, task, query_id, None) in done)
