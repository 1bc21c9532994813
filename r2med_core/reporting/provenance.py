"""Where a number comes from: the data, the models, the rewrites, the code, the machine and the cost.

A metric is only comparable with another when both came from the same corpus revision, model
weights and scoring code. ``collect`` records all of that for one run; ``differences`` says, in
words, what differs between two records (a results file from another machine is flagged with it).
Written next to every run the CLI writes (``NAME.provenance.json``; the results JSON keeps the
benchmark's four keys) and shown in the app on a click.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from r2med_core.cache import fingerprint
from r2med_core.data import HAND_WRITTEN
from r2med_core.evaluation import is_results
from r2med_core.runs import llm_outcomes
from r2med_core.settings import Price

#: Bump when the record's fields change meaning.
PROVENANCE_VERSION = 1

#: The distributions whose versions can move a number (scoring, tokenising, encoding, serving).
PACKAGES: tuple[str, ...] = (
    "numpy",
    "scipy",
    "pandas",
    "pytrec-eval-terrier",
    "bm25s",
    "PyStemmer",
    "rank-bm25",
    "nltk",
    "torch",
    "transformers",
    "sentence-transformers",
    "faiss-cpu",
    "onnxruntime",
    "openai",
    "huggingface-hub",
)

_ROOT = Path(__file__).resolve().parents[2]  # the checkout (r2med_core/reporting/provenance.py)


class ProvenanceError(ValueError):
    """A provenance record that cannot be read; the message names the file."""


@dataclass(frozen=True)
class Provenance:
    """One run's origins. ``dataset``: name, source and revision (a hub commit) or content
    fingerprint (a local folder); ``models``: each model id with its revision; ``rewrites``: each
    rewrite's ``method:llm`` with a fingerprint of its texts; ``tokens``: what API LLMs used in all
    (``prompt``, ``completion``), and ``llm_usage`` the same per LLM use (``model``, ``use``,
    ``prompt``, ``completion``) — cached replies count what they cost when they were made."""

    system: str
    dataset: dict[str, Any]
    models: tuple[dict[str, str], ...] = ()
    rewrites: tuple[dict[str, str], ...] = ()
    packages: dict[str, str] = field(default_factory=dict)
    project: dict[str, str] = field(default_factory=dict)
    hardware: dict[str, Any] = field(default_factory=dict)
    wall_seconds: float | None = None
    tokens: dict[str, int] | None = None
    created: str = ""
    version: int = PROVENANCE_VERSION
    llm_usage: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        payload = asdict(self)
        payload["models"] = [dict(m) for m in self.models]
        payload["rewrites"] = [dict(r) for r in self.rewrites]
        payload["llm_usage"] = [dict(u) for u in self.llm_usage]
        return payload

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], *, source: str = "provenance") -> Provenance:
        """Read a record written by ``to_json``; a malformed one raises ``ProvenanceError``."""
        if not isinstance(obj, Mapping) or not isinstance(obj.get("system"), str):
            raise ProvenanceError(f"{source}: not a provenance record (no 'system' field)")
        try:
            return cls(
                system=obj["system"],
                dataset=dict(obj.get("dataset") or {}),
                models=tuple(dict(m) for m in obj.get("models") or ()),
                rewrites=tuple(dict(r) for r in obj.get("rewrites") or ()),
                packages={str(k): str(v) for k, v in dict(obj.get("packages") or {}).items()},
                project={str(k): str(v) for k, v in dict(obj.get("project") or {}).items()},
                hardware=dict(obj.get("hardware") or {}),
                wall_seconds=None if obj.get("wall_seconds") is None else float(obj["wall_seconds"]),
                tokens=None if obj.get("tokens") is None else {str(k): int(v) for k, v in obj["tokens"].items()},
                created=str(obj.get("created") or ""),
                version=int(obj.get("version") or PROVENANCE_VERSION),
                llm_usage=tuple(_usage_entry(u) for u in obj.get("llm_usage") or ()),
            )
        except (TypeError, ValueError, AttributeError) as err:
            raise ProvenanceError(f"{source}: malformed provenance record ({err})") from None

    @property
    def uses_api(self) -> bool:
        """Whether a paid API is behind the run (an LLM use, OpenAI embeddings) rather than local weights."""
        return bool(self.llm_usage) or any(str(m.get("id", "?")).startswith("text-embedding-") for m in self.models)

    def cost(self, prices: Mapping[str, Price] | None = None) -> str:
        """What the run cost beyond this machine's time, in words for a table: tokens, and money only
        where the operator configured a price for every model that spent them (never a guess)."""
        if self.tokens and any(self.tokens.values()):
            words = ", ".join(f"{v:,} {k} tokens" for k, v in self.tokens.items())
            money = self.money(prices or {})
            return f"{words} ({money})" if money else words
        if self.llm_usage:
            return "API calls (the server reported no token usage)"
        return "API calls (tokens not recorded)" if self.uses_api else "none (local models)"

    def money(self, prices: Mapping[str, Price]) -> str | None:
        """``≈ 0.0123 USD at the configured prices``, or None when a model that spent tokens has no price
        (or prices differ in currency)."""
        spent = [u for u in self.llm_usage if u.get("prompt") or u.get("completion")]
        if not spent or any(u.get("model") not in prices for u in spent):
            return None
        currencies = {prices[u["model"]].currency for u in spent}
        if len(currencies) != 1:
            return None
        total = sum(prices[u["model"]].of(int(u.get("prompt", 0)), int(u.get("completion", 0))) for u in spent)
        currency = currencies.pop()
        return f"≈ {total:.4g}{' ' + currency if currency else ''} at the configured price per 1M tokens"

    def outcomes(self) -> list[str]:
        """What the run's LLM uses did that its numbers do not say (``runs.llm_outcomes``)."""
        return llm_outcomes(self.llm_usage)

    def summary_rows(self, prices: Mapping[str, Price] | None = None) -> list[tuple[str, str]]:
        """``(what, value)`` pairs for a table on screen (``prices``: the operator's, for ``cost``)."""
        rows = [("system", self.system)]
        data = self.dataset
        where = data.get("revision") or data.get("fingerprint") or "?"
        rows.append(("dataset", f"{data.get('name', '?')} · {data.get('source', '?')} · {where}"))
        rows += [("model", f"{m.get('id', '?')} @ {m.get('revision', '?')}") for m in self.models]
        rows += [
            ("rewrite", f"{r.get('rewrite', '?')} · texts {r.get('fingerprint', '?')}" + _made_by(r.get("made_by")))
            for r in self.rewrites
        ]
        rows.append(("code", f"r2med-explorer {self.project.get('version', '?')} ({self.project.get('commit', '?')})"))
        rows.append(("packages", ", ".join(f"{k} {v}" for k, v in self.packages.items())))
        hw = self.hardware
        rows.append(("hardware", f"{hw.get('device', '?')} · {hw.get('gpu') or hw.get('cpu') or '?'}"))
        if self.wall_seconds is not None:
            rows.append(("wall time", f"{self.wall_seconds:.2f} s"))
        rows += [
            ("LLM use", f"{u.get('use', '?')} · {u.get('model', '?')}: {int(u.get('prompt', 0)):,} prompt + "
             f"{int(u.get('completion', 0)):,} completion tokens")
            for u in self.llm_usage
        ]
        rows += [("LLM outcome", line) for line in self.outcomes()]
        rows.append(("cost", self.cost(prices)))
        return rows


def _usage_entry(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, Mapping):
        raise TypeError("an llm_usage entry is not an object")
    entry: dict[str, Any] = {
        "model": str(obj.get("model", "")),
        "use": str(obj.get("use", "")),
        "prompt": int(obj.get("prompt") or 0),
        "completion": int(obj.get("completion") or 0),
    }
    for count in ("requests", "unusable", "failed", "reordered"):  # what the replies did (a reranker's)
        if obj.get(count) is not None:
            entry[count] = int(obj[count])
    if isinstance(obj.get("outcome"), str):
        entry["outcome"] = str(obj["outcome"])
    return entry


def usage_totals(entries: Iterable[Mapping[str, Any]]) -> dict[str, int] | None:
    """``{"prompt": n, "completion": m}`` summed over LLM uses (None when there are none)."""
    entries = list(entries)
    if not entries:
        return None
    return {key: sum(int(e.get(key) or 0) for e in entries) for key in ("prompt", "completion")}


# --------------------------------------------------------------------------- what the machine is


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str]:
    """Installed versions of ``names`` (absent ones left out)."""
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


@lru_cache(maxsize=1)
def project_version() -> dict[str, str]:
    """This project's version (pyproject) and, in a git checkout, its commit (``+dirty`` if edited)."""
    version = "unknown"
    try:
        for line in (_ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines():
            if line.startswith("version"):
                version = line.split("=", 1)[1].strip().strip('"')
                break
    except OSError:
        try:
            version = metadata.version("r2med-explorer")
        except metadata.PackageNotFoundError:
            pass
    out = {"version": version}
    if (_ROOT / ".git").exists():
        try:
            git = ["git", "-C", str(_ROOT)]
            commit = subprocess.run(
                [*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=5
            )
            dirty = subprocess.run(
                [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, timeout=5
            )
            if commit.returncode == 0:
                out["commit"] = commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
        except (OSError, subprocess.SubprocessError):
            pass
    return out


def _cpu_name() -> str:
    """The CPU's model (Linux: ``/proc/cpuinfo``), else the machine's architecture.

    Not ``platform.processor()``: outside Windows it forks ``uname -p`` (a copy of a process that may
    hold a whole corpus, in every run's provenance) and on Linux that says only "unknown".
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip() or platform.machine()
    except OSError:
        pass
    return platform.machine()


def hardware_info(device: str | None = None) -> dict[str, Any]:
    """The device that encodes (``auto`` resolved), the GPU's name where there is one, the CPU."""
    from r2med_core.retrieval.hardware import resolve_device

    resolved = resolve_device(device or os.environ.get("R2MED_DEVICE") or "auto")
    info: dict[str, Any] = {
        "device": resolved,
        "cpu": _cpu_name(),
        "cores": os.cpu_count() or 1,
        "python": platform.python_version(),
        "os": platform.system(),
    }
    if resolved.startswith("cuda"):
        try:
            import torch

            info["gpu"] = torch.cuda.get_device_name(resolved)
        except Exception:
            info["gpu"] = "unknown CUDA device"
    elif resolved == "mps":
        info["gpu"] = "Apple MPS"
    return info


# --------------------------------------------------------------------------- what the run used


def dataset_provenance(dataset: Any) -> dict[str, Any]:
    """Name, source and exact revision: the hub commit for a hub download (recorded by ``hub``),
    else the content fingerprint of corpus, queries, judgements and rewrites."""
    out: dict[str, Any] = {"name": dataset.name, "source": dataset.source}
    revision = getattr(dataset, "revision", None)
    if revision:
        out["revision"] = revision
    out["fingerprint"] = f"{dataset.fingerprint}-{dataset.content_digest}"
    return out


def _made_by(made: str | None) -> str:
    """" · written by hand, not by an LLM" / " · made by an LLM" / "" (not recorded)."""
    return {"hand": f" · {HAND_WRITTEN}", "llm": " · made by an LLM"}.get(made or "", "")


def rewrite_provenance(dataset: Any, rewrites: Iterable[tuple[str, str]]) -> tuple[dict[str, str], ...]:
    """Each rewrite a system uses, with a fingerprint of the texts it was given."""
    out = []
    for method, llm in dict.fromkeys(rewrites):
        texts = dataset.rewrites.get((method, llm), {})
        made = dataset.rewrite_provenance.get((method, llm), {}).get("made_by", "not recorded")
        out.append(
            {"rewrite": f"{method}:{llm}", "fingerprint": fingerprint(sorted(texts.items()))[:16], "made_by": str(made)}
        )
    return tuple(out)


def model_provenance(model_ids: Iterable[str]) -> tuple[dict[str, str], ...]:
    """Each model id with its revision (the hub commit in the local cache, or a folder's digest)."""
    from r2med_core.retrieval.dense import model_revision

    out = []
    for model_id in dict.fromkeys(model_ids):
        try:
            revision = model_revision(model_id)
        except Exception:  # an API model, a folder that went away: say what we know
            revision = "unknown"
        out.append({"id": model_id, "revision": revision})
    return tuple(out)


def collect(
    dataset: Any,
    system: str,
    *,
    models: Iterable[str] = (),
    rewrites: Iterable[tuple[str, str]] = (),
    wall_seconds: float | None = None,
    tokens: Mapping[str, int] | None = None,
    device: str | None = None,
    llm_usage: Iterable[Mapping[str, Any]] = (),
) -> Provenance:
    """The provenance of ``system``'s run on ``dataset`` on this machine, now. ``tokens`` default to
    the sum of ``llm_usage``.

    A run without models encodes nothing, so its device is the CPU (resolving ``auto`` would
    import torch, seconds of a BM25 run's time, only to record a device it never used).
    """
    usage = tuple(_usage_entry(u) for u in llm_usage)
    tokens = tokens if tokens is not None else usage_totals(usage)
    models = tuple(models)
    if device is None and not models:
        device = "cpu"
    return Provenance(
        system=system,
        dataset=dataset_provenance(dataset),
        models=model_provenance(models),
        rewrites=rewrite_provenance(dataset, rewrites),
        packages=package_versions(),
        project=project_version(),
        hardware=hardware_info(device),
        wall_seconds=wall_seconds,
        tokens=dict(tokens) if tokens else None,
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        llm_usage=usage,
    )


def system_models(system: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The model ids and ``(method, llm)`` rewrites a system name uses (each kind says which models
    it loads, each model's role which ids they are); an imported run or an unparseable name uses
    none that are known."""
    from r2med_core.kinds.roles import model_role
    from r2med_core.systems import SpecError, parse_system

    try:
        spec = parse_system(system)
    except SpecError:
        return [], []
    models = [model_id for role, name in spec.models() for model_id in model_role(role).provenance_ids(name)]
    rewrites: list[tuple[str, str]] = []
    stack = [spec]
    while stack:
        part = stack.pop(0)
        stack.extend(part.members)
        if part.rewrite:
            rewrites.append(part.rewrite)
    return models, rewrites


def run_provenance(
    dataset: Any,
    system: str,
    *,
    reranker: str | None = None,
    wall_seconds: float | None = None,
    tokens: Mapping[str, int] | None = None,
    usage: Iterable[Mapping[str, Any]] = (),
) -> Provenance:
    """``collect`` for a system name (and an optional cross-encoder reranker model).

    ``usage``: the run's LLM uses (``Run.usage``, e.g. an LLM reranking); the live rewrites the
    system uses add what generating them cost."""
    models, rewrites = system_models(system)
    if reranker:
        from r2med_core.kinds.rerank import CrossEncoderRole

        models += CrossEncoderRole().provenance_ids(reranker)
    from r2med_core.llm.generation import rewrite_usage

    spent = [*usage, *(entry for method, llm in rewrites if (entry := rewrite_usage(dataset, method, llm)))]
    return collect(
        dataset, system, models=models, rewrites=rewrites, wall_seconds=wall_seconds, tokens=tokens, llm_usage=spent
    )


def write_provenance(provenance: Provenance, results_path: Path) -> Path:
    """Write ``NAME.provenance.json`` next to ``NAME.json`` (atomically)."""
    from r2med_core.cache import atomic_write_text

    path = sidecar_path(results_path)
    atomic_write_text(path, json.dumps(provenance.to_json(), indent=2) + "\n")
    return path


# --------------------------------------------------------------------------- comparing records


def differences(a: Provenance, b: Provenance) -> list[str]:
    """What makes two runs' numbers not directly comparable, one sentence each (empty: comparable).

    Time, wall time and tokens are not differences; the data, the models, the rewrites, the
    scoring packages, the project's version and the device are."""
    out: list[str] = []
    da, db = a.dataset, b.dataset
    if da.get("name") != db.get("name"):
        out.append(f"different datasets: {da.get('name')} vs {db.get('name')}")
    for key, what in (("revision", "dataset revision"), ("fingerprint", "dataset content")):
        if da.get(key) and db.get(key) and da[key] != db[key]:
            out.append(f"{what} differs: {da[key]} vs {db[key]}")
    models_a = {str(m.get("id", "?")): m.get("revision") for m in a.models}
    models_b = {str(m.get("id", "?")): m.get("revision") for m in b.models}
    for model in sorted(models_a.keys() & models_b.keys()):
        if models_a[model] != models_b[model]:
            out.append(f"model {model} at revision {models_a[model]} vs {models_b[model]}")
    rewrites_a = {str(r.get("rewrite", "?")): r.get("fingerprint") for r in a.rewrites}
    rewrites_b = {str(r.get("rewrite", "?")): r.get("fingerprint") for r in b.rewrites}
    for rewrite in sorted(rewrites_a.keys() & rewrites_b.keys()):
        if rewrites_a[rewrite] != rewrites_b[rewrite]:
            out.append(f"rewrite {rewrite} has other texts ({rewrites_a[rewrite]} vs {rewrites_b[rewrite]})")
    for package in sorted(a.packages.keys() & b.packages.keys()):
        if a.packages[package] != b.packages[package]:
            out.append(f"{package} {a.packages[package]} vs {b.packages[package]}")
    if a.project.get("version") != b.project.get("version"):
        out.append(f"r2med-explorer {a.project.get('version')} vs {b.project.get('version')}")
    if a.hardware.get("device", "").split(":")[0] != b.hardware.get("device", "").split(":")[0]:
        out.append(f"encoded on {a.hardware.get('device')} vs {b.hardware.get('device')}")
    return out


def sidecar_path(results_path: Path) -> Path:
    """``NAME.json`` → ``NAME.provenance.json``."""
    return results_path.with_name(results_path.stem + ".provenance.json")


def read_provenance(path: Path) -> Provenance:
    """A provenance file; unreadable or malformed raises ``ProvenanceError`` naming it."""
    obj = _read_json(path, path.name, "a provenance record")
    return Provenance.from_json(obj, source=path.name)


def _read_json(path: Path, label: str, what: str) -> Any:
    """A JSON file's value; unreadable, malformed, or holding text no UTF-8 output can carry (a lone
    surrogate written as ``"\\ud800"``: printing it would fail later, mid-table) raises ProvenanceError."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ProvenanceError(f"{label}: cannot read {what} (text that is not valid Unicode)") from None
    except (OSError, ValueError, RecursionError) as err:
        raise ProvenanceError(f"{label}: cannot read {what} ({type(err).__name__})") from None
    return obj


# --------------------------------------------------------------------------- results files from elsewhere


@dataclass(frozen=True)
class ResultsFile:
    """A results JSON (the benchmark's four keys) and the provenance record beside it, if any."""

    path: Path
    dataset_name: str
    model_name: str
    means: dict[str, float]
    provenance: Provenance | None


def read_results_file(path: Path) -> ResultsFile:
    """``NAME.json`` and ``NAME.provenance.json``; a file that is not a results file raises
    ``ProvenanceError`` naming it."""
    obj = _read_json(path, str(path), "a results file")
    if not is_results(obj):
        raise ProvenanceError(f"{path}: not a results file (no 'test' object of metric values)")
    test = obj["test"]
    side = sidecar_path(path)
    record = read_provenance(side) if side.is_file() else None
    return ResultsFile(
        path=path,
        dataset_name=str(obj.get("dataset_name", "")),
        model_name=str(obj.get("model_name", path.stem)),
        means={str(k): float(v) for k, v in test.items()},
        provenance=record,
    )


def comparability(files: list[ResultsFile]) -> list[str]:
    """Why the files' numbers may not be comparable with the first one's, one line each."""
    if not files:
        return []
    first, notes = files[0], []
    for other in files[1:]:
        if other.dataset_name != first.dataset_name:
            notes.append(f"{other.path.name} is on {other.dataset_name!r}, {first.path.name} on {first.dataset_name!r}")
    for item in files:
        if item.provenance is None:
            notes.append(
                f"{item.path.name} has no provenance record ({sidecar_path(item.path).name}): its origin is unknown"
            )
    base = next((f for f in files if f.provenance is not None), None)
    for other in files:
        if base is None or base.provenance is None or other is base or other.provenance is None:
            continue
        found = [d for d in differences(base.provenance, other.provenance) if not d.startswith("different datasets")]
        # Different systems legitimately use other models and rewrites: only shared ones are compared.
        if found:
            notes.append(f"{other.path.name} vs {base.path.name}: " + "; ".join(found))
    return notes
