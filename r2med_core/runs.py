"""Runs: what a retrieval system returned, and the TREC run-file format to exchange them.

A ``Run`` is ``{query id: [(doc id, score), …]}`` ranked best first. TREC files let runs made
elsewhere (say, a 7B retriever on a GPU cluster) be imported and explored like local ones.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from r2med_core.cache import atomic_write_text
from r2med_core.data import DataError, Problem

Ranking = list[tuple[str, float]]


@dataclass(frozen=True, eq=False)
class Run:
    """A named ranking per query, best first."""

    name: str
    rankings: dict[str, Ranking] = field(default_factory=dict)
    seconds: float = 0.0  # how long retrieval took, for the results file's evaluation_time
    #: Tokens API LLMs spent making it (rewriting, reranking), one ``{"model", "use", "prompt",
    #: "completion"}`` per LLM use; cached replies count what they cost when they were made.
    usage: tuple[dict[str, Any], ...] = ()

    def __len__(self) -> int:
        return len(self.rankings)

    def top(self, query_id: str, k: int | None = None) -> Ranking:
        ranking = self.rankings.get(query_id, [])
        return ranking if k is None else ranking[:k]

    @cached_property
    def _ranks(self) -> dict[str, dict[str, int]]:
        return {qid: {doc: i for i, (doc, _) in enumerate(r, start=1)} for qid, r in self.rankings.items()}

    def rank_of(self, query_id: str, doc_id: str) -> int | None:
        """1-based rank of a document for a query, or None when it was not retrieved."""
        return self._ranks.get(query_id, {}).get(doc_id)

    def truncated(self, k: int) -> Run:
        return Run(self.name, {qid: r[:k] for qid, r in self.rankings.items()}, self.seconds, self.usage)

    def as_score_dict(self) -> dict[str, dict[str, float]]:
        """The ``{qid: {docid: score}}`` shape pytrec_eval takes."""
        return {qid: {doc: float(score) for doc, score in r} for qid, r in self.rankings.items()}


def llm_outcomes(usage: Iterable[Mapping[str, Any]]) -> list[str]:
    """What the LLM uses behind a run did that its numbers alone do not say, one line each: ``listwise
    rerank by smollm2: 12 of 12 replies unusable: the first-stage order was kept`` (each use's
    ``outcome``, written by the reranker into ``Run.usage`` and the provenance record). Every place
    that shows a run's numbers shows these lines with them; an LLM's reply is never in them."""
    lines = []
    for entry in usage:
        said = entry.get("outcome")
        if isinstance(said, str) and said:
            lines.append(f"{entry.get('use', 'LLM use')} by {entry.get('model', '?')}: {said}")
    return lines


def safe_name(name: str) -> str:
    """A run name usable as a file name and a TREC tag (no spaces or slashes)."""
    return re.sub(r"[^A-Za-z0-9._+=,-]+", "_", name).strip("_") or "run"


def _unwritable_ids(run: Run) -> list[Problem]:
    """Ids a TREC file cannot hold (its columns are split on whitespace), and scores it cannot rank."""
    where = f"run {run.name}"
    problems: list[Problem] = []
    for qid, ranking in run.rankings.items():
        if not qid or any(c.isspace() for c in qid):
            problems.append(Problem(where, None, f"query id {qid!r} is empty or contains whitespace"))
        for doc, score in ranking:
            if not doc or any(c.isspace() for c in doc):
                message = f"document id {doc!r} (query {qid!r}) is empty or contains whitespace"
                problems.append(Problem(where, None, message))
            elif not math.isfinite(score):
                problems.append(Problem(where, None, f"document {doc!r} (query {qid!r}) has score {score}"))
        if len(problems) >= 20:
            break
    return problems


def format_trec(run: Run, tag: str | None = None) -> str:
    """TREC run text: ``qid Q0 docid rank score tag`` per line.

    Raises DataError when an id contains whitespace or a score is not finite: the file would not
    read back as the same run.
    """
    problems = _unwritable_ids(run)
    if problems:
        raise DataError(problems)
    tag = safe_name(tag or run.name)
    lines = [
        f"{qid} Q0 {doc} {rank} {score:.6f} {tag}"
        for qid, ranking in run.rankings.items()
        for rank, (doc, score) in enumerate(ranking, start=1)
    ]
    return "\n".join(lines) + ("\n" if lines else "")


def write_trec(run: Run, path: str | Path, tag: str | None = None) -> Path:
    """Write a TREC run file (atomically: a crash never leaves half a file)."""
    path = Path(path)
    atomic_write_text(path, format_trec(run, tag))
    return path


def parse_score(raw: str | float) -> float:
    """A score from a TREC column or a JSON number. ValueError (saying why) when it cannot rank
    documents — not a number, NaN or infinite (``1e999`` reads as infinity) — so every run format
    refuses the same scores with the same words."""
    try:
        value = float(raw)
    except (ValueError, OverflowError):  # OverflowError: a JSON integer of hundreds of digits
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"score must be a finite number, got {str(raw)[:40]!r}")
    return value


def read_trec(path: str | Path, name: str | None = None) -> Run:
    """Read a TREC run file; rankings are re-sorted by score (rank breaks ties), as trec_eval reads them."""
    path = Path(path)
    if not path.is_file():
        raise DataError([Problem(str(path), None, "file not found")])
    return parse_trec(path.read_bytes(), str(path), name or path.stem)


def parse_trec(data: bytes, label: str, name: str, keep: Callable[[str, str, int], bool] | None = None) -> Run:
    """Parse TREC run text (``label`` names it in messages). ``keep(qid, doc, line)`` may drop rows,
    e.g. ones naming a query the dataset lacks; bad lines raise one DataError naming every line."""
    problems: list[Problem] = []
    rows: dict[str, list[tuple[float, int, str]]] = {}
    seen: set[tuple[str, str]] = set()
    data = data.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark would rename the first query
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as err:
            problems.append(Problem(label, number, f"not UTF-8 text (byte {err.start})"))
            continue
        if not line:
            continue
        fields = line.split()
        if len(fields) != 6:
            problems.append(
                Problem(label, number, f"expected 6 columns (qid Q0 docid rank score tag), found {len(fields)}")
            )
            continue
        qid, _, doc, rank, score, _ = fields
        try:
            rank_value = int(rank)
        except ValueError:
            problems.append(Problem(label, number, f"rank must be an integer, got {rank[:40]!r}"))
            continue
        try:
            score_value = parse_score(score)
        except ValueError as err:
            problems.append(Problem(label, number, str(err)))
            continue
        if (qid, doc) in seen:
            problems.append(Problem(label, number, f"document {doc!r} listed twice for query {qid!r}"))
            continue
        seen.add((qid, doc))
        if keep is not None and not keep(qid, doc, number):
            continue
        rows.setdefault(qid, []).append((score_value, rank_value, doc))
    if not seen and not problems:
        problems.append(Problem(label, None, "file is empty"))
    if problems:
        raise DataError(problems)
    rankings = {
        qid: [(doc, score) for score, _, doc in sorted(entries, key=lambda e: (-e[0], e[1]))]
        for qid, entries in rows.items()
    }
    return Run(name, rankings)
