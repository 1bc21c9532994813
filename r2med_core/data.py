"""Datasets: the ``Dataset`` dataclass and loaders for every source R2MED Explorer reads.

Sources: a local folder in the R2MED layout, a BEIR-layout folder, the Hugging Face hub
(``R2MED/<task>``, see ``hub.py``) and the embedded demo (``r2med_core/demo/``). Every loader ends
in the same ``Dataset`` so retrieval, evaluation and the app never care where data came from.

Bad data raises ``DataError`` whose problems name the file and line, so a user can fix the file.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from r2med_core import file_facts
from r2med_core.tasks import REWRITE_METHODS, TASKS, Family

#: The embedded demo tasks, one per R2MED family (folders under ``r2med_core/demo/``).
DEMO_TASKS: tuple[str, ...] = ("qa-reference", "clinical-evidence", "clinical-case")

REWRITE_FILE = "query_with_hydoc.jsonl"
#: Beside a rewrite file, what made it (``{"made_by": "llm" | "hand", …}``): the model file and its
#: sha256, the server, prompts and sampling for an LLM's; why it exists for one written by hand.
PROVENANCE_FILE = "provenance.json"
#: How a rewrite set written by hand is named wherever a rewrite is named (see ``Dataset.hand_written``).
HAND_WRITTEN = "written by hand, not by an LLM"
#: How a rewrite set generated live on this server (not a file of the dataset) is marked wherever it is named.
LIVE = "generated live"
#: An R2MED-layout folder's qrels, in the order they are looked for.
QRELS_FILES = ("qrels.jsonl", "qrels.txt", "qrels.tsv")
_MAX_PROBLEMS = 20


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a data file, located as precisely as we can."""

    path: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}"


class DataError(ValueError):
    """A dataset could not be loaded; ``problems`` says where and why."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        shown = "\n".join(f"  {p}" for p in problems[:_MAX_PROBLEMS])
        more = len(problems) - _MAX_PROBLEMS
        tail = f"\n  … and {more} more problems" if more > 0 else ""
        super().__init__(f"{len(problems)} problem(s) in the dataset:\n{shown}{tail}")


@dataclass(frozen=True)
class LoadReport:
    """Non-fatal findings of a load, shown to the user next to the numbers they affect.

    qrels are used as given, as the benchmark does: a line naming a document absent from the corpus
    is kept (it counts in recall, ideal DCG and AP), and a duplicate (query, document) line replaces
    the earlier one. Only lines naming an unknown query are left aside: no run can retrieve for them.
    """

    unknown_qrels_queries: int = 0
    unknown_qrels_documents: int = 0
    queries_without_qrels: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    duplicate_qrels: int = 0
    queries_without_positives: tuple[str, ...] = ()
    queries_only_unknown_documents: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        counted = [
            (
                self.unknown_qrels_queries,
                "qrels entries name queries absent from the query file (no run retrieves them)",
            ),
            (
                self.unknown_qrels_documents,
                "qrels entries name documents absent from the corpus: kept, as the benchmark does (they count "
                "in recall and nDCG but can never be retrieved)",
            ),
            (
                len(self.queries_only_unknown_documents),
                "queries are judged only on documents absent from the corpus: averaged, they score 0",
            ),
            (
                self.duplicate_qrels,
                "duplicate qrels lines: the last line for a (query, document) wins, as in the benchmark",
            ),
            (
                len(self.queries_without_positives),
                "queries have only grade-0 judgements: averaged, as the benchmark does (they score 0)",
            ),
            (len(self.queries_without_qrels), "queries have no relevance judgements and are left out of averages"),
        ]
        return [*self.warnings, *(f"{n} {text}" for n, text in counted if n)]


@dataclass(frozen=True, eq=False)
class Dataset:
    """One retrieval task: corpus, queries, graded qrels and any precomputed query rewrites.

    ``corpus`` and ``queries`` keep file order (it breaks BM25 ties, as in the benchmark).
    ``rewrites`` maps ``(method, llm)`` to ``{query id: hypothetical document}``; ``rewrite_queries``
    to the ``text`` field of the same rows — the query text the benchmark uses with that rewrite
    (where a row has none, the query file's text is used).
    """

    name: str
    corpus: Mapping[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    source: str
    family: Family | None = None
    query_meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    rewrites: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    report: LoadReport = field(default_factory=LoadReport)
    rewrite_queries: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    #: What made each rewrite set, from its ``provenance.json`` (absent: not recorded).
    rewrite_provenance: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    #: The exact source revision where there is one (a Hugging Face dataset commit); local folders
    #: are identified by ``fingerprint`` and ``content_digest`` instead.
    revision: str | None = None

    @cached_property
    def fingerprint(self) -> str:
        """A digest of document ids and texts: the key of every index built on this corpus (a corpus
        read from a file knows it without reading the file again)."""
        if isinstance(self.corpus, FileCorpus):
            return self.corpus.fingerprint
        return corpus_fingerprint(self.corpus.items())

    @cached_property
    def content_digest(self) -> str:
        """A digest of queries, judgements and rewrites: with ``fingerprint``, the key of a run."""
        payload = json.dumps(
            [
                self.queries,
                self.qrels,
                sorted((list(k), v) for k, v in self.rewrites.items()),
                sorted((list(k), v) for k, v in self.rewrite_queries.items()),
            ],
            sort_keys=True,
            ensure_ascii=False,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:20]

    @property
    def doc_ids(self) -> list[str]:
        return list(self.corpus)

    @property
    def is_demo(self) -> bool:
        return self.source.startswith("demo")

    def positives(self, query_id: str) -> dict[str, int]:
        """The query's relevant documents with their grades (grade > 0), best first."""
        grades = self.qrels.get(query_id, {})
        ranked = sorted(grades.items(), key=lambda item: -item[1])
        return {doc_id: grade for doc_id, grade in ranked if grade > 0}

    def rewrite_options(self) -> list[tuple[str, str]]:
        """Available ``(method, llm)`` rewrites, in a stable order."""
        return sorted(self.rewrites)

    def hand_written(self, rewrite: tuple[str, str]) -> bool:
        """Whether a rewrite set was written by hand (its ``provenance.json`` says ``"made_by": "hand"``):
        an illustration, never an LLM's output nor the benchmark's setting. The one place that decides."""
        return self.rewrite_provenance.get((rewrite[0], rewrite[1]), {}).get("made_by") == "hand"

    def generated_live(self, rewrite: tuple[str, str]) -> bool:
        """Whether a rewrite set is a live generation recorded on this server (``llm.generation``
        attaches it with ``"live": true``), not a file of the dataset. The one place that decides."""
        return self.rewrite_provenance.get((rewrite[0], rewrite[1]), {}).get("live") is True


# --------------------------------------------------------------------------- reading files


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
#: The largest relevance grade accepted (R2MED uses 0-2; a huge grade would zero every metric).
MAX_GRADE = 100


def _parse_json(data: bytes) -> Any:
    """``json.loads`` whose every failure is a ValueError with a message a user can act on.

    Beyond malformed JSON: nesting deep enough to exhaust the recursion limit, integers of
    thousands of digits, and lone surrogates (``"\\ud800"``), which are not Unicode text and crash
    every later encode.
    """
    try:
        obj = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        where = f"column {err.colno}" if err.lineno == 1 else f"line {err.lineno}, column {err.colno}"
        raise ValueError(f"malformed JSON: {err.msg} ({where})") from None
    except RecursionError:
        raise ValueError("malformed JSON: nested too deeply") from None
    except ValueError as err:  # e.g. an integer beyond Python's int-string limit
        raise ValueError(f"malformed JSON: {' '.join(str(err).split(';')[0].split())}") from None
    if _SURROGATE_ESCAPE.search(data) and _has_lone_surrogate(obj):
        raise ValueError("invalid text: a lone surrogate escape (e.g. \\ud800) is not a Unicode character")
    return obj


def _has_lone_surrogate(obj: Any) -> bool:
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _id_problem(name: str, value: str) -> str | None:
    """Why an id cannot be used (None when it can): TREC run and qrels files split on whitespace."""
    if value == "":
        return f'"{name}" must be a non-empty string'
    if any(char.isspace() for char in value):
        return f'"{name}" {value!r} contains whitespace, which TREC run and qrels files cannot hold'
    if any("\ud800" <= char <= "\udfff" for char in value):  # a lone surrogate (JSON "\ud800"): not writable as UTF-8
        return f'"{name}" {value!r} is not valid Unicode text (a lone surrogate)'
    return None


def _checked_grade(value: Any, must: str) -> int | str:
    """``value`` as a relevance grade, or what is wrong with it: not an integer (``must`` says what the
    file's format wanted, before the value), or outside 0-``MAX_GRADE``. The one rule of every qrels reader."""
    grade = _as_grade(value)
    if grade is None:
        return f"{must}, got {value[:40] if isinstance(value, str) else value!r}"
    if 0 <= grade <= MAX_GRADE:
        return grade
    return f"relevance grade {grade} is outside 0-{MAX_GRADE}"


def _lines(path: Path, digest: Any = None) -> Iterator[tuple[int, bytes]]:
    """Stream ``(line number, line)`` of a file, one line at a time (without its newline, and without a
    leading UTF-8 byte-order mark: it would rename the first id); ``digest.update`` sees every byte
    read, so the caller learns the bytes' digest in the same pass."""
    if not path.is_file():
        raise DataError([Problem(str(path), None, "file not found")])
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if digest is not None:
                digest.update(line)
            if number == 1:
                line = line.removeprefix(b"\xef\xbb\xbf")
            yield number, line[:-1] if line.endswith(b"\n") else line


def _read_jsonl(path: Path, problems: list[Problem], digest: Any = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for each good non-blank line as it is read; bad lines (and an
    empty file) are added to ``problems``, which the caller raises with its own as one DataError."""
    seen = False
    for number, line in _lines(path, digest):
        if not line.strip():
            continue
        seen = True
        try:
            obj = _parse_json(line)
        except ValueError as err:
            problems.append(Problem(str(path), number, str(err)))
            continue
        if not isinstance(obj, dict):
            problems.append(Problem(str(path), number, "expected a JSON object per line"))
            continue
        yield number, obj
    if not seen:
        problems.append(Problem(str(path), None, "file is empty"))


def _read_bytes(path: Path) -> bytes:
    """The file's bytes without a leading UTF-8 byte-order mark (it would rename the first id)."""
    if not path.is_file():
        raise DataError([Problem(str(path), None, "file not found")])
    return path.read_bytes().removeprefix(b"\xef\xbb\xbf")


def _as_id(value: Any) -> str | None:
    """Ids are strings in R2MED; integers are accepted and converted, anything else is an error."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (str, int)):
        return str(value)
    return None


def _read_texts(
    path: Path, id_field: str, text_fields: tuple[str, ...], digest: Any = None
) -> tuple[dict[str, str], dict[str, dict]]:
    """Read ``{id, text…}`` rows: ids unique, text a string; other fields kept as metadata."""
    texts: dict[str, str] = {}
    meta: dict[str, dict] = {}
    problems: list[Problem] = []
    first_line: dict[str, int] = {}
    for number, obj in _read_jsonl(path, problems, digest):
        raw_id = obj.get(id_field)
        item_id = _as_id(raw_id)
        if raw_id is None:
            problems.append(Problem(str(path), number, f'missing field "{id_field}"'))
            continue
        if item_id is None:
            problems.append(Problem(str(path), number, f'"{id_field}" must be a non-empty string'))
            continue
        wrong_id = _id_problem(id_field, item_id)
        if wrong_id:
            problems.append(Problem(str(path), number, wrong_id))
            continue
        required = text_fields[-1]
        if required not in obj:
            problems.append(Problem(str(path), number, f'missing field "{required}"'))
            continue
        values = [obj.get(name) for name in text_fields]
        wrong = [n for n, v in zip(text_fields, values) if v is not None and not isinstance(v, str)]
        if wrong:
            problems.append(Problem(str(path), number, f'"{wrong[0]}" must be a string'))
            continue
        if item_id in texts:
            problems.append(
                Problem(str(path), number, f"duplicate id {item_id!r} (first seen on line {first_line[item_id]})")
            )
            continue
        texts[item_id] = "\n".join(v for v in values if v and v.strip())
        first_line[item_id] = number
        extra = {k: v for k, v in obj.items() if k not in (id_field, *text_fields)}
        if extra:
            meta[item_id] = extra
    if problems:
        raise DataError(problems)
    return texts, meta


# --------------------------------------------------------------------------- corpora read on demand

#: Bump when reading a corpus file would yield other documents or reject others: what an older reader
#: remembered about a file (``file_facts``) is then not used.
CORPUS_READER_VERSION = 1


def corpus_fingerprint(items: Iterable[tuple[str, str]]) -> str:
    """A digest of document ids and texts: the key of every index built on this corpus."""
    digest = hashlib.sha256()
    for doc_id, text in items:
        digest.update(doc_id.encode("utf-8") + b"\x00" + text.encode("utf-8") + b"\x01")
    return digest.hexdigest()[:20]


class FileCorpus(Mapping[str, str]):
    """A corpus file's documents, in file order, read from the file only when a text or id is needed.

    A warm start needs only what a full read remembered (``file_facts``): the fingerprint that keys
    every index and run, the number of documents, which judged documents are absent. The texts are
    read on first use (the explorer's previews, indexing, the Overview's statistics) and must still be
    the ones remembered: a file changed since is a DataError asking to load the dataset again.
    """

    def __init__(
        self,
        path: Path,
        fields: tuple[str, tuple[str, ...]],
        read: file_facts.Remembered,
        texts: dict[str, str] | None = None,
    ) -> None:
        self.path, self.fields, self._read = path, fields, read
        self._texts = texts
        self._lock = threading.Lock()

    @property
    def fingerprint(self) -> str:
        return str(self._read.facts["fingerprint"])

    @property
    def loaded(self) -> bool:
        """Whether the texts are in memory (a warm start has not read them)."""
        return self._texts is not None

    def texts(self) -> dict[str, str]:
        """Every document, read from the file on first use."""
        with self._lock:
            if self._texts is None:
                texts, _ = _read_texts(self.path, *self.fields)
                if corpus_fingerprint(texts.items()) != self.fingerprint:
                    message = "the file changed since the dataset was loaded: load the dataset again"
                    raise DataError([Problem(str(self.path), None, message)])
                self._texts = texts
            return self._texts

    def __getitem__(self, doc_id: str) -> str:
        return self.texts()[doc_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.texts())

    def __len__(self) -> int:
        return int(self._read.facts["documents"])

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.texts()

    def keys(self) -> KeysView[str]:  # the dict's own views: no lookup per document
        return self.texts().keys()

    def values(self) -> ValuesView[str]:
        return self.texts().values()

    def items(self) -> ItemsView[str, str]:
        return self.texts().items()

    def get(self, doc_id: str, default: Any = None) -> Any:
        return self.texts().get(doc_id, default)

    def absent(self, ids: Iterable[str]) -> set[str]:
        """Which of ``ids`` name no document. Remembered for the last set of ids asked about (a task's
        judged documents), so a warm start counts the judged documents the corpus lacks without it."""
        wanted = sorted(set(ids))
        key = hashlib.sha256("\x00".join(wanted).encode("utf-8")).hexdigest()
        known = self._read.facts.get("absent")
        if isinstance(known, dict) and known.get("ids") == key and isinstance(known.get("absent"), list):
            return {str(doc_id) for doc_id in known["absent"]}
        texts = self.texts()
        found = {doc_id for doc_id in wanted if doc_id not in texts}
        facts = {**self._read.facts, "absent": {"ids": key, "absent": sorted(found)}}
        self._read = replace(self._read, facts=facts)
        if self._read.identity:
            file_facts.remember(self.path, _corpus_reader(self.fields), self._read)
        return found

    def __getstate__(self) -> dict[str, Any]:
        return {name: value for name, value in self.__dict__.items() if name != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def _corpus_reader(fields: tuple[str, tuple[str, ...]]) -> str:
    return f"corpus-v{CORPUS_READER_VERSION}:{fields[0]}:{','.join(fields[1])}"


def _usable_facts(facts: dict[str, Any]) -> bool:
    return (
        isinstance(facts.get("fingerprint"), str)
        and type(facts.get("documents")) is int
        and facts["documents"] >= 0
    )


def _read_corpus(path: Path, id_field: str, text_fields: tuple[str, ...]) -> FileCorpus:
    """The corpus of a file: from what a full read of these very bytes remembered when there is such a
    read (nothing is read now), else read in full (validated; its facts are remembered for next time)."""
    fields = (id_field, text_fields)
    reader = _corpus_reader(fields)
    remembered = file_facts.recall(path, reader)
    if remembered is not None and _usable_facts(remembered.facts):
        return FileCorpus(path, fields, remembered)
    seen, started = file_facts.identity(path), time.time_ns()
    digest = hashlib.sha256()
    texts, _ = _read_texts(path, id_field, text_fields, digest)
    facts = {"fingerprint": corpus_fingerprint(texts.items()), "documents": len(texts)}
    if seen is None or file_facts.identity(path) != seen:  # changed while it was read: remember nothing
        seen = []
    read = file_facts.Remembered(seen, digest.hexdigest(), started, facts)
    if seen:
        file_facts.remember(path, reader, read)
    return FileCorpus(path, fields, read, texts)


def _absent(corpus: Mapping[str, str], ids: Iterable[str]) -> set[str]:
    """Which of ``ids`` name no document of the corpus (without reading a remembered corpus file)."""
    if isinstance(corpus, FileCorpus):
        return corpus.absent(ids)
    return {doc_id for doc_id in ids if doc_id not in corpus}


class _QrelsRows:
    """What a qrels reader keeps of a file: each line's (line, query, document, grade), or what is wrong
    with it, named with file and line; ``add`` applies the one grade rule (``_checked_grade``)."""

    def __init__(self, path: Path, must: str) -> None:
        self.path, self.must = path, must
        self.rows: list[tuple[int, str, str, int]] = []
        self.problems: list[Problem] = []

    def wrong(self, number: int | None, problem: str) -> None:
        self.problems.append(Problem(str(self.path), number, problem))

    def add(self, number: int, qid: str, did: str, value: Any) -> None:
        grade = _checked_grade(value, self.must)
        if isinstance(grade, str):
            self.wrong(number, grade)
        else:
            self.rows.append((number, qid, did, grade))

    def read(self) -> list[tuple[int, str, str, int]]:
        """The rows, or ``DataError`` with every problem found."""
        if self.problems:
            raise DataError(self.problems)
        return self.rows


def _read_qrels_jsonl(path: Path) -> list[tuple[int, str, str, int]]:
    rows = _QrelsRows(path, '"score" must be an integer grade')
    for number, obj in _read_jsonl(path, rows.problems):
        missing = [name for name in ("q_id", "p_id", "score") if name not in obj]
        if missing:
            rows.wrong(number, "missing field(s) " + ", ".join(f'"{m}"' for m in missing))
            continue
        qid, did = _as_id(obj["q_id"]), _as_id(obj["p_id"])
        if qid is None or did is None:
            rows.wrong(number, '"q_id" and "p_id" must be strings')
            continue
        wrong_id = _id_problem("q_id", qid) or _id_problem("p_id", did)
        if wrong_id:
            rows.wrong(number, wrong_id)
            continue
        rows.add(number, qid, did, obj["score"])
    return rows.read()


def _as_grade(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _read_qrels_trec(path: Path) -> list[tuple[int, str, str, int]]:
    """TREC qrels (``qid 0 docid rel``), three-column (``qid docid rel``) or BEIR tsv with header."""
    rows = _QrelsRows(path, "relevance must be an integer")
    for number, line in _lines(path):
        try:
            text = line.decode("utf-8").strip()
        except UnicodeDecodeError as err:
            rows.wrong(number, f"not UTF-8 text (byte {err.start})")
            continue
        if not text:
            continue
        fields = text.split()
        if len(fields) == 4:
            qid, _, did, rel = fields
        elif len(fields) == 3:
            qid, did, rel = fields
        else:
            rows.wrong(number, f"expected 3 or 4 columns, found {len(fields)}")
            continue
        if number == 1 and _as_grade(rel) is None:  # a header such as "query-id corpus-id score"
            continue
        rows.add(number, qid, did, rel)
    if not rows.rows and not rows.problems:
        rows.wrong(None, "file is empty")
    return rows.read()


def _read_r2med_qrels(root: Path) -> tuple[Path, list[tuple[int, str, str, int]]]:
    """The folder's qrels file and rows. Every qrels file present is read: which one is used would
    decide every number, so files that disagree are an error naming both (files that agree are fine)."""
    paths = [root / name for name in QRELS_FILES if (root / name).is_file()] or [root / QRELS_FILES[0]]
    read: list[tuple[Path, list[tuple[int, str, str, int]]]] = []
    problems: list[Problem] = []
    for path in paths:
        try:
            read.append((path, _read_qrels_jsonl(path) if path.suffix == ".jsonl" else _read_qrels_trec(path)))
        except DataError as err:
            problems += err.problems
    if problems:
        raise DataError(problems)
    for path, rows in read[1:]:
        problem = _qrels_disagreement(*read[0], path, rows)
        if problem is not None:
            raise DataError([problem])
    return read[0]


def _qrels_disagreement(
    used: Path, used_rows: list[tuple[int, str, str, int]], other: Path, other_rows: list[tuple[int, str, str, int]]
) -> Problem | None:
    """Where ``other`` grades a (query, document) pair unlike ``used`` (the last line wins in each, as in
    the benchmark), at the first such line of ``other``; None when they agree."""
    grades, lines = _graded(used_rows)
    other_grades, other_lines = _graded(other_rows)
    differ = [pair for pair in grades.keys() | other_grades.keys() if grades.get(pair) != other_grades.get(pair)]
    if not differ:
        return None
    qid, did = first = min(differ, key=lambda pair: (other_lines.get(pair, 1 << 62), lines.get(pair, 0)))
    there = f"{used}:{lines[first]}" if first in lines else str(used)
    message = (
        f"disagrees with {there} on {len(differ)} (query, document) pair(s), first query {qid!r}, document "
        f"{did!r}: {_grade_text(other_grades.get(first))} here, {_grade_text(grades.get(first))} there; "
        f"keep one qrels file ({used.name} is read first)"
    )
    return Problem(str(other), other_lines.get(first), message)


def _graded(rows: list[tuple[int, str, str, int]]) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """Each (query, document) pair's grade and line; the last line wins, as in the benchmark."""
    return {(qid, did): grade for _, qid, did, grade in rows}, {(qid, did): number for number, qid, did, _ in rows}


def _grade_text(grade: int | None) -> str:
    return "absent" if grade is None else f"grade {grade}"


def _build_qrels(
    rows: list[tuple[int, str, str, int]], path: Path, queries: dict[str, str], absent: set[str]
) -> tuple[dict[str, dict[str, int]], int, int, int]:
    """The qrels exactly as pytrec_eval gets them in the benchmark: last line wins, unknown documents
    (``absent`` from the corpus) kept.

    Returns ``(qrels, unknown query lines, unknown document lines, duplicate lines)``.
    """
    qrels: dict[str, dict[str, int]] = {}
    unknown_q = unknown_d = duplicates = 0
    seen: set[tuple[str, str]] = set()
    for _number, qid, did, grade in rows:
        if (qid, did) in seen:
            duplicates += 1
        seen.add((qid, did))
        if qid not in queries:
            unknown_q += 1
            continue
        if did in absent:
            unknown_d += 1
        qrels.setdefault(qid, {})[did] = grade
    return qrels, unknown_q, unknown_d, duplicates


def _read_rewrites(
    root: Path, queries: dict[str, str]
) -> tuple[dict[tuple[str, str], dict[str, str]], list[str], dict[tuple[str, str], dict[str, str]]]:
    """Find ``<method>/<llm>/query_with_hydoc.jsonl`` files: ``(hy_docs, warnings, query texts)``.

    Rows naming unknown queries are ignored with a warning. A row's ``text`` is kept: the benchmark
    retrieves with it (and only for the queries the file holds).
    """
    rewrites: dict[tuple[str, str], dict[str, str]] = {}
    rewrite_queries: dict[tuple[str, str], dict[str, str]] = {}
    warnings: list[str] = []
    for method in REWRITE_METHODS:
        method_dir = root / method
        if not method_dir.is_dir():
            continue
        for llm_dir in sorted(p for p in method_dir.iterdir() if p.is_dir()):
            path = llm_dir / REWRITE_FILE
            if not path.is_file():
                continue
            texts, meta = _read_texts(path, "id", ("hy_doc",))
            known = {qid: text for qid, text in texts.items() if qid in queries}
            if len(known) < len(texts):
                warnings.append(f"{path}: {len(texts) - len(known)} rows name unknown queries (ignored)")
            rewrites[method, llm_dir.name] = known
            rewrite_queries[method, llm_dir.name] = {
                qid: text if isinstance(text := meta.get(qid, {}).get("text"), str) else queries[qid] for qid in known
            }
    return rewrites, warnings, rewrite_queries


def _read_rewrite_provenance(
    root: Path, rewrites: Mapping[tuple[str, str], object], warnings: list[str]
) -> dict[tuple[str, str], dict[str, Any]]:
    """Each rewrite set's ``provenance.json``, where it has one; an unreadable one is a warning (the set
    is then of unknown origin), never a reason to refuse the dataset."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for method, llm in rewrites:
        path = root / method / llm / PROVENANCE_FILE
        if not path.is_file():
            continue
        try:
            meta = _parse_json(_read_bytes(path))
        except (OSError, ValueError) as err:
            warnings.append(f"{path}: unreadable provenance ({err}); the rewrite's origin is unknown")
            continue
        if isinstance(meta, dict):
            found[method, llm] = meta
    return found


def _assemble(
    name: str,
    source: str,
    corpus: Mapping[str, str],
    queries: dict[str, str],
    query_meta: dict[str, dict],
    qrels_rows: list[tuple[int, str, str, int]],
    qrels_path: Path,
    rewrites: dict[tuple[str, str], dict[str, str]],
    warnings: list[str],
    family: Family | None,
    meta: dict[str, Any],
    rewrite_queries: dict[tuple[str, str], dict[str, str]] | None = None,
    rewrite_provenance: dict[tuple[str, str], dict[str, Any]] | None = None,
) -> Dataset:
    absent = _absent(corpus, {did for _, _, did, _ in qrels_rows})
    qrels, unknown_q, unknown_d, duplicates = _build_qrels(qrels_rows, qrels_path, queries, absent)
    report = LoadReport(
        unknown_qrels_queries=unknown_q,
        unknown_qrels_documents=unknown_d,
        queries_without_qrels=tuple(q for q in queries if not qrels.get(q)),
        warnings=tuple(warnings),
        duplicate_qrels=duplicates,
        queries_without_positives=tuple(q for q in queries if qrels.get(q) and max(qrels[q].values()) <= 0),
        queries_only_unknown_documents=tuple(
            q for q in queries if qrels.get(q) and all(d in absent for d in qrels[q])
        ),
    )
    return Dataset(
        name=name,
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        source=source,
        family=family,
        query_meta=query_meta,
        rewrites=rewrites,
        meta=meta,
        report=report,
        rewrite_queries=rewrite_queries or {},
        rewrite_provenance=rewrite_provenance or {},
    )


def _family_for(name: str, meta: dict[str, Any]) -> Family | None:
    """The task's family: known for R2MED tasks, else from metadata.json ("clinical-case", …)."""
    if name in TASKS:
        return TASKS[name].family
    wanted = re.sub(r"[^a-z]", "", str(meta.get("family", "")).lower())
    if not wanted:
        return None
    for family in Family:
        if re.sub(r"[^a-z]", "", family.value.lower()).startswith(wanted):
            return family
    return None


# --------------------------------------------------------------------------- public loaders


def load_r2med_dir(path: str | Path, name: str | None = None, source: str | None = None) -> Dataset:
    """Load a folder in the R2MED layout (corpus.jsonl, query.jsonl, qrels.jsonl|txt|tsv, rewrites)."""
    root = Path(path)
    if not root.is_dir():
        raise DataError([Problem(str(root), None, "folder not found")])
    name = name or root.name
    problems: list[Problem] = []
    corpus: Mapping[str, str] = {}
    queries: dict[str, str] = {}
    query_meta: dict[str, dict] = {}
    try:
        corpus = _read_corpus(root / "corpus.jsonl", "id", ("text",))
    except DataError as err:
        problems += err.problems
    try:
        queries, query_meta = _read_texts(root / "query.jsonl", "id", ("text",))
    except DataError as err:
        problems += err.problems
    qrels_path = root / QRELS_FILES[0]
    rows: list[tuple[int, str, str, int]] = []
    try:
        qrels_path, rows = _read_r2med_qrels(root)
    except DataError as err:
        problems += err.problems
    if problems:
        raise DataError(problems)
    rewrites, warnings, rewrite_queries = _read_rewrites(root, queries)
    provenance = _read_rewrite_provenance(root, rewrites, warnings)
    meta = _read_metadata(root)
    return _assemble(
        name,
        source or f"local:{root}",
        corpus,
        queries,
        query_meta,
        rows,
        qrels_path,
        rewrites,
        warnings,
        _family_for(name, meta),
        meta,
        rewrite_queries,
        provenance,
    )


def load_beir_dir(path: str | Path, name: str | None = None, split: str = "test") -> Dataset:
    """Load a BEIR-layout folder: corpus.jsonl (_id/title/text), queries.jsonl, qrels/<split>.tsv."""
    root = Path(path)
    if not root.is_dir():
        raise DataError([Problem(str(root), None, "folder not found")])
    problems: list[Problem] = []
    corpus: Mapping[str, str] = {}
    queries: dict[str, str] = {}
    query_meta: dict[str, dict] = {}
    try:
        corpus = _read_corpus(root / "corpus.jsonl", "_id", ("title", "text"))
    except DataError as err:
        problems += err.problems
    try:
        queries, query_meta = _read_texts(root / "queries.jsonl", "_id", ("text",))
    except DataError as err:
        problems += err.problems
    qrels_path = root / "qrels" / f"{split}.tsv"
    rows: list[tuple[int, str, str, int]] = []
    try:
        rows = _read_qrels_trec(qrels_path)
    except DataError as err:
        problems += err.problems
    if problems:
        raise DataError(problems)
    meta = _read_metadata(root)
    name = name or root.name
    return _assemble(
        name, f"beir:{root}", corpus, queries, query_meta, rows, qrels_path, {}, [], _family_for(name, meta), meta
    )


def load_dir(path: str | Path, name: str | None = None) -> Dataset:
    """Load a local folder, detecting the R2MED or BEIR layout."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise DataError([Problem(str(root), None, "folder not found")])
    if (root / "query.jsonl").is_file():
        return load_r2med_dir(root, name)
    if (root / "queries.jsonl").is_file():
        return load_beir_dir(root, name)
    raise DataError(
        [
            Problem(
                str(root),
                None,
                "neither query.jsonl (R2MED layout) nor queries.jsonl with qrels/test.tsv (BEIR layout) found",
            )
        ]
    )


def demo_path(task: str) -> Path:
    """Where an embedded demo task lives inside the installed package."""
    if task not in DEMO_TASKS:
        raise KeyError(f"unknown demo task {task!r}; choose one of: {', '.join(DEMO_TASKS)}")
    return Path(str(resources.files("r2med_core") / "demo" / task))


def load_demo(task: str = DEMO_TASKS[0]) -> Dataset:
    """Load one of the embedded demo tasks (illustrative data written for this app)."""
    return load_r2med_dir(demo_path(task), name=task, source=f"demo:{task}")


def validate_dir(path: str | Path) -> tuple[list[Problem], list[str]]:
    """Check a folder without raising: ``(errors, warnings)``; no errors means it loads cleanly."""
    try:
        dataset = load_dir(path)
    except DataError as err:
        return err.problems, []
    return [], dataset.report.lines()


def _read_metadata(root: Path) -> dict[str, Any]:
    path = root / "metadata.json"
    if not path.is_file():
        return {}
    try:
        meta = _parse_json(_read_bytes(path))
    except ValueError as err:
        raise DataError([Problem(str(path), None, f"bad metadata: {err}")]) from None
    return meta if isinstance(meta, dict) else {}
