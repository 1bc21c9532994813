"""Judging a whole ranked list at speed: relevance grades 0-2 for one query's top-k, saved as they are given.

The page's keyboard component sends *grade events* (an id, a document, a grade, and when the key was
pressed on the server's clock). Streamlit hands a component's value to every rerun of the page, so the
same event arrives many times: ``SaveOnce`` remembers which ids were handled, and ``save_grades`` stores
each event once (a grade equal to the annotator's latest grade on the document is not stored again
either). A grade is recorded at its keypress's time, and an event pressed before the annotator's latest
grade on the document never replaces it, however long after it is sent again (a replay once
``SaveOnce`` forgot it, a browser's stale pending list). A message carries at most ``MAX_EVENTS``
events, each a store write; the rest wait for the next one. A grade is stored as every page stores one
(``grade_0`` … ``grade_2``, ``annotations.grade_of``): one row per grade, the latest per annotator stands
(a grade given on the Judging page or in the explorer is the annotator's grade here too), and it counts
for the team as ``team`` says — agreeing grades without a review, a lone grade above 0 once accepted.

On the Judging page a key may also say *unsure* (``annotations.UNSURE``): stored as an unsure label, as
a grade is (once per event, never replacing a later judgement), it takes the document off the annotator's
queue and sends it to a reviewer (``adjudication``); it is no grade (``team``, ``agreement``). A skip
stores nothing.

Blind first: a row shows the qrels grade and others' labels only once the annotator graded it; a grade
is recorded ``blind`` (with sign-in on) when the document was still hidden from its annotator — no earlier
label of theirs on it nor on the whole query (``visibility``: blind per judging unit).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from r2med_core.judging.annotations import (
    GRADES,
    TAXONOMY,
    UNSURE,
    Annotation,
    AnnotationStore,
    AnnotationStoreError,
    SelfAdjudication,
    check_whole_number,
    grade_code,
    grade_of,
    is_unsure,
    rating_of,
)
from r2med_core.judging.visibility import Sight
from r2med_core.runs import Run

#: Event ids remembered per session; far more than one sitting's keypresses, so memory stays bounded.
MEMORY = 20_000
#: Events handled from one component message (each is a store write); the rest wait for the next message.
MAX_EVENTS = 100
#: A keypress older than this is refused (press the key again): pending events are seconds old, and the
#: event's time becomes the label's, so a page cannot date a grade further back.
MAX_AGE_MINUTES = 10
_MAX_ID = 80
#: Millisecond times a browser can send (JavaScript's largest exact integer).
_MAX_MS = 2**53
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class GradeEvent:
    """One keypress: grade ``grade`` given to ``doc_id``; ``event_id`` is unique per keypress, ``at`` when
    it was pressed, in milliseconds since the epoch on the server's clock (``now_ms``, which the page hands
    the component with every render). ``skip``: the key put the document aside for later (the Judging
    page), no grade; ``unsure``: the key said the annotator could not decide (the Judging page), stored
    as unsure; ``grade`` is 0 and means nothing with either. ``time_ms``: how long the document was shown
    before the key, as the browser measured it (the Judging page), stored with the judgement."""

    event_id: str
    doc_id: str
    grade: int
    at: int
    skip: bool = False
    time_ms: int | None = None
    unsure: bool = False

    @property
    def rating(self) -> str:
        """What the key says, as ``annotations.rating_of`` says it of a stored label."""
        return UNSURE if self.unsure else grade_code(self.grade)


def now_ms() -> int:
    """The server's clock as events carry it: milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def spent_ms(shown_at: int, now: int | None = None) -> int:
    """The time a document was in front of its annotator, in milliseconds: from ``shown_at`` (``now_ms()``
    when the page sent it) to ``now``. A Save made with the mouse records it as a key records the time the
    browser measured (``GradeEvent.time_ms``)."""
    return max(0, (now_ms() if now is None else now) - shown_at)


def parse_events(
    value: object, documents: Collection[str], *, skips: bool = False, unsure: bool = False
) -> tuple[list[GradeEvent], list[str]]:
    """The grade events in a component value ``{"events": [{"id", "doc", "grade", "at"}, …]}``, and what was
    wrong with the rest. The value comes from the browser, so anything else (a document not in the list
    shown, a grade outside 0-2, a missing id or time) is refused, never stored. ``skips``: the page lets a
    key skip a document (``{"id", "doc", "skip": true, "at"}``, no grade); ``unsure``: the page lets a key
    say unsure (``{"id", "doc", "unsure": true, "at"}``, no grade); elsewhere such events are refused.
    Only the first ``MAX_EVENTS`` are taken, and a problem says so: the component sends the others again
    with the next."""
    if value is None:
        return [], []
    raw = value.get("events") if isinstance(value, Mapping) else None
    if not isinstance(raw, list):
        return [], ["the list sent no events list"]
    events: list[GradeEvent] = []
    problems: list[str] = []
    if len(raw) > MAX_EVENTS:
        problems.append(
            f"{len(raw) - MAX_EVENTS} of {len(raw)} grades sent at once (at most {MAX_EVENTS} a message); "
            "the list sends them again with your next grade"
        )
    for item in raw[:MAX_EVENTS]:
        if not isinstance(item, Mapping):
            problems.append("an event that is not an object")
            continue
        event_id, doc_id, grade, at = item.get("id"), item.get("doc"), item.get("grade"), item.get("at")
        skip = skips and item.get("skip") is True
        doubt = unsure and not skip and item.get("unsure") is True
        spent = item.get("ms")
        if skip or doubt:
            grade = 0
        if not isinstance(event_id, str) or not event_id or len(event_id) > _MAX_ID:
            problems.append("an event without a valid id")
        elif not isinstance(doc_id, str) or doc_id not in documents:
            problems.append(f"a grade for a document not in this list ({str(doc_id)[:40]!r})")
        elif isinstance(grade, bool) or not isinstance(grade, int) or grade not in GRADES:
            problems.append(f"grade {str(grade)[:10]!r} is not 0, 1 or 2")
        elif isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= _MAX_MS:
            problems.append("an event without a valid time")
        elif not _whole(spent):
            problems.append("an event with an invalid time spent on its document")
        else:
            events.append(GradeEvent(event_id, doc_id, grade, at, skip=skip, time_ms=spent, unsure=doubt))
    return events, problems


def _whole(ms: object) -> bool:
    """A time spent a store can hold (or none)."""
    try:
        check_whole_number("time_ms", ms, 0)
    except ValueError:
        return False
    return True


@dataclass
class SaveOnce:
    """The event ids already handled in this session (saved, unchanged or refused), oldest forgotten first
    beyond ``MEMORY``, with what happened to each so a rerun can show it again."""

    memory: int = MEMORY
    _done: OrderedDict[str, Outcome] = field(default_factory=OrderedDict)

    def fresh(self, events: Iterable[GradeEvent]) -> list[GradeEvent]:
        """The events not handled yet, each once, in the order given."""
        seen: set[str] = set()
        out = []
        for event in events:
            if event.event_id not in self._done and event.event_id not in seen:
                seen.add(event.event_id)
                out.append(event)
        return out

    def record(self, outcome: Outcome) -> None:
        self._done[outcome.event.event_id] = outcome
        while len(self._done) > self.memory:
            self._done.popitem(last=False)

    def outcome(self, event_id: str) -> Outcome | None:
        return self._done.get(event_id)

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._done


@dataclass(frozen=True)
class Outcome:
    """What became of one event: ``saved`` (a new label, ``label_id``), ``unchanged`` (the annotator's latest
    judgement already), ``stale`` (pressed before the annotator's latest judgement on the document, which
    stands), ``skipped`` (a skip: nothing stored), or ``refused`` with ``error``."""

    event: GradeEvent
    status: str
    label_id: int | None = None
    error: str = ""


def latest_grades(labels: Iterable[Annotation], annotator: str) -> dict[str, int]:
    """The annotator's latest grade per document, whichever page gave it (names compare case-insensitively);
    a document whose latest judgement is unsure has none."""
    latest = _latest_judgements(labels, annotator).items()
    return {doc: grade for doc, label in latest if (grade := grade_of(label)) is not None}


def _latest_judgements(labels: Iterable[Annotation], annotator: str) -> dict[str, Annotation]:
    """The annotator's latest grade or unsure label per document."""
    mine = annotator.strip().lower()
    out: dict[str, Annotation] = {}
    for label in sorted(labels, key=lambda a: (a.created_at, a.id or 0)):
        judged = grade_of(label) is not None or is_unsure(label)
        if label.doc_id is not None and judged and label.annotator.strip().lower() == mine:
            out[label.doc_id] = label
    return out


def save_grades(
    store: AnnotationStore,
    ledger: SaveOnce,
    events: Iterable[GradeEvent],
    *,
    dataset: str,
    task: str,
    query_id: str,
    ranking: Run,
    annotator: str,
    sight: Sight | None = None,
    now: int | None = None,
) -> list[Outcome]:
    """Store every event ``ledger`` has not handled, each as one grade (or unsure) label by ``annotator``
    recording the ranking shown (``ranking.name``) and the document's rank in it, made at the event's time
    (never later than ``now``, ``now_ms()`` by default); return their outcomes. A grade is recorded blind when ``sight``
    (what ``annotator`` may see) still hid its document from them; without ``sight``, never.

    An event pressed no later than the annotator's latest judgement on the document is ``stale``: that one
    stands. One older than ``MAX_AGE_MINUTES``, or a failed write, is refused with its reason (and
    remembered: the annotator presses the key again, which is a new event). A skip stores nothing. Nothing
    but what the events name is stored.
    """
    todo = ledger.fresh(events)
    if not todo:
        return []
    now = now_ms() if now is None else now
    labels = store.list(dataset=dataset, task=task, query_id=query_id)
    outcomes = []
    for event in todo:
        latest = _latest_judgements(labels, annotator).get(event.doc_id)
        pressed = _EPOCH + timedelta(milliseconds=min(event.at, now))
        if event.skip:
            outcome = Outcome(event, "skipped")
        elif latest is not None and rating_of(latest) == event.rating:
            outcome = Outcome(event, "unchanged")
        elif latest is not None and pressed <= datetime.fromisoformat(latest.created_at):
            outcome = Outcome(event, "stale")
        elif event.at < now - MAX_AGE_MINUTES * 60_000:
            outcome = Outcome(
                event, "refused", error=f"pressed over {MAX_AGE_MINUTES} minutes ago: press the key again"
            )
        else:
            try:
                label = store.add(
                    Annotation(
                        dataset=dataset,
                        task=task,
                        query_id=query_id,
                        doc_id=event.doc_id,
                        system=ranking.name,
                        rank=ranking.rank_of(query_id, event.doc_id),
                        failure_type=event.rating,
                        annotator=annotator,
                        created_at=pressed.isoformat(),
                        blind=sight is not None and sight.hidden(labels, (dataset, task, query_id, event.doc_id)),
                        time_ms=event.time_ms,
                    )
                )
            except (ValueError, SelfAdjudication, AnnotationStoreError) as err:
                outcome = Outcome(event, "refused", error=str(err))
            else:
                labels.append(label)
                outcome = Outcome(event, "saved", label_id=label.id)
        ledger.record(outcome)
        outcomes.append(outcome)
    return outcomes


def save_unit_grades(
    store: AnnotationStore,
    ledger: SaveOnce,
    events: Iterable[GradeEvent],
    units: Mapping[str, tuple[str, str, Run]],
    *,
    dataset: str,
    task: str,
    annotator: str,
    sight: Sight | None = None,
    now: int | None = None,
) -> list[Outcome]:
    """``save_grades`` for events naming (query, document) units by a key of the page's (the Judging page's
    blind names, ``queue.blind_name``) rather than one query's
    documents: ``units`` maps each key the page may be sent to its query, document and the ranking the
    label records. Each event is handled as ``save_grades`` handles it, on its own query; the outcomes
    carry the real document ids."""
    groups: dict[tuple[str, str], tuple[Run, list[GradeEvent]]] = {}
    for event in events:
        query_id, doc_id, ranking = units[event.doc_id]
        group = groups.setdefault((query_id, ranking.name), (ranking, []))
        group[1].append(replace(event, doc_id=doc_id))
    outcomes = []
    for (query_id, _), (ranking, grouped) in groups.items():
        outcomes += save_grades(
            store,
            ledger,
            grouped,
            dataset=dataset,
            task=task,
            query_id=query_id,
            ranking=ranking,
            annotator=annotator,
            sight=sight,
            now=now,
        )
    return outcomes


@dataclass(frozen=True)
class Row:
    """One document of the list as the annotator sees it. ``qrels_grade`` and ``others`` are only filled
    once the annotator graded the row (blind first); ``qrels_grade`` None then means unjudged. ``unsure``:
    the annotator's latest judgement on it is unsure (``annotations.UNSURE``) — no grade, so still blind."""

    rank: int
    doc_id: str
    text: str
    grade: int | None
    revealed: bool
    qrels_grade: int | None = None
    others: tuple[str, ...] = ()
    unsure: bool = False

    def to_args(self) -> dict[str, object]:
        """The row as the component's JSON (text is shown with textContent there, never as HTML); an unsure
        row's grade is the code ``unsure``, which the component shows as it shows the Judging page's key."""
        return {
            "rank": self.rank,
            "doc": self.doc_id,
            "text": self.text,
            "grade": UNSURE if self.unsure else self.grade,
            "revealed": self.revealed,
            "qrels": self.qrels_grade,
            "others": list(self.others),
        }


def list_rows(
    ranking: Run,
    query_id: str,
    k: int,
    corpus: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    labels_on_query: Iterable[Annotation],
    annotator: str,
) -> list[Row]:
    """The top-``k`` rows of ``ranking`` for one query, each with the annotator's latest grade (or that they
    were unsure) and, for the rows they graded, the qrels grade and the other annotators' labels."""
    labels = list(labels_on_query)
    named = bool(annotator.strip())
    mine = latest_grades(labels, annotator) if named else {}
    doubted = {doc for doc, a in _latest_judgements(labels, annotator).items() if is_unsure(a)} if named else set()
    me = annotator.strip().lower()
    rows = []
    for rank, (doc_id, _score) in enumerate(ranking.top(query_id, k), start=1):
        grade = mine.get(doc_id)
        revealed = grade is not None
        others: tuple[str, ...] = ()
        if revealed:
            latest: dict[str, str] = {}
            for label in sorted(labels, key=lambda a: (a.created_at, a.id or 0)):
                if label.doc_id == doc_id and label.annotator.strip().lower() != me:
                    known = TAXONOMY.get(label.failure_type)
                    latest[label.annotator] = known.label if known else label.failure_type
            others = tuple(f"{who}: {what}" for who, what in latest.items())
        rows.append(
            Row(
                rank=rank,
                doc_id=doc_id,
                text=corpus.get(doc_id, ""),
                grade=grade,
                revealed=revealed,
                qrels_grade=qrels.get(query_id, {}).get(doc_id) if revealed else None,
                others=others,
                unsure=doc_id in doubted,
            )
        )
    return rows


def list_done(rows: Iterable[Row]) -> bool:
    """Every row of the list has the annotator's judgement (a grade, or unsure): the list is done, and the
    page offers the next query."""
    listed = list(rows)
    return bool(listed) and all(row.grade is not None or row.unsure for row in listed)


def next_query(query_ids: Sequence[str], current: str) -> str | None:
    """The query after ``current`` in the page's order (None after the last, or when ``current`` is not
    listed): where "Next query" goes once a list is done."""
    try:
        at = list(query_ids).index(current)
    except ValueError:
        return None
    return query_ids[at + 1] if at + 1 < len(query_ids) else None
