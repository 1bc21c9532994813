"""Labels: annotators judge a (query, document)'s relevance with a grade, and say why retrieval failed.

Two vocabularies, never mixed. A *relevance judgement* is a grade 0-2 wherever it is made (the Judging
page, Judge a list, the explorer); ``grade_of`` is the one place a stored code becomes a grade, so the
codes older versions wrote ("relevant but unjudged", "judged not relevant") read as grades 1 and 0. On
the Judging page an annotator may also say they are *unsure* (``UNSURE``): a judgement in the grade
vocabulary that is no grade — it never counts in the team's qrels nor in agreement, and it sends the
document to a reviewer (``adjudication``, ``team``). A
*failure type* (a questionable gold document, a lexical trap, a HyDE rewrite that asserted something
wrong …) says why a system failed, for error analysis. What the team's grades make of a task's qrels —
agreed grades, accepted proposals, adjudicated corrections — is defined once, in ``team``.

Labels live in one SQLite file in WAL mode (the default), or in a PostgreSQL database named by
``$R2MED_ANNOTATIONS_URL`` (``annotation_backends`` holds both), so several annotators — separate app
sessions or processes — can write at once. Every label is its own row and every ``add`` its own
transaction: a crash loses at most the label being written, and nothing is overwritten. The store is
the user's work: a file or table that is not an annotation store is reported, never deleted or replaced.

Label codes are a registry (``TAXONOMY``) extended with ``register_failure_type``.
"""

from __future__ import annotations

import builtins
import csv
import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

import pandas as pd

from r2med_core.cache import atomic_write_text
from r2med_core.data import DataError, Problem
from r2med_core.judging.identity import SelfReview, is_own
from r2med_core.judging.stores import COLUMNS, INTEGER_MAX, Backend, Session, configured_target, open_backend
from r2med_core.judging.stores import SCHEMA_VERSION as SCHEMA_VERSION  # re-exported: callers import them from here
from r2med_core.judging.stores import URL_ENV as URL_ENV
from r2med_core.judging.stores import AnnotationStoreError as AnnotationStoreError
from r2med_core.settings import DATA_ENV as DATA_ENV  # re-exported: callers import them from here
from r2med_core.settings import user_data_dir as user_data_dir
from r2med_core.settings import user_data_home

Scope = Literal["query", "document", "both"]
SCOPES: tuple[str, ...] = get_args(Scope)

#: Environment variable naming the folder that holds user data such as the annotation store.
STORE_FILE = "annotations.sqlite"
#: Rows per transaction when importing, so a large import never holds the write lock for long.
IMPORT_BATCH = 500

Qrels = dict[str, dict[str, int]]


# --------------------------------------------------------------------------- taxonomy


@dataclass(frozen=True)
class FailureType:
    """One kind of failure an annotator can name.

    ``scope`` says what is labelled: ``"query"`` (the whole query, no document), ``"document"`` (a
    (query, document) pair) or ``"both"`` (either).
    """

    code: str
    label: str
    description: str
    scope: Scope

    def __post_init__(self) -> None:
        if not isinstance(self.code, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", self.code):
            raise ValueError(f"failure type code must be lower_snake_case (a-z, 0-9, _), got {self.code!r}")
        if self.scope not in SCOPES:
            raise ValueError(f"scope of {self.code!r} must be one of {', '.join(SCOPES)}; got {self.scope!r}")
        if not isinstance(self.label, str) or not self.label.strip():
            raise ValueError(f"failure type {self.code!r} needs a non-empty label")

    def check_scope(self, doc_id: str | None) -> None:
        """Raise ValueError when a label of this type is given (or lacks) a document it should not."""
        if self.scope == "document" and doc_id is None:
            raise ValueError(
                f"failure type {self.code!r} ({self.label}) labels a (query, document) pair: a doc_id is required"
            )
        if self.scope == "query" and doc_id is not None:
            raise ValueError(
                f"failure type {self.code!r} ({self.label}) labels a whole query: doc_id must be empty, got {doc_id!r}"
            )


_DEFAULT_TYPES: tuple[FailureType, ...] = (
    # Relevance grades (``RELEVANCE_CODES``): what every page writes when a person judges a document.
    FailureType("grade_0", "Grade 0: not relevant", "The document does not help answer the query.", "document"),
    FailureType("grade_1", "Grade 1: relevant", "The document helps answer the query.", "document"),
    FailureType("grade_2", "Grade 2: highly relevant", "The document answers the query directly.", "document"),
    # Unsure (``UNSURE``): the annotator looked and could not decide; no grade, a reviewer decides.
    FailureType(
        "unsure",
        "Unsure",
        "The annotator could not decide the document's relevance: no grade; a reviewer decides it (adjudication).",
        "document",
    ),
    # The codes the Judging page wrote before it gave grades (and the LLM judge's grade-1 proposals still
    # are): kept so stored labels read, shown and counted as the grades they stand for.
    FailureType(
        "relevant_unjudged",
        "Grade 1: relevant",
        "Written as 'Relevant but unjudged' by older versions and as the LLM judge's proposals: a grade 1.",
        "document",
    ),
    FailureType(
        "not_relevant",
        "Grade 0: not relevant",
        "Written as 'Judged not relevant' by older versions: a grade 0.",
        "document",
    ),
    FailureType(
        "gold_questionable",
        "Gold judgement questionable",
        "A gold document that does not actually support the answer, or supports it only weakly.",
        "document",
    ),
    FailureType(
        "wrong_aspect",
        "Right condition, wrong aspect",
        "The document is about the right condition but the wrong aspect, e.g. epidemiology instead of treatment.",
        "document",
    ),
    FailureType(
        "lexical_trap",
        "Lexical trap",
        "The document shares the query's words but supports a different conclusion.",
        "document",
    ),
    FailureType(
        "missing_reasoning_step",
        "Missing reasoning step",
        "The bridge from the findings to the diagnosis or treatment is never made by the system.",
        "both",
    ),
    FailureType(
        "rewrite_hallucination",
        "Rewrite hallucination",
        "The LLM rewrite (HyDE, query2doc, …) asserted something wrong and led retrieval astray.",
        "query",
    ),
    FailureType("other", "Other", "Anything else; say what in the note.", "both"),
)

#: The annotator prefix of an LLM judge's proposals (``llm_judge.proposer_name``): "proposed by <model>".
PROPOSER_PREFIX = "proposed by "

#: The relevance grades a person gives, on every page.
GRADES: tuple[int, ...] = (0, 1, 2)
#: The grade each relevance code stands for: ``grade_<n>``, and the two codes older versions wrote. The
#: one place a stored code becomes a grade (``grade_of``); every other code is a failure type.
RELEVANCE_CODES: dict[str, int] = {"grade_0": 0, "grade_1": 1, "grade_2": 2, "relevant_unjudged": 1, "not_relevant": 0}

#: The judgement "unsure": in the grade vocabulary (it replaces the annotator's earlier grade on the
#: document), but no grade: not in the team's qrels nor in agreement; the document goes to adjudication.
UNSURE = "unsure"

#: What a label rates: a document's relevance (a grade, or unsure) or why a system failed (a failure type).
Vocabulary = Literal["grade", "failure type"]

#: Every label code (the grades, then the failure types), in display order. Extend with ``register_failure_type``.
TAXONOMY: dict[str, FailureType] = {t.code: t for t in _DEFAULT_TYPES}


def register_failure_type(
    code: str, label: str, description: str = "", scope: Scope = "both", *, replace: bool = False
) -> FailureType:
    """Add a failure type to ``TAXONOMY`` so a team can label what the defaults do not cover.

    Re-registering an existing code raises ValueError unless ``replace=True`` (labels already stored keep
    their code either way).
    """
    failure_type = FailureType(code, label, description, scope)
    if code in TAXONOMY and not replace and TAXONOMY[code] != failure_type:
        raise ValueError(f"failure type {code!r} is already registered; pass replace=True to redefine it")
    TAXONOMY[code] = failure_type
    return failure_type


def grade_code(grade: int) -> str:
    """The code a grade is stored as (``grade_<n>``); ValueError outside ``GRADES``."""
    if isinstance(grade, bool) or grade not in GRADES:
        raise ValueError(f"a grade is one of {', '.join(map(str, GRADES))}, got {grade!r}")
    return f"grade_{grade}"


def grade_words(grade: int) -> str:
    """A grade with its meaning for a reader ("grade 2 (highly relevant)"); a grade outside ``GRADES``
    (some tasks' qrels use more) keeps its bare number."""
    if isinstance(grade, bool) or grade not in GRADES:
        return f"grade {grade}"
    return f"grade {grade} ({TAXONOMY[grade_code(grade)].label.split(': ', 1)[1]})"


def grade_of(label: Annotation | str) -> int | None:
    """The relevance grade a label (or a code) stands for; None for a failure type."""
    code = label if isinstance(label, str) else label.failure_type
    return RELEVANCE_CODES.get(code) if isinstance(code, str) else None


def is_unsure(label: Annotation | str) -> bool:
    """Whether a label (or a code) says its annotator was unsure of the document's relevance."""
    return (label if isinstance(label, str) else label.failure_type) == UNSURE


def vocabulary_of(label: Annotation | str) -> Vocabulary:
    """Whether a label (or a code) is a relevance judgement (a grade, or unsure) or a failure type."""
    return "grade" if grade_of(label) is not None or is_unsure(label) else "failure type"


def rating_of(label: Annotation) -> str:
    """What a label says, comparable between annotators: a grade as ``grade_<n>`` (whichever code stored
    it, so a grade given on the Judging page equals the same grade given on Judge a list), else its code
    (``UNSURE``, or the failure type)."""
    grade = grade_of(label)
    return label.failure_type if grade is None else grade_code(grade)


def failure_types() -> list[str]:
    """The registered failure types (why a system failed), in display order: every code but the grades and
    ``UNSURE``."""
    return [code for code in TAXONOMY if code not in RELEVANCE_CODES and code != UNSURE]


def get_failure_type(code: str) -> FailureType:
    """The registered type for ``code``; ValueError naming the valid codes otherwise."""
    try:
        return TAXONOMY[code]
    except (KeyError, TypeError):
        raise ValueError(f"unknown failure type {code!r}; valid codes: {', '.join(TAXONOMY)}") from None


# --------------------------------------------------------------------------- annotations


def utc_now() -> str:
    """The current time as the store's ISO 8601 UTC string (sorts lexically in time order)."""
    return _format_time(datetime.now(UTC))


def _format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _normalise_time(value: Any, name: str = "created_at") -> str:
    """Any ISO 8601 time → the store's UTC form; a time without zone is taken as UTC. ValueError naming
    the field ``name`` for anything else, including a time whose UTC form falls outside years 1–9999."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"{name} must be an ISO 8601 time, got {value!r}") from None
    else:
        raise ValueError(f"{name} must be an ISO 8601 string, got {value!r}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return _format_time(moment)
    except OverflowError:
        raise ValueError(f"{name} {value!r} is out of range: in UTC it falls outside years 1 to 9999") from None


def check_storable(name: str, value: object) -> None:
    """ValueError when text ``value`` cannot be stored as it is: a lone surrogate (not UTF-8, which both
    databases store) or a NUL character (PostgreSQL text cannot hold it; refused everywhere, so every
    store takes the same rows)."""
    if not isinstance(value, str):
        return
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{name} is not valid Unicode text (a lone surrogate)") from None
    if "\x00" in value:
        raise ValueError(f"{name} contains a NUL character (\\x00), which a database cannot store")


def check_whole_number(name: str, value: object, least: int, most: int = INTEGER_MAX) -> None:
    """ValueError unless ``value`` is None or a whole number from ``least`` to ``most`` (by default
    ``INTEGER_MAX``, what every store's INTEGER column holds)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        what = "a positive integer" if least == 1 else f"a whole number of {least} or more"
        shown = "a larger number" if isinstance(value, int) and value > most else repr(value)[:40]
        raise ValueError(f"{name} must be {what} (at most {most}) or None, got {shown}")


def unknown_fields(obj: Mapping[str, Any], known: Iterable[str]) -> str:
    """"unknown field(s) …" naming ``obj``'s keys that are not ``known`` (empty when none); a key that is
    not valid Unicode is shown escaped, so the message itself can always be shown and stored."""
    unknown = sorted(set(obj) - set(known))
    if not unknown:
        return ""
    shown = (str(k).encode("utf-8", "backslashreplace").decode("utf-8") for k in unknown)
    return ("unknown field(s) " + ", ".join(f'"{k}"' for k in shown))[:200]


@dataclass(frozen=True, kw_only=True)
class Annotation:
    """One label by one annotator. Construction validates it, so a bad label never reaches the store.

    ``doc_id`` is None for a label on the whole query. ``system`` is the exact ranking the annotator looked
    at (rewrite and reranker included) and ``rank`` the document's rank in it. A new label is *proposed*
    (``accepted`` False, no reviewer); ``review`` accepts or rejects it, recording ``reviewer`` and
    ``reviewed_at``: accepting a grade above 0 settles its (query, document) (``team``). ``blind``: the
    annotator saved it while its unit — the (query, document), or the whole query — was hidden from them:
    no judgements, others' labels, proposals or scores on it seen yet (``visibility``, with sign-in on);
    agreement then counts only blind labels. ``time_ms``: how long the annotator had the document in front
    of them before this grade (the Judging page: for a key, measured in the browser from the document shown
    to the keypress; for a Save, on the server from the document sent to the Save); None where nobody
    measured it.
    """

    id: int | None = None
    dataset: str
    task: str
    query_id: str
    doc_id: str | None = None
    system: str = ""
    failure_type: str
    note: str = ""
    annotator: str
    created_at: str = field(default_factory=utc_now)
    accepted: bool = False
    rank: int | None = None
    reviewer: str = ""
    reviewed_at: str | None = None
    blind: bool = False
    time_ms: int | None = None

    def __post_init__(self) -> None:
        for name in ("dataset", "task", "query_id", "annotator"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        for name in ("system", "note", "reviewer"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a string, got {getattr(self, name)!r}")
        for name in ("dataset", "task", "query_id", "doc_id", "system", "note", "annotator", "reviewer"):
            check_storable(name, getattr(self, name))
        if self.doc_id == "":
            object.__setattr__(self, "doc_id", None)
        if self.doc_id is not None and not isinstance(self.doc_id, str):
            raise ValueError(f"doc_id must be a string or None, got {self.doc_id!r}")
        if self.id is not None and (isinstance(self.id, bool) or not isinstance(self.id, int)):
            raise ValueError(f"id must be an integer or None, got {self.id!r}")
        for name in ("accepted", "blind"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        check_whole_number("rank", self.rank, 1)
        check_whole_number("time_ms", self.time_ms, 0)
        get_failure_type(self.failure_type).check_scope(self.doc_id)
        object.__setattr__(self, "created_at", _normalise_time(self.created_at))
        if self.reviewed_at is not None:
            object.__setattr__(self, "reviewed_at", _normalise_time(self.reviewed_at, "reviewed_at"))

    @property
    def status(self) -> str:
        """``"proposed"`` (not reviewed yet), ``"accepted"`` or ``"rejected"`` (by ``reviewer``)."""
        if self.accepted:
            return "accepted"
        return "rejected" if self.reviewer else "proposed"

    @classmethod
    def _from_row(cls, row: tuple[Any, ...]) -> Annotation:
        """Rebuild a stored row without validation: a type registered by another session still reads."""
        obj = object.__new__(cls)
        for name, value in zip(FIELDS, row):
            object.__setattr__(obj, name, bool(value) if name in ("accepted", "blind") else value)
        return obj

    @property
    def by_model(self) -> bool:
        """A model's proposal (an LLM judge's), not a person's judgement: a suggestion for reviewers that
        never counts in the annotators' agreement or adjudication."""
        return isinstance(self.annotator, str) and self.annotator.startswith(PROPOSER_PREFIX)

    def content(self) -> tuple[Any, ...]:
        """Every field but the id: two labels with equal content are duplicates on import."""
        return tuple(getattr(self, name) for name in FIELDS[1:])


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Annotation))
_REQUIRED_ON_IMPORT = ("dataset", "task", "query_id", "failure_type", "annotator", "created_at")


def annotation_from_mapping(obj: Mapping[str, Any]) -> Annotation:
    """Build an annotation from an exported JSON object or CSV row (the id is ignored).

    Unknown keys are an error, so a typo or a newer export's field is never silently dropped.
    """
    unknown = unknown_fields(obj, FIELDS)
    if unknown:
        raise ValueError(unknown)
    missing = [name for name in _REQUIRED_ON_IMPORT if obj.get(name) in (None, "")]
    if missing:
        raise ValueError("missing field(s) " + ", ".join(f'"{m}"' for m in missing))
    values = {name: obj[name] for name in FIELDS if name in obj and name != "id"}
    for name in ("query_id", "doc_id"):
        if isinstance(values.get(name), int) and not isinstance(values[name], bool):
            values[name] = str(values[name])  # ids are strings; integer ids are accepted as in data.py
    for name in ("system", "note", "reviewer", "reviewed_at", "rank", "blind", "time_ms"):
        if values.get(name) in (None, ""):
            values.pop(name, None)
    for name in ("rank", "time_ms"):
        if isinstance(values.get(name), str):
            text = values[name].strip()  # a CSV cell; beyond 18 digits it is refused as text, not read
            values[name] = int(text) if text.isdecimal() and len(text) <= 18 else values[name]
    for name in ("accepted", "blind"):
        if name in values:
            values[name] = _as_bool(values[name], name)
    if values.get("accepted") and not values.get("reviewer"):
        # An acceptance nobody is named for (e.g. a schema-1 export, where every label was accepted on
        # save) comes in as a proposal: only a reviewer turns a label into a judgement.
        values["accepted"] = False
    return Annotation(**values)


def _as_bool(value: Any, name: str = "accepted") -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"{name} must be true or false, got {value!r}")


@dataclass(frozen=True)
class LabelImportReport:
    """What an import did: rows added, identical rows skipped, and the lines that could not be read."""

    added: int = 0
    skipped_duplicates: int = 0
    errors: tuple[Problem, ...] = ()


# --------------------------------------------------------------------------- the store


def default_store_path() -> Path:
    """``$R2MED_DATA_HOME/annotations.sqlite``, else the user data folder's ``annotations.sqlite``."""
    return user_data_home() / STORE_FILE


def default_store_target() -> str | Path:
    """Where ``AnnotationStore()`` keeps labels: ``$R2MED_ANNOTATIONS_URL`` (a ``postgresql://`` URL, or a
    SQLite path) when set, else ``default_store_path()``."""
    return configured_target() or default_store_path()


if FIELDS != COLUMNS:  # pragma: no cover - a programming error caught at import
    raise AssertionError("Annotation's fields and the store's columns differ")
_COLUMNS = ", ".join(FIELDS)
_INSERT_ROW_SQL = f"INSERT INTO annotations ({', '.join(FIELDS[1:])}) VALUES ({', '.join('?' * (len(FIELDS) - 1))})"
_INSERT_SQL = _INSERT_ROW_SQL + " RETURNING id"
_FILTERS = ("dataset", "task", "query_id", "doc_id", "failure_type", "system", "annotator")


class ContentIndex:
    """The ids of a table's stored rows by content (``columns``: every column but the id, ``dataset`` and
    ``task`` first), for duplicate checks in memory instead of one query per row.

    A merge of rows of some ``tasks`` ((dataset, task) pairs) reads those tasks' rows on the first
    ``refresh`` and, at each later one, only the rows added since: ids only grow and every writer holds the
    store's lock, so a refresh at the start of a write transaction finds every row committed meanwhile,
    and one after an insert in it reads back exactly the rows inserted. (A row another writer changes or
    deletes meanwhile is kept as it was read, as if the merge had gone first.)"""

    def __init__(self, table: str, columns: Sequence[str], tasks: Iterable[tuple[str, str]]) -> None:
        if tuple(columns[:2]) != ("dataset", "task"):
            raise ValueError("a content index's first columns are dataset and task")
        self._table = table
        self._select = f"SELECT id, {', '.join(columns)} FROM {table}"
        self._tasks = set(tasks)
        self._last: int | None = None
        #: Content → the id of the first stored row with it.
        self.ids: dict[tuple[Any, ...], int] = {}

    def refresh(self, conn: Session) -> builtins.list[tuple[Any, ...]]:
        """Read the rows added since the last refresh (the first time: every row of the tasks), inside a
        write transaction; returns the contents read, oldest first."""
        if self._last is None:
            self._last = int(conn.execute(f"SELECT coalesce(max(id), 0) FROM {self._table}").fetchone()[0])
            rows = [
                row
                for dataset, task in sorted(self._tasks)
                for row in conn.execute(
                    f"{self._select} WHERE dataset = ? AND task = ? ORDER BY id", (dataset, task)
                ).fetchall()
            ]
        else:
            rows = conn.execute(f"{self._select} WHERE id > ? ORDER BY id", (self._last,)).fetchall()
        read = []
        for row in rows:
            row_id, content = int(row[0]), tuple(row[1:])
            self._last = max(self._last, row_id)
            if content[:2] in self._tasks:
                self.ids.setdefault(content, row_id)
                read.append(content)
        return read


Unit = tuple[str, str, str, str | None]  # (dataset, task, query_id, doc_id or None for the whole query)


class SelfAdjudication(SelfReview):
    """One person would both label a unit and adjudicate it: another person does one of the two."""


def describe(unit: Unit) -> str:
    """A unit in words, for messages."""
    _, task, query_id, doc_id = unit
    return f"{task} · query {query_id} · " + (f"document {doc_id}" if doc_id is not None else "the whole query")


def check_not_own_unit(
    unit: Unit, annotators: Iterable[str], reviewers: Iterable[str], *, labelling: bool = False
) -> None:
    """The one rule on who labels and who adjudicates: SelfAdjudication when a person among ``reviewers``
    (who decided ``unit``, or decide it now) is among its ``annotators`` (who labelled it, or label it
    now), names compared as ``identity.is_own`` compares them (the rule reviews follow too). Nobody
    adjudicates a unit they labelled, whichever came first: ``adjudication.decide`` and a restored
    decision are checked against every label on the unit, whatever its date, and a new label (``add``, an
    import) against every decision on it (``labelling``: the annotator is the one acting now)."""
    annotators = builtins.list(annotators)
    for reviewer in reviewers:
        if not is_own(reviewer, annotators):
            continue
        if labelling:
            raise SelfAdjudication(
                f"{reviewer} adjudicated {describe(unit)}: nobody labels a unit they adjudicated "
                "(nobody adjudicates a unit they labelled); another annotator labels it"
            )
        raise SelfAdjudication(
            f"{reviewer} labelled {describe(unit)}: nobody adjudicates a unit they labelled; "
            "another reviewer decides it"
        )


def _check_deciders(conn: Session, labels: Iterable[Annotation]) -> dict[int, str]:
    """Inside a write transaction: per position in ``labels``, why that label is refused (its annotator
    adjudicated its unit: ``check_not_own_unit``); one query per task, decisions being few."""
    labels = builtins.list(labels)
    deciders: dict[Unit, builtins.list[str]] = {}
    for dataset, task in sorted({(a.dataset, a.task) for a in labels}):
        rows = conn.execute(
            "SELECT query_id, doc_id, reviewer FROM adjudications WHERE dataset = ? AND task = ?", (dataset, task)
        ).fetchall()
        for query_id, doc_id, reviewer in rows:
            deciders.setdefault((dataset, task, query_id, doc_id), []).append(str(reviewer))
    refused = {}
    for position, label in enumerate(labels):
        unit = (label.dataset, label.task, label.query_id, label.doc_id)
        try:
            check_not_own_unit(unit, [label.annotator], deciders.get(unit, ()), labelling=True)
        except SelfAdjudication as err:
            refused[position] = str(err)
    return refused


def _where(filters: Mapping[str, Any]) -> tuple[str, list[Any]]:
    unknown = sorted(set(filters) - set(_FILTERS))
    if unknown:
        raise TypeError(f"unknown filter(s) {', '.join(unknown)}; use {', '.join(_FILTERS)}")
    clauses = [(f"{name} = ?", value) for name, value in filters.items() if value is not None]
    if not clauses:
        return "", []
    return " WHERE " + " AND ".join(c for c, _ in clauses), [v for _, v in clauses]


def _row_values(annotation: Annotation) -> tuple[Any, ...]:
    return tuple(int(v) if isinstance(v, bool) else v for v in annotation.content())


class AnnotationStore:
    """Failure labels in one SQLite file (the default) or a PostgreSQL database, safe for several writers
    (threads or processes) at once.

    ``path`` is a SQLite file path or a ``postgresql://`` URL; None means ``$R2MED_ANNOTATIONS_URL`` when
    set, else ``default_store_path()``. Each operation opens its own short-lived connection, so a store
    object can be shared by Streamlit sessions and used after ``fork``. Writes take the store's write lock
    up front and wait up to ``timeout`` seconds (at least 5) for another writer.
    """

    def __init__(self, path: str | Path | None = None, *, timeout: float = 30.0) -> None:
        target = default_store_target() if path is None else path
        self.timeout = max(float(timeout), 5.0)
        self._backend: Backend = open_backend(target, self.timeout)
        #: The SQLite file; None when the store is a PostgreSQL database.
        self.path: Path | None = self._backend.path

    @property
    def location(self) -> str:
        """Where the labels live, safe to show: the file path, or the database URL without user and password."""
        return self._backend.location

    @property
    def kind(self) -> str:
        """The database: ``"SQLite"`` or ``"PostgreSQL"``."""
        return self._backend.kind

    def __repr__(self) -> str:
        return f"AnnotationStore({self.location!r})"

    def ping(self) -> None:
        """Raise AnnotationStoreError unless the store answers now (a database server may have gone away
        since the store was opened), so a page can say so before it starts reading."""
        with self._connection() as conn:
            conn.execute("SELECT 1 FROM annotations LIMIT 1").fetchall()

    def _connection(self, write: bool = False) -> AbstractContextManager[Session]:
        """A session for one operation; with ``write``, one locked transaction committed on success."""
        return self._backend.connection(write)

    # ---------------------------------------------------------------- writing

    def add(self, annotation: Annotation) -> Annotation:
        """Store one label in its own transaction and return it with its new id (any given id is ignored).
        SelfAdjudication when its annotator adjudicated the unit (``check_not_own_unit``)."""
        if not isinstance(annotation, Annotation):
            raise TypeError(f"expected an Annotation, got {type(annotation).__name__}")
        with self._connection(write=True) as conn:
            refused = _check_deciders(conn, [annotation])
            if refused:
                raise SelfAdjudication(refused[0])
            new_id = int(conn.execute(_INSERT_SQL, _row_values(annotation)).fetchone()[0])
        return replace(annotation, id=new_id)

    def delete(self, annotation_id: int) -> None:
        """Remove one label; KeyError when no label has this id (say, another reviewer deleted it)."""
        with self._connection(write=True) as conn:
            if conn.execute("DELETE FROM annotations WHERE id = ?", (annotation_id,)).rowcount == 0:
                raise KeyError(f"no annotation with id {annotation_id}")

    def review(
        self, annotation_id: int, accept: bool, reviewer: str, *, qrels: Mapping[str, Mapping[str, int]] | None = None
    ) -> Annotation:
        """Accept or reject a label as ``reviewer`` (name and time recorded); an accepted grade above 0 settles
        its (query, document) for the team (``team``). Nobody reviews their own label: a ``reviewer`` who made
        it is refused (SelfReview, ``identity.is_own``), whichever page or program asks. With the task's
        ``qrels``, accepting one for a document already judged relevant is refused (ValueError)."""
        if not isinstance(accept, bool):
            raise ValueError(f"accept must be True or False, got {accept!r}")
        if not isinstance(reviewer, str) or not reviewer.strip():
            raise ValueError("a review needs the reviewer's name")
        label = self.get(annotation_id)
        if is_own(reviewer, [label.annotator]):
            raise SelfReview(
                f"{reviewer.strip()} made label #{annotation_id}: nobody reviews their own label; "
                "another reviewer accepts or rejects it"
            )
        if accept and qrels is not None:
            check_unjudged(label, qrels)
        with self._connection(write=True) as conn:
            if not conn.execute(
                "UPDATE annotations SET accepted = ?, reviewer = ?, reviewed_at = ? WHERE id = ?",
                (int(accept), reviewer.strip(), utc_now(), annotation_id),
            ).rowcount:
                raise KeyError(f"no annotation with id {annotation_id}")
        return self.get(annotation_id)

    # ---------------------------------------------------------------- reading

    def get(self, annotation_id: int) -> Annotation:
        """One label by id; KeyError when absent."""
        with self._connection() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM annotations WHERE id = ?", (annotation_id,)).fetchone()
        if row is None:
            raise KeyError(f"no annotation with id {annotation_id}")
        return Annotation._from_row(row)

    def list(
        self,
        dataset: str | None = None,
        task: str | None = None,
        query_id: str | None = None,
        failure_type: str | None = None,
        system: str | None = None,
        annotator: str | None = None,
        doc_id: str | None = None,
    ) -> builtins.list[Annotation]:
        """Labels matching every given filter (None means any), oldest first."""
        filters = {
            "dataset": dataset,
            "task": task,
            "query_id": query_id,
            "failure_type": failure_type,
            "system": system,
            "annotator": annotator,
            "doc_id": doc_id,
        }
        where, params = _where(filters)
        with self._connection() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM annotations{where} ORDER BY id", params).fetchall()
        return [Annotation._from_row(row) for row in rows]

    def __len__(self) -> int:
        with self._connection() as conn:
            return int(conn.execute("SELECT count(*) FROM annotations").fetchone()[0])

    def counts_by_type(self, **filters: str | None) -> dict[str, int]:
        """Labels per failure type: every registered type (0 when unused) first, then any other stored code."""
        where, params = _where(filters)
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT failure_type, count(*) FROM annotations{where} GROUP BY failure_type", params
            ).fetchall()
        counts = dict.fromkeys(TAXONOMY, 0)
        for code, n in sorted(rows):
            counts[code] = int(n)
        return counts

    def to_dataframe(self, **filters: str | None) -> pd.DataFrame:
        """The matching labels as a table, one column per Annotation field, plus ``status``."""
        return labels_frame(self.list(**filters))

    def flagged(self, **filters: str | None) -> builtins.list[tuple[Annotation, builtins.list[str]]]:
        """Stored labels that break a rule (written by another tool, an older version or by hand), each
        with what is wrong, so the app can show them and offer to delete them instead of failing."""
        found = []
        for annotation in self.list(**filters):
            problems = row_problems(annotation)
            if problems:
                found.append((annotation, problems))
        return found

    # ---------------------------------------------------------------- exchange

    def jsonl_text(self, **filters: str | None) -> str:
        """The matching labels, one JSON object per line (what ``export_jsonl`` writes)."""
        return "".join(json.dumps(asdict(a), ensure_ascii=False) + "\n" for a in self.list(**filters))

    def csv_text(self, **filters: str | None) -> str:
        """The matching labels as CSV with a header; an empty doc_id cell is a query-level label."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(FIELDS)
        for annotation in self.list(**filters):
            writer.writerow([_csv_cell(getattr(annotation, name)) for name in FIELDS])
        return buffer.getvalue()

    def export_jsonl(self, path: str | Path, **filters: str | None) -> Path:
        """Write the matching labels as JSONL (atomically), for sharing or backup."""
        path = Path(path)
        atomic_write_text(path, self.jsonl_text(**filters))
        return path

    def export_csv(self, path: str | Path, **filters: str | None) -> Path:
        """Write the matching labels as CSV (atomically)."""
        path = Path(path)
        atomic_write_text(path, self.csv_text(**filters))
        return path

    def import_jsonl(self, path: str | Path) -> LabelImportReport:
        """Merge labels exported by ``export_jsonl``: identical rows (all fields but id) are skipped.

        A malformed line is reported by file and line and the others are still imported.
        """
        path = Path(path)
        return self.import_jsonl_bytes(_read_file(path), str(path))

    def import_jsonl_bytes(
        self, data: bytes, name: str = "upload", *, max_bytes: int | None = None
    ) -> LabelImportReport:
        """``import_jsonl`` on content held in memory (an upload): ``name`` only labels the messages and is
        never used as a path. More than ``max_bytes`` is refused whole, with a DataError saying the limit."""
        check_upload_size(data, name, max_bytes)
        parsed: builtins.list[tuple[int, Annotation | Problem]] = [
            (number, obj if isinstance(obj, Problem) else _parse(obj, name, number))
            for number, obj in jsonl_objects(data, name)
        ]
        return self._merge(parsed, name)

    def import_csv(self, path: str | Path) -> LabelImportReport:
        """Merge labels exported by ``export_csv`` (same rules as ``import_jsonl``)."""
        path = Path(path)
        try:
            text = _read_file(path).decode("utf-8-sig")  # spreadsheets often save CSV with a BOM
        except UnicodeDecodeError as err:
            raise DataError([Problem(str(path), None, f"not UTF-8 text (byte {err.start})")]) from None
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = reader.fieldnames or []
        missing = [name for name in _REQUIRED_ON_IMPORT if name not in header]
        if missing:
            raise DataError([Problem(str(path), 1, "header lacks column(s) " + ", ".join(missing))])
        parsed: builtins.list[tuple[int, Annotation | Problem]] = []
        start = reader.line_num + 1
        for row in reader:
            number, start = start, reader.line_num + 1
            if None in row or any(value is None for value in row.values()):
                parsed.append((number, Problem(str(path), number, f"expected {len(header)} columns")))
                continue
            parsed.append((number, _parse(row, str(path), number)))
        return self._merge(parsed, str(path))

    def _merge(self, parsed: builtins.list[tuple[int, Annotation | Problem]], name: str) -> LabelImportReport:
        """Insert the valid labels, skipping any already stored (or earlier in the file); a label whose
        annotator adjudicated its unit is refused by line (``check_not_own_unit``).

        Rows go in batches of ``IMPORT_BATCH``, each its own short transaction, so annotators saving
        labels meanwhile wait milliseconds, not the whole import; a failure keeps the batches committed.
        """
        errors = [item for _, item in parsed if isinstance(item, Problem)]
        valid = [(number, item) for number, item in parsed if isinstance(item, Annotation)]
        stored = self._store_labels([item for _, item in valid])
        for (number, _), outcome in zip(valid, stored):
            if isinstance(outcome, str):
                errors.append(Problem(name, number, outcome))
        kept = [outcome for outcome in stored if not isinstance(outcome, str)]
        added = sum(1 for _, new in kept if new)
        errors.sort(key=lambda p: p.line or 0)
        return LabelImportReport(added=added, skipped_duplicates=len(kept) - added, errors=tuple(errors))

    def _store_labels(
        self, labels: builtins.list[Annotation], index: ContentIndex | None = None
    ) -> builtins.list[tuple[int, bool] | str]:
        """Per label, the id of its row and whether it was added now (False: an identical row was stored
        already, or came earlier in ``labels``), or why it was refused (a new label by a person who
        adjudicated its unit: ``check_not_own_unit``). In batches of ``IMPORT_BATCH`` short transactions,
        each checking its labels against ``index`` (made here when not given) and the decisions, and
        adding the new ones at once (``executemany``), so a merge takes time in proportion to its size,
        not to the labels stored."""
        if index is None:
            index = ContentIndex("annotations", FIELDS[1:], {(a.dataset, a.task) for a in labels})
        stored: builtins.list[tuple[int, bool] | str] = []
        rows = [_row_values(item) for item in labels]
        for start in range(0, len(rows), IMPORT_BATCH):
            batch = rows[start : start + IMPORT_BATCH]
            with self._connection(write=True) as conn:
                index.refresh(conn)
                refused = _check_deciders(conn, labels[start : start + IMPORT_BATCH])
                new = builtins.list(
                    dict.fromkeys(row for i, row in enumerate(batch) if row not in index.ids and i not in refused)
                )
                if new:
                    conn.executemany(_INSERT_ROW_SQL, new)
                    index.refresh(conn)  # reads back exactly the rows just added: the lock is still held
            fresh = set(new)
            for i, row in enumerate(batch):
                if row in index.ids:
                    stored.append((index.ids[row], row in fresh))
                    fresh.discard(row)
                else:
                    stored.append(refused[i])
        return stored


def labels_frame(labels: Iterable[Annotation]) -> pd.DataFrame:
    """Labels as a table, one column per Annotation field, plus ``status``."""
    labels = list(labels)
    frame = pd.DataFrame([asdict(a) for a in labels], columns=list(FIELDS))
    frame["status"] = [_safe_status(a) for a in labels]
    return frame


def _csv_cell(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else value


def _read_file(path: Path) -> bytes:
    if not path.is_file():
        raise DataError([Problem(str(path), None, "file not found")])
    return path.read_bytes()


def check_upload_size(data: bytes, name: str, max_bytes: int | None) -> None:
    """DataError saying the limit when an upload holds more than ``max_bytes`` (None: no limit)."""
    if max_bytes is not None and len(data) > max_bytes:
        raise DataError(
            [Problem(name, None, f"{len(data) / 2**20:.2f} MB is over the {max_bytes / 2**20:.2f} MB upload limit")]
        )


def jsonl_objects(data: bytes, name: str) -> builtins.list[tuple[int, dict[str, Any] | Problem]]:
    """Each non-blank line of JSONL ``data`` as (line number, JSON object), or a Problem naming ``name``
    and the line when it is not UTF-8, not JSON, not an object or holds a number too long to read (a BOM
    on line 1 is allowed)."""
    out: builtins.list[tuple[int, dict[str, Any] | Problem]] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw.decode("utf-8-sig" if number == 1 else "utf-8"))
        except UnicodeDecodeError as err:
            out.append((number, Problem(name, number, f"not UTF-8 text (byte {err.start})")))
            continue
        except json.JSONDecodeError as err:
            out.append((number, Problem(name, number, f"malformed JSON: {err.msg} (column {err.colno})")))
            continue
        except RecursionError:
            out.append((number, Problem(name, number, "JSON nested too deeply")))
            continue
        except ValueError:  # a number with more digits than Python reads (sys.get_int_max_str_digits)
            out.append((number, Problem(name, number, "a number too long to read")))
            continue
        out.append((number, obj if isinstance(obj, dict) else Problem(name, number, "expected a JSON object per line")))
    return out


def _parse(obj: Mapping[str, Any], name: str, number: int) -> Annotation | Problem:
    try:
        return annotation_from_mapping(obj)
    except (ValueError, TypeError, RecursionError) as err:
        return Problem(name, number, str(err)[:300])


def _safe_status(annotation: Annotation) -> str:
    try:
        return annotation.status
    except Exception:
        return "?"


def row_problems(annotation: Annotation) -> builtins.list[str]:
    """What is wrong with a stored label (empty when nothing): it is shown flagged, never raised on."""
    problems = []
    try:
        Annotation(**{name: getattr(annotation, name) for name in FIELDS})
    except (ValueError, TypeError) as err:
        problems.append(str(err))
    for name in ("query_id", "doc_id"):
        value = getattr(annotation, name, None)
        if value is not None and isinstance(value, str) and re.search(r"\s", value):
            problems.append(f"{name} {value!r} contains whitespace (cannot be written to a TREC qrels file)")
    return problems


def check_unjudged(annotation: Annotation, qrels: Mapping[str, Mapping[str, int]]) -> None:
    """Refuse (ValueError) a proposal — a grade above 0 — on a document the task already judges relevant:
    there is nothing to add, and accepting it would settle a judged pair."""
    if not grade_of(annotation) or annotation.doc_id is None:
        return
    grade = qrels.get(annotation.query_id, {}).get(annotation.doc_id, 0)
    if grade > 0:
        raise ValueError(
            f"{annotation.doc_id} is already judged relevant (grade {grade}) for query {annotation.query_id}: "
            "nothing to add"
        )
