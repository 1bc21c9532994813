"""Imported runs: rankings made elsewhere (a GPU cluster, the official R2MED kit, MTEB) used as
systems named ``run:<name>``, like any retriever — in the URL, the CLI, Compare, Metrics, the explorer.

Runs live in two places, and a name is only ever *looked up in their listings*, never joined into a
path, so ``run:../../etc/passwd`` reads nothing:

- **uploads** (from the app): ``$R2MED_DATA_HOME/runs/<dataset>-<corpus digest>/<name>.trec`` (or the
  user data folder), written atomically under a sanitised name of our choosing, so they survive restarts
  and are only offered for the corpus they were validated against;
- **the operator's runs folder** (``R2MED_RUNS_DIR``): one sub-folder per task / dataset name holding
  TREC files (``.trec .txt .run .tsv``), score JSON files, or one sub-folder per retriever as an
  evaluation kit writes them, holding such a JSON file.

Score JSON is ``{query id: {doc id: score}}`` — what MTEB's ``save_predictions`` writes per task, and
the shape evaluation kits (BRIGHT-style, as R2MED's) keep per retriever. Wrappers of single-key levels
(``{"default": {"test": {...}}}``) and an ``mteb_model_meta`` entry are unwrapped.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from r2med_core.cache import atomic_write_text
from r2med_core.data import DataError, Dataset, Problem, _id_problem
from r2med_core.evaluation import is_results
from r2med_core.runs import Run, format_trec, parse_score, parse_trec
from r2med_core.settings import Settings, load_settings, user_data_home

RUN_PREFIX = "run:"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
TREC_SUFFIXES = (".trec", ".txt", ".run", ".tsv")
JSON_SUFFIXES = (".json", ".jsonl")  # .jsonl: the R2MED kit's top-k files
#: Unknown document ids reported one by one (the rest are counted).
MAX_DOC_WARNINGS = 20
UPLOADS = "uploaded"
NOT_A_RUN = "a results file holds metric means, not a ranking: give the run it was made from (its .trec file)"
RUNS_DIR = "runs folder"
MTEB_RESULT_NOT_A_RUN = (
    "an MTEB result file (task_name, scores) holds MTEB's metric means, not a ranking: add it on the Leaderboard "
    "under \"Your MTEB result files\" (or `r2med mteb-results FILE`), and import its predictions file "
    "(<TaskName>_predictions.json, from `mteb run --save-predictions`) here to browse it per query"
)


def is_mteb_result(obj: Any) -> bool:
    """Whether parsed JSON has the shape of an MTEB result file (``reporting.mteb_files`` reads it), not a ranking."""
    return isinstance(obj, dict) and "task_name" in obj and "scores" in obj and "dataset_revision" in obj


@dataclass(frozen=True)
class ImportedRun:
    """A run checked against a dataset: the kept rankings and what was ignored (with file:line)."""

    run: Run
    warnings: tuple[Problem, ...] = ()
    source_format: str = "trec"


@dataclass(frozen=True)
class RunEntry:
    """One run offered for a dataset. ``path`` stays on the server: only ``name`` is ever shown or linked."""

    name: str
    origin: str  # UPLOADS or RUNS_DIR
    path: Path
    label: str  # the original file name, for display
    #: Who uploaded it: signed-in identities, or browser-session tokens when sign-in is off (an upload of
    #: the same bytes by someone else adds them). Empty for the operator's runs folder and older uploads.
    uploaded_by: tuple[str, ...] = ()

    @property
    def system(self) -> str:
        return RUN_PREFIX + self.name

    def uploaded_by_one_of(self, uploaders: Collection[str]) -> bool:
        """Whether one of ``uploaders`` (a person's identities, or a session's token) uploaded it."""
        return bool(set(self.uploaded_by) & set(uploaders))


def is_run_name(name: str) -> bool:
    """True for names we can offer: letters, digits, ``._-``, no leading dot, at most 64 characters."""
    return bool(_NAME.fullmatch(name))


def sanitize_run_name(text: str) -> str:
    """A run name of our choosing from whatever the user's file was called."""
    stem = Path(text.replace("\\", "/")).name
    for suffix in (*TREC_SUFFIXES, *JSON_SUFFIXES):
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip(".-_")[:64].strip(".-_")
    return cleaned or "run"


# --------------------------------------------------------------------------- parsing


def parse_run(data: bytes, label: str, name: str, dataset: Dataset | None = None) -> ImportedRun:
    """Parse TREC or score-JSON bytes (read from memory: ``label`` only names them in messages).

    With a dataset: rows naming unknown queries are dropped and reported, unknown documents are
    kept (they count as not relevant, as trec_eval counts them) and reported. Bad lines raise DataError.
    """
    stripped = data.lstrip()
    if stripped.startswith(b"{"):
        kit = _kit_topk(data, label)
        scores = kit if kit is not None else _json_scores(data, label)
        return _without_identical_ids(_from_scores(scores, label, name, dataset), label)
    warnings: list[Problem] = []
    unknown_docs = _DocWarnings(label)
    unknown_queries: dict[str, int] = {}

    def keep(qid: str, doc: str, line: int) -> bool:
        if dataset is None:
            return True
        if qid not in dataset.queries:
            unknown_queries.setdefault(qid, line)
            return False
        if doc not in dataset.corpus:
            unknown_docs.add(doc, qid, line)
        return True

    run = parse_trec(data, label, name, keep)
    if dataset is not None:  # without one, no query is unknown
        warnings += [
            Problem(label, line, f"query {qid!r} is not in {dataset.name}: its rows are ignored")
            for qid, line in list(unknown_queries.items())[:MAX_DOC_WARNINGS]
        ]
    if len(unknown_queries) > MAX_DOC_WARNINGS:
        warnings.append(Problem(label, None, f"{len(unknown_queries)} unknown query ids in all (ignored)"))
    warnings += unknown_docs.problems(dataset)
    return _without_identical_ids(ImportedRun(run, tuple(warnings), "trec"), label)


def _without_identical_ids(imported: ImportedRun, label: str) -> ImportedRun:
    """The run with every document whose id equals its query's id dropped, as BEIR's
    ``ignore_identical_ids`` drops them from any run before scoring (the benchmark's dense evaluation;
    this app's own dense runs never retrieve them), so an imported run is scored as the paper's were."""
    rankings, dropped = {}, []
    for qid, ranking in imported.run.rankings.items():
        rankings[qid] = [(doc, score) for doc, score in ranking if doc != qid]
        if len(rankings[qid]) < len(ranking):
            dropped.append(qid)
    if not dropped:
        return imported
    shown = ", ".join(repr(q) for q in dropped[:3]) + (" …" if len(dropped) > 3 else "")
    note = Problem(
        label,
        None,
        f"{len(dropped)} queries retrieve a document with their own id ({shown}): dropped before scoring, "
        "as BEIR's ignore_identical_ids does in the benchmark's evaluation",
    )
    return replace(imported, run=replace(imported.run, rankings=rankings), warnings=(*imported.warnings, note))


class _DocWarnings:
    """Unknown document ids: the first few with their line, then a count."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.count = 0
        self.first: list[Problem] = []

    def add(self, doc: str, qid: str, line: int | None) -> None:
        self.count += 1
        if len(self.first) < MAX_DOC_WARNINGS:
            self.first.append(Problem(self.label, line, f"document {doc!r} (query {qid!r}) is not in the corpus"))

    def problems(self, dataset: Dataset | None) -> list[Problem]:
        if not self.count:
            return list(self.first)
        where = dataset.name if dataset else "the dataset"
        total = Problem(
            self.label, None, f"{self.count} retrieved documents are not in {where}'s corpus (not relevant)"
        )
        return [*self.first, total]


def _json_line(text: str, label: str, line: int | None) -> Any:
    """One JSON document; every way it can be unreadable (syntax, depth, huge numbers) is a DataError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        where = line if line is not None else err.lineno
        raise DataError([Problem(label, where, f"malformed JSON: {err.msg} (column {err.colno})")]) from None
    except (ValueError, RecursionError) as err:  # nesting too deep, integers of thousands of digits
        raise DataError([Problem(label, line, f"unreadable JSON: {type(err).__name__}")]) from None


def _kit_topk(data: bytes, label: str) -> dict[str, dict[str, float]] | None:
    """The R2MED kit's top-k file, JSON lines ``{"id": qid, "topk_pid": [[doc id, score], …]}``, as
    scores; None when the data is not in that shape. Its ``label_location`` files (only the rank of
    each gold document) hold no ranking and are refused with a message saying so."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = [(n, raw) for n, raw in enumerate(text.splitlines(), start=1) if raw.strip()]
    if not lines:
        return None
    try:
        first = json.loads(lines[0][1])
    except (ValueError, RecursionError):
        return None
    if not isinstance(first, dict) or "id" not in first:
        return None
    if "label_location" in first and "topk_pid" not in first:
        raise DataError(
            [Problem(label, 1, "a label_location file holds only the ranks of gold documents, not a ranking: "
                     "save the kit's top-k documents (topk_pid) or a TREC run instead")]
        )
    if "topk_pid" not in first:
        return None
    scores: dict[str, dict[str, float]] = {}
    problems: list[Problem] = []
    for number, raw in lines:
        row = _json_line(raw, label, number)
        pairs = row.get("topk_pid") if isinstance(row, dict) else None
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("id"), (str, int))
            or not isinstance(pairs, list)
            or not all(isinstance(p, list) and len(p) == 2 for p in pairs)
        ):
            problems.append(Problem(label, number, 'expected {"id": query id, "topk_pid": [[document id, score], …]}'))
        else:
            try:
                scores[str(row["id"])] = _json_ranking(row["id"], {str(doc): score for doc, score in pairs})
            except ValueError as err:
                problems.append(Problem(label, number, str(err)))
        if len(problems) >= MAX_DOC_WARNINGS:
            break
    if problems:
        raise DataError(problems)
    return scores


def _json_scores(data: bytes, label: str) -> dict[str, dict[str, float]]:
    """``{qid: {docid: score}}`` from score JSON (MTEB predictions, kit score files, generic)."""
    try:
        obj = _json_line(data.decode("utf-8"), label, None)
    except UnicodeDecodeError as err:
        raise DataError([Problem(label, None, f"not UTF-8 text (byte {err.start})")]) from None
    if is_results(obj):
        raise DataError([Problem(label, None, NOT_A_RUN)])
    if is_mteb_result(obj):
        raise DataError([Problem(label, None, MTEB_RESULT_NOT_A_RUN)])
    obj = _unwrap(obj)
    if not isinstance(obj, dict) or not obj:
        raise DataError([Problem(label, None, "expected a JSON object {query id: {document id: score}}")])
    problems: list[Problem] = []
    scores: dict[str, dict[str, float]] = {}
    for qid, docs in obj.items():
        if not isinstance(docs, dict):
            problems.append(Problem(label, None, f"query {qid!r}: expected an object {{document id: score}}"))
            continue
        try:
            scores[str(qid)] = _json_ranking(qid, docs)
            # the one rule for ids (data._id_problem), at parse time: nothing unwritable reaches a writer
            wrong = _id_problem("query id", str(qid)) or next(
                (w for w in (_id_problem("document id", d) for d in scores[str(qid)]) if w), None
            )
            if wrong:
                raise ValueError(wrong)
        except ValueError as err:
            problems.append(Problem(label, None, str(err)))
        if len(problems) >= MAX_DOC_WARNINGS:
            break
    if problems:
        raise DataError(problems)
    return scores


def _json_ranking(qid: object, docs: dict[Any, Any]) -> dict[str, float]:
    """One query's ``{doc id: score}`` from JSON. ValueError naming the query and document when a score
    is not a JSON number (true and "0.5" are not) or cannot rank (NaN, Infinity: ``runs.parse_score``)."""
    ranking: dict[str, float] = {}
    for doc, score in docs.items():
        try:
            if isinstance(score, bool) or not isinstance(score, int | float):
                raise ValueError("score must be a number")
            ranking[str(doc)] = parse_score(score)
        except ValueError as err:
            raise ValueError(f"query {str(qid)!r}, document {str(doc)!r}: {err}") from None
    return ranking


def _is_scores(obj: Any) -> bool:
    if not isinstance(obj, dict) or not obj:
        return False
    first = next(iter(obj.values()))
    if not isinstance(first, dict):
        return False
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in list(first.values())[:5])


def _unwrap(obj: Any) -> Any:
    """Descend through an MTEB wrapper (``mteb_model_meta`` + subset → split levels) to the scores."""
    if isinstance(obj, dict) and "mteb_model_meta" in obj:
        obj = {k: v for k, v in obj.items() if k != "mteb_model_meta"}
    while isinstance(obj, dict) and len(obj) == 1 and not _is_scores(obj):
        inner = next(iter(obj.values()))
        if not (isinstance(inner, dict) and inner and all(isinstance(v, dict) for v in inner.values())):
            break
        obj = inner
    return obj


def _from_scores(scores: dict[str, dict[str, float]], label: str, name: str, dataset: Dataset | None) -> ImportedRun:
    warnings: list[Problem] = []
    unknown_docs = _DocWarnings(label)
    rankings = {}
    for qid, docs in scores.items():
        if dataset is not None and qid not in dataset.queries:
            warnings.append(Problem(label, None, f"query {qid!r} is not in {dataset.name}: ignored"))
            continue
        if dataset is not None:
            for doc in docs:
                if doc not in dataset.corpus:
                    unknown_docs.add(doc, qid, None)
        # trec_eval's order: score, then document id, both descending.
        rankings[qid] = sorted(docs.items(), key=lambda item: (item[1], item[0]), reverse=True)
    if len(warnings) > MAX_DOC_WARNINGS:
        warnings = [*warnings[:MAX_DOC_WARNINGS], Problem(label, None, f"{len(warnings)} unknown query ids in all")]
    return ImportedRun(Run(name, rankings), (*warnings, *unknown_docs.problems(dataset)), "json")


def read_run_file(
    path: str | Path, dataset: Dataset | None = None, name: str | None = None, label: str | None = None
) -> ImportedRun:
    """A run file from disk (TREC or score JSON), or a kit's per-retriever folder holding a score JSON.
    ``label`` names it in messages (the app passes the file's name, never its server path)."""
    path = Path(path)
    if path.is_dir():
        path = _score_file_in(path, label or str(path))
        label = f"{label}/{path.name}" if label else None
    if not path.is_file():
        raise DataError([Problem(label or str(path), None, "file not found")])
    return parse_run(path.read_bytes(), label or str(path), name or sanitize_run_name(path.name), dataset)


def read_run_or_results(path: str | Path, dataset: Dataset | None = None) -> ImportedRun:
    """A run file as ``read_run_file`` reads it, or the ``NAME.json`` results ``eval`` and ``sweep`` write,
    whose run is the ``NAME.trec`` beside it (a results file holds means, not a ranking)."""
    path = Path(path)
    if path.suffix.lower() == ".json" and path.is_file():
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            obj = None  # read_run_file reports what is wrong with it
        if is_results(obj):
            trec = path.with_suffix(".trec")
            if not trec.is_file():
                missing = f"a results file holds no ranking, and its run {trec.name} is not beside it"
                raise DataError([Problem(str(path), None, missing)])
            return read_run_file(trec, dataset, name=path.stem)
    return read_run_file(path, dataset)


def _score_file_in(folder: Path, label: str) -> Path:
    """The score JSON of a kit's result folder: files named like ``*score*`` first; metric files
    (``{"NDCG@10": 0.3}``) are recognised by their shape and skipped."""
    candidates = sorted(
        (p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in (*JSON_SUFFIXES, *TREC_SUFFIXES)),
        key=lambda p: ("score" not in p.name.lower(), p.suffix.lower() not in TREC_SUFFIXES, p.name),
    )
    for candidate in candidates:
        if candidate.suffix.lower() in TREC_SUFFIXES:
            return candidate
        try:
            if candidate.suffix.lower() == ".jsonl":
                if _kit_topk(candidate.read_bytes(), label) is not None:
                    return candidate
            else:
                obj = json.loads(candidate.read_text(encoding="utf-8"))
                if not is_results(obj) and _is_scores(_unwrap(obj)):
                    return candidate
        except (UnicodeDecodeError, ValueError, RecursionError, DataError):
            continue
    raise DataError([Problem(label, None, "no TREC run or {query id: {document id: score}} JSON file found")])


# --------------------------------------------------------------------------- where runs live


def uploads_root() -> Path:
    """``$R2MED_DATA_HOME/runs``, else ``runs`` in the user data folder (next to the annotation store)."""
    return user_data_home() / "runs"


def dataset_folder_name(dataset: Dataset) -> str:
    """Uploads are kept per dataset and corpus, so a run is only offered where it was validated."""
    return f"{sanitize_run_name(dataset.name)}-{dataset.fingerprint[:12]}"


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except OSError:
        return False


def _upload_entries(dataset: Dataset) -> list[RunEntry]:
    folder = uploads_root() / dataset_folder_name(dataset)
    if not folder.is_dir():
        return []
    entries = []
    for path in sorted(folder.glob("*.trec")):
        name = path.stem
        if not is_run_name(name) or not _inside(path, folder):
            continue
        meta = _upload_meta(path)
        label = str(meta.get("source_file") or name)
        by = meta.get("uploaded_by")
        uploaders = tuple(str(u) for u in by if isinstance(u, str)) if isinstance(by, list) else ()
        entries.append(RunEntry(name, UPLOADS, path, label, uploaders))
    return entries


def _upload_meta(path: Path) -> dict[str, Any]:
    """What we recorded next to an upload (original file name, digest, warnings); {} if unreadable — a
    damaged file (bad JSON, nesting too deep, a number too long for int) costs that run its label only,
    never the dataset's list of runs."""
    meta = path.with_suffix(".json")
    try:
        loaded = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _runs_dir_entries(dataset: Dataset, settings: Settings) -> list[RunEntry]:
    root = settings.runs_dir
    if root is None or not root.is_dir():
        return []
    task = next((p for p in root.iterdir() if p.is_dir() and p.name == dataset.name), None)
    if task is None:
        return []
    entries = []
    for path in sorted(task.iterdir()):
        if path.name.startswith(".") or not _inside(path, root):
            continue
        is_file_run = path.is_file() and path.suffix.lower() in (*TREC_SUFFIXES, *JSON_SUFFIXES)
        if not (is_file_run or path.is_dir()):
            continue
        name = sanitize_run_name(path.name) if path.is_file() else path.name
        if is_run_name(name):
            entries.append(RunEntry(name, RUNS_DIR, path, path.name))
    return entries


def keep_provenance(entry: RunEntry, record: dict[str, Any]) -> None:
    """Remember where an uploaded run came from (a saved report's provenance record), beside it."""
    if entry.origin != UPLOADS:
        return  # the operator's runs folder is theirs: nothing is written there
    meta = _upload_meta(entry.path)
    meta["provenance"] = record
    atomic_write_text(entry.path.with_suffix(".json"), json.dumps(meta, indent=1))


def kept_provenance(dataset: Dataset, system: str, settings: Settings | None = None) -> dict[str, Any] | None:
    """The provenance record kept with an uploaded run ``run:<name>`` (from a reopened report), or None."""
    if not system.startswith(RUN_PREFIX):
        return None
    entry = available_runs(dataset, settings).get(system.removeprefix(RUN_PREFIX))
    if entry is None or entry.origin != UPLOADS:
        return None
    record = _upload_meta(entry.path).get("provenance")
    return record if isinstance(record, dict) else None


def available_runs(dataset: Dataset, settings: Settings | None = None) -> dict[str, RunEntry]:
    """Every run offered for this dataset, by name (the operator's runs folder wins a clash)."""
    settings = settings or load_settings()
    out = {e.name: e for e in _upload_entries(dataset)}
    out.update({e.name: e for e in _runs_dir_entries(dataset, settings)})
    return out


_LOADED: OrderedDict[tuple, ImportedRun] = OrderedDict()
_LOADED_MAX = 32


def _stat_key(path: Path) -> tuple:
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    return tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)


def find_run(dataset: Dataset, name: str, settings: Settings | None = None) -> RunEntry:
    """The run called ``name`` for this dataset; a clear error listing what exists otherwise."""
    available = available_runs(dataset, settings) if is_run_name(name) else {}
    if name not in available:
        offered = ", ".join(RUN_PREFIX + n for n in available) or "none yet: upload one in the sidebar's Your runs"
        raise KeyError(f"no run named {name!r} for {dataset.name} (available: {offered})")
    return available[name]


def load_run(dataset: Dataset, name: str, settings: Settings | None = None) -> ImportedRun:
    """The run ``name`` checked against the dataset; parsed once per file version (size, mtime)."""
    entry = find_run(dataset, name, settings)
    key = (dataset.fingerprint, dataset.content_digest, entry.origin, _stat_key(entry.path))
    if key not in _LOADED:
        _LOADED[key] = read_run_file(entry.path, dataset, RUN_PREFIX + name, entry.label)
        while len(_LOADED) > _LOADED_MAX:
            _LOADED.popitem(last=False)
    _LOADED.move_to_end(key)
    return _LOADED[key]


def run_digest(dataset: Dataset, name: str, settings: Settings | None = None) -> str:
    """A digest of the run's files, so a fused run built on it is recomputed when it changes."""
    entry = find_run(dataset, name, settings)
    digest = hashlib.sha256()
    for path, _, _ in _stat_key(entry.path):
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:24]


def save_upload(
    dataset: Dataset, data: bytes, file_name: str, settings: Settings | None = None, uploader: str = ""
) -> tuple[RunEntry, ImportedRun]:
    """Validate uploaded bytes and store them for this dataset under a fresh name of our choosing,
    recording ``uploader`` (a signed-in identity or a browser session's token) as one who uploaded it.

    Raises DataError (file:line problems) on a bad file, or when the upload is over the size cap or
    names none of the dataset's queries.
    """
    settings = settings or load_settings()
    label = Path(file_name.replace("\\", "/")).name or "upload"
    if len(data) > settings.upload_max_bytes:
        raise DataError(
            [Problem(label, None, f"{len(data) / 2**20:.1f} MB is over the {settings.upload_max_mb:g} MB upload limit")]
        )
    digest = hashlib.sha256(data).hexdigest()
    offered = available_runs(dataset, settings)
    same = next(
        (e for e in offered.values() if e.origin == UPLOADS and _upload_meta(e.path).get("sha256") == digest), None
    )
    if same is not None:  # the same bytes again: one run, with one more uploader
        if uploader and uploader not in same.uploaded_by:
            meta = _upload_meta(same.path) | {"uploaded_by": [*same.uploaded_by, uploader]}
            atomic_write_text(same.path.with_suffix(".json"), json.dumps(meta, indent=1))
            same = replace(same, uploaded_by=(*same.uploaded_by, uploader))
        return same, load_run(dataset, same.name, settings)
    base = sanitize_run_name(label)
    taken = set(offered)
    name, n = base, 2
    while name in taken:
        suffix = f"-{n}"
        name, n = base[: 64 - len(suffix)] + suffix, n + 1
    imported = parse_run(data, label, RUN_PREFIX + name, dataset)
    if not imported.run.rankings:
        raise DataError([*imported.warnings[:5], Problem(label, None, f"no row names a query of {dataset.name}")])
    folder = uploads_root() / dataset_folder_name(dataset)
    path = folder / f"{name}.trec"
    atomic_write_text(path, format_trec(imported.run, tag=name))
    meta = {
        "source_file": label,
        "format": imported.source_format,
        "dataset": dataset.name,
        "corpus": dataset.fingerprint,
        "uploaded": datetime.now(UTC).isoformat(timespec="seconds"),
        "sha256": digest,
        "warnings": [str(w) for w in imported.warnings],
        "uploaded_by": [uploader] if uploader else [],
    }
    atomic_write_text(path.with_suffix(".json"), json.dumps(meta, indent=1))
    return RunEntry(name, UPLOADS, path, label, (uploader,) if uploader else ()), imported
