"""Pooling and holes: which top-ranked documents nobody judged, and what judging them changes.

R2MED's judgements come from its construction, not from pooling the systems evaluated here, so a new
system's top 10 can rest on *holes* (documents without any judgement) that the metrics count as not
relevant. As in TREC, ``pool`` takes the union of the top ``depth`` of chosen systems and keeps the
unjudged documents, remembering which systems retrieved each. ``JudgingQueue`` holds the pools sent for
judging; annotators grade them blind (query and document only), and their grades count as ``team``
says. ``compare_with_team`` then shows each system's metric and rank without and with the team's
judgements (``team.team_qrels``) next to Judged@k (ir_measures), so a user sees which scores rest on holes.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import ir_measures
import pandas as pd

from .annotations import Annotation, Qrels, default_store_path, utc_now
from .cache import atomic_write_text
from .data import DataError, Problem
from .evaluation import evaluate
from .runs import Run

#: The pool depth TREC-style pooling uses most, and the cutoff Judged@k is shown at.
DEFAULT_DEPTH = 10
QUEUE_FILE = "judging_queue.json"
QUEUE_VERSION = 1
#: What a damaged queue file kept aside is named after: ``judging_queue.json.damaged-<UTC time>``.
DAMAGED = ".damaged-"
#: Skipped entries reported one by one; the rest are counted.
_MAX_PROBLEMS = 20


# --------------------------------------------------------------------------- pooling


@dataclass(frozen=True)
class PooledDoc:
    """One unjudged document of a query's pool, with the systems that ranked it within the depth."""

    query_id: str
    doc_id: str
    systems: tuple[str, ...]


@dataclass(frozen=True)
class Pool:
    """The unjudged documents of the top ``depth`` of ``systems``, per judged query.

    ``docs[query_id]`` lists each document once, in the order of its best rank in any system (ties in
    the order the systems were given), with every system that contributed it.
    """

    depth: int
    systems: tuple[str, ...]
    docs: dict[str, tuple[PooledDoc, ...]]

    def __len__(self) -> int:
        return sum(len(docs) for docs in self.docs.values())

    def items(self) -> list[PooledDoc]:
        """Every pooled (query, document), query by query."""
        return [doc for docs in self.docs.values() for doc in docs]

    def contributed(self) -> dict[str, int]:
        """Pooled documents per system (a document retrieved by two systems counts for both)."""
        counts = dict.fromkeys(self.systems, 0)
        for doc in self.items():
            for system in doc.systems:
                counts[system] += 1
        return counts

    def unique(self) -> dict[str, int]:
        """Pooled documents only this system retrieved within the depth."""
        counts = dict.fromkeys(self.systems, 0)
        for doc in self.items():
            if len(doc.systems) == 1:
                counts[doc.systems[0]] += 1
        return counts


def pool(runs: Mapping[str, Run], qrels: Mapping[str, Mapping[str, int]], depth: int = DEFAULT_DEPTH) -> Pool:
    """Pool the top ``depth`` of each run (keyed by system name) and keep the documents ``qrels`` does not
    judge at all (any grade, 0 included, counts as judged). Only judged queries are pooled: the others
    are never evaluated. Pass the team's qrels (``team``) so documents the team judged are not pooled again."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"pool depth must be a positive integer, got {depth!r}")
    systems = tuple(runs)
    docs: dict[str, tuple[PooledDoc, ...]] = {}
    for query_id in sorted(qid for qid, grades in qrels.items() if grades):
        judged = qrels[query_id]
        found: dict[str, tuple[int, list[str]]] = {}  # doc -> (best rank, contributing systems)
        for system in systems:
            for rank, (doc_id, _) in enumerate(runs[system].top(query_id, depth), start=1):
                if doc_id in judged:
                    continue
                best, contributors = found.setdefault(doc_id, (rank, []))
                if system not in contributors:
                    contributors.append(system)
                found[doc_id] = (min(best, rank), contributors)
        ordered = sorted(found.items(), key=lambda item: item[1][0])  # stable: first system wins ties
        if ordered:
            docs[query_id] = tuple(PooledDoc(query_id, doc, tuple(c)) for doc, (_, c) in ordered)
    return Pool(depth=depth, systems=systems, docs=docs)


POOL_CSV_HEADER = ("query_id", "doc_id", "systems")


def pool_csv(pooled: Pool) -> str:
    """The pool as CSV, one (query, document) per row in the pool's order; ``systems`` lists the systems
    that ranked the document within the depth, space-separated."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(POOL_CSV_HEADER)
    for doc in pooled.items():
        writer.writerow([doc.query_id, doc.doc_id, " ".join(doc.systems)])
    return buffer.getvalue()


def pool_text(pooled: Pool) -> str:
    """The pool TREC-like: ``qid 0 docid`` per line, the qrels columns without the grade a judge adds.
    Ids a TREC line cannot hold (empty, or with whitespace) raise DataError: the file would not read back."""
    bad = [d for d in pooled.items() if not all(i and not any(c.isspace() for c in i) for i in (d.query_id, d.doc_id))]
    if bad:
        raise DataError(
            [Problem("pool", None, f"query {d.query_id!r}, document {d.doc_id!r}: an id a TREC line cannot hold")
             for d in bad[:20]]
        )
    return "".join(f"{d.query_id} 0 {d.doc_id}\n" for d in pooled.items())


# --------------------------------------------------------------------------- holes and metrics


def judged_at_k(
    run: Run, qrels: Mapping[str, Mapping[str, int]], k: int = DEFAULT_DEPTH
) -> tuple[float, dict[str, float]]:
    """ir_measures' Judged@k: the share of a run's top k that has a judgement, mean and per query, over
    the queries both the run and ``qrels`` hold (as the metrics are averaged)."""
    measure = ir_measures.Judged @ k
    judged_qrels = {qid: dict(grades) for qid, grades in qrels.items() if grades}
    scores = {qid: ranking for qid, ranking in run.truncated(k).as_score_dict().items() if ranking}
    if not judged_qrels or not scores:
        return 0.0, {}
    per_query = {m.query_id: float(m.value) for m in ir_measures.iter_calc([measure], judged_qrels, scores)}
    mean = sum(per_query.values()) / len(per_query) if per_query else 0.0
    return mean, per_query


def compare_with_team(
    runs: Mapping[str, Run],
    qrels: Qrels,
    team: Qrels,
    *,
    metric: str = "ndcg_at_10",
    k: int = DEFAULT_DEPTH,
    dataset_name: str = "",
) -> pd.DataFrame:
    """Each system's ``metric`` and rank without and with the team's judgements, and Judged@k both ways.

    Metrics come from ``evaluation.evaluate`` (pytrec_eval) against the original ``qrels`` and the team's
    (``team.team_qrels``: grade-0 judgements count as judged for Judged@k and change no metric); rank 1
    is the best, tied systems share the best rank. ``rank_change`` > 0 means the system moved up.
    """
    rows = []
    for name, run in runs.items():
        without = evaluate(run, qrels, dataset_name=dataset_name).means[metric]
        with_ = evaluate(run, team, dataset_name=dataset_name).means[metric]
        rows.append(
            {
                "system": name,
                "without": without,
                "with": with_,
                "change": with_ - without,
                "judged_without": judged_at_k(run, qrels, k)[0],
                "judged_with": judged_at_k(run, team, k)[0],
            }
        )
    frame = pd.DataFrame(rows, columns=["system", "without", "with", "change", "judged_without", "judged_with"])
    frame.insert(3, "rank_without", frame["without"].rank(ascending=False, method="min").astype(int))
    frame.insert(4, "rank_with", frame["with"].rank(ascending=False, method="min").astype(int))
    frame.insert(5, "rank_change", frame["rank_without"] - frame["rank_with"])
    return frame


# --------------------------------------------------------------------------- the judging queue


@dataclass(frozen=True)
class QueueEntry:
    """One (query, document) sent for blind judging: from which pool and by whom."""

    query_id: str
    doc_id: str
    systems: tuple[str, ...]
    depth: int
    sent_by: str
    sent_at: str


def default_queue_path() -> Path:
    """``judging_queue.json`` next to the default SQLite annotation store (``$R2MED_DATA_HOME``)."""
    return default_store_path().parent / QUEUE_FILE


class JudgingQueue:
    """The pools sent for judging, per dataset and task, in one JSON file (atomic writes, a lock file so
    two senders never lose each other's entries). The labels themselves live in the annotation store:
    what is left to judge is worked out from them (``pending``), so the queue is only written on a send.

    A damaged file never stops judging and is never overwritten: a bad entry is skipped and a file that
    cannot be read at all is an empty queue, each reported by ``problems``; the next send or restore first
    keeps the file aside as ``<name>.damaged-<UTC time>``, then writes the entries it could read and the
    new ones. Temporary files a killed writer left behind are removed by the next writer.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_queue_path()

    def items(self, dataset: str, task: str) -> list[QueueEntry]:
        """Every readable entry sent for this task, in the order sent."""
        return self._read().tasks.get(_key(dataset, task), [])

    def problems(self) -> list[Problem]:
        """What is wrong with the file (entries skipped, or the whole file unreadable) and the damaged files
        kept aside so far, each named by its file name (never a server path)."""
        kept = sorted(self.path.parent.glob(f"{glob.escape(self.path.name)}{DAMAGED}*"))
        return self._read().problems + [
            Problem(copy.name, None, "a damaged judging queue kept aside; the entries that could be read are in "
                    f"{self.path.name}, all of it is here (delete it once looked at)")
            for copy in kept
        ]

    def send(self, dataset: str, task: str, pooled: Pool, sent_by: str) -> int:
        """Add the pool's documents to the task's queue; ones already queued are kept as they were.
        Returns how many were new."""
        if not isinstance(sent_by, str) or not sent_by.strip():
            raise ValueError("sending a pool for judging needs the sender's name")
        now = utc_now()
        return self.merge(
            (dataset, task, QueueEntry(doc.query_id, doc.doc_id, doc.systems, pooled.depth, sent_by.strip(), now))
            for doc in pooled.items()
        )

    def every_task(self) -> list[tuple[str, str, QueueEntry]]:
        """Every readable entry of every task as (dataset, task, entry), tasks in the order first sent: a
        backup's view of the whole queue."""
        out = []
        for key, entries in self._read().tasks.items():
            dataset, _, task = key.partition("\t")
            out += [(dataset, task, entry) for entry in entries]
        return out

    def merge(self, entries: Iterable[tuple[str, str, QueueEntry]]) -> int:
        """Add entries (a send's, or restored from a backup with who sent them and when); a (query, document)
        already queued for its task is kept as it was. Returns how many were new."""
        with self._locked():
            found = self._read()
            tasks = found.tasks
            added = 0
            seen: dict[str, set[tuple[str, str]]] = {}
            for dataset, task, entry in entries:
                key = _key(dataset, task)
                queued = tasks.setdefault(key, [])
                pairs = seen.setdefault(key, {(e.query_id, e.doc_id) for e in queued})
                if (entry.query_id, entry.doc_id) in pairs:
                    continue
                queued.append(entry)
                pairs.add((entry.query_id, entry.doc_id))
                added += 1
            if added:
                if found.problems:
                    self._keep_aside()
                data = {key: [_json_entry(e) for e in queued] for key, queued in tasks.items()}
                atomic_write_text(self.path, json.dumps({"version": QUEUE_VERSION, "tasks": data}, indent=1))
        return added

    def pending(self, dataset: str, task: str, labels: Iterable[Annotation], annotator: str) -> list[QueueEntry]:
        """The entries ``annotator`` has not labelled yet (any label on the (query, document) counts;
        names compare case-insensitively)."""
        mine = annotator.strip().lower()
        done = {
            (a.query_id, a.doc_id)
            for a in labels
            if a.dataset == dataset and a.task == task and a.doc_id is not None and a.annotator.strip().lower() == mine
        }
        return [e for e in self.items(dataset, task) if (e.query_id, e.doc_id) not in done]

    def _read(self) -> _Contents:
        """The file's readable entries per task and what was wrong with the rest; never raises."""
        name = self.path.name
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return _Contents({}, [])
        except OSError as err:
            return _unreadable(name, None, f"cannot be read ({err.strerror or err})")
        try:
            data = json.loads(raw.decode("utf-8"), parse_int=_json_int)
        except UnicodeDecodeError as err:
            return _unreadable(name, raw[: err.start].count(b"\n") + 1, "not UTF-8 text")
        except json.JSONDecodeError as err:
            return _unreadable(name, err.lineno, f"not JSON ({err.msg})")
        except RecursionError:
            return _unreadable(name, None, "nested too deeply to read")
        found = data.get("tasks") if isinstance(data, dict) and data.get("version") == QUEUE_VERSION else None
        if not isinstance(found, dict):
            return _unreadable(name, None, f"not a version-{QUEUE_VERSION} judging queue")
        tasks: dict[str, list[QueueEntry]] = {}
        problems: list[Problem] = []
        for key, entries in found.items():
            dataset, tab, task = key.partition("\t")
            if not tab or not isinstance(entries, list):
                problems.append(Problem(name, None, f"{key[:80]!r}: not a task's list of entries; skipped"))
                continue
            for number, obj in enumerate(entries, start=1):
                try:
                    tasks.setdefault(key, []).append(queue_entry(obj))
                except ValueError as err:
                    where = f"task {dataset[:60]}/{task[:60]}, entry {number}"
                    problems.append(Problem(name, None, f"{where}: {err}; skipped"))
        if len(problems) > _MAX_PROBLEMS:
            problems[_MAX_PROBLEMS:] = [Problem(name, None, f"… and {len(problems) - _MAX_PROBLEMS} more skipped")]
        return _Contents(tasks, problems + _kept_note(name) if problems else [])

    def _keep_aside(self) -> None:
        """Copy the damaged file to ``<name>.damaged-<UTC time>`` before it is rewritten (under the lock); an
        existing copy of that name is never replaced (OSError: then nothing is written)."""
        aside = self.path.with_name(f"{self.path.name}{DAMAGED}{datetime.now(UTC):%Y%m%dT%H%M%SZ}")
        with self.path.open("rb") as source, aside.open("xb") as copy:
            shutil.copyfileobj(source, copy)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold an exclusive lock (POSIX ``flock``; elsewhere none) while reading and rewriting the file. With
        the lock held no writer is half-way, so any temporary file of an atomic write is a killed writer's."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(f"{self.path}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            try:
                import fcntl
            except ImportError:  # pragma: no cover - Windows
                yield
                return
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                for stale in self.path.parent.glob(f".{glob.escape(self.path.name)}.*.tmp"):
                    stale.unlink(missing_ok=True)
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class _Contents:
    """What a read of the queue file found: the readable entries per task key, and the problems."""

    tasks: dict[str, list[QueueEntry]]
    problems: list[Problem]


def _unreadable(name: str, line: int | None, why: str) -> _Contents:
    return _Contents({}, [Problem(name, line, f"{why}: read as an empty queue"), *_kept_note(name)])


def _kept_note(name: str) -> list[Problem]:
    return [Problem(name, None, f"left as it is until the queue is next written (a send or a restore), which first "
                    f"keeps it as {name}{DAMAGED}<UTC time>")]


def _json_int(text: str) -> int | str:
    """json's ``parse_int``: an integer too long for any depth or version stays text, so its entry is
    refused instead of ``int()`` refusing the whole file (Python reads at most 4300 digits)."""
    return int(text) if len(text) <= 20 else text


def _json_entry(entry: QueueEntry) -> dict[str, object]:
    return {**asdict(entry), "systems": list(entry.systems)}


def _key(dataset: str, task: str) -> str:
    return f"{dataset}\t{task}"


def queue_entry(obj: object) -> QueueEntry:
    """A queue entry from its JSON object; ValueError saying what is wrong (wrong types are refused, never
    converted)."""
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    for key in ("query_id", "doc_id"):
        if not isinstance(obj.get(key), str) or not obj[key].strip():
            raise ValueError(f'"{key}" must be a non-empty string')
    systems, depth = obj.get("systems", []), obj.get("depth", 0)
    if not isinstance(systems, list) or not all(isinstance(s, str) for s in systems):
        raise ValueError('"systems" must be a list of system names')
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError('"depth" must be a whole number of 0 or more')
    sent_by, sent_at = obj.get("sent_by", ""), obj.get("sent_at", "")
    if not isinstance(sent_by, str) or not isinstance(sent_at, str):
        raise ValueError('"sent_by" and "sent_at" must be strings')
    return QueueEntry(obj["query_id"], obj["doc_id"], tuple(systems), depth, sent_by, sent_at)
