"""A CPU encoder (chosen by ``auto`` where measured faster): the model's transformer exported to ONNX
(optionally int8) and run by ONNX Runtime, with the model's own tokenizer, pooling and normalisation.

sentence-transformers' own ``backend="onnx"``/``"openvino"`` need ``optimum``/``optimum-intel``, whose
releases pin ``transformers<5`` and so cannot be installed next to this project's transformers; the
export here uses ``torch.onnx`` and ``onnxruntime`` only (``pip install onnxruntime onnx``). The
exported files are cached (``cached_indexes/onnx/``), keyed by the model's files, so the export runs
once. Whether it is worth it is measured by ``benchmarks/bench_encode.py`` (README: Speed).
"""

from __future__ import annotations

import os
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from r2med_core.cache import cache_root, fingerprint

ACCELERATED = ("onnx", "onnx-int8")
_EXPORT_LOCK = threading.Lock()


class BackendUnavailable(RuntimeError):
    """The backend's package is missing or cannot run this model; the message says what to install."""


class OnnxEncoder:
    """The subset of ``SentenceTransformer`` the retriever uses (``encode``, ``max_seq_length``, dimension)."""

    def __init__(self, session: Any, tokenizer: Any, pooling: str, normalize: bool, dim: int, max_len: int) -> None:
        self.session, self.tokenizer = session, tokenizer
        self.pooling, self.normalize, self.dim = pooling, normalize, dim
        self.max_seq_length = max_len
        self.inputs = [i.name for i in session.get_inputs()]

    def get_embedding_dimension(self) -> int:
        return self.dim

    def encode(
        self,
        texts: list[Any],
        batch_size: int = 32,
        normalize_embeddings: bool = False,
        convert_to_numpy: bool = True,
        show_progress_bar: bool = False,
        prompt: str | None = None,
        **_: Any,
    ) -> np.ndarray:
        if prompt:  # as sentence-transformers does: a prefix of the text, or of a pair's first half
            texts = [(prompt + t[0], *t[1:]) if isinstance(t, tuple) else prompt + t for t in texts]
        order = np.argsort([-sum(map(len, t)) if isinstance(t, tuple) else -len(t) for t in texts], kind="stable")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            chosen = order[start : start + batch_size]
            batch = self.tokenizer(
                [texts[i] for i in chosen],
                padding=True,
                truncation=True,
                max_length=self.max_seq_length,
                return_tensors="np",
            )
            feed = {name: batch[name].astype(np.int64) for name in self.inputs}
            hidden = self.session.run(None, feed)[0]
            out[chosen] = _pool(hidden, batch["attention_mask"], self.pooling)
        if self.normalize or normalize_embeddings:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


def _pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    if mode == "cls":
        return hidden[:, 0]
    if mode == "lasttoken":
        last = mask.sum(axis=1) - 1
        return hidden[np.arange(len(hidden)), last]
    weights = mask[..., None].astype(np.float32)
    return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)


def _pooling_of(model: Any, override: str | None) -> tuple[str, bool]:
    """The pooling mode and whether the model normalises, read from its sentence-transformers modules."""
    from sentence_transformers.sentence_transformer import modules

    mode, normalize = override or "mean", False
    for module in model:
        if isinstance(module, modules.Pooling) and override is None:
            mode = module.get_config_dict().get("pooling_mode", "mean")
        if isinstance(module, modules.Normalize):
            normalize = True
    if mode not in ("mean", "cls", "lasttoken"):
        raise BackendUnavailable(f"pooling {mode!r} is not supported by the ONNX encoder; use the torch backend")
    return mode, normalize


def _export(model: Any, target: Path, int8: bool) -> None:
    """Export the transformer to ONNX (dynamic batch and length), then quantise weights to int8 if asked."""
    import torch

    transformer = model[0]
    sample = transformer.tokenizer(["export", "a longer export sample"], padding=True, return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]

    class Hidden(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *tensors: Any) -> Any:
            return self.inner(**dict(zip(names, tensors))).last_hidden_state

    wrapper = Hidden(transformer.auto_model).eval()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer notes about shapes that are dynamic axes here
        fp32 = Path(tmp) / "model.onnx"
        with torch.no_grad():
            torch.onnx.export(
                wrapper,
                tuple(sample[n] for n in names),
                str(fp32),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes={n: {0: "batch", 1: "length"} for n in [*names, "last_hidden_state"]},
                opset_version=17,
                dynamo=False,
            )
        final = fp32
        if int8:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            final = Path(tmp) / "model-int8.onnx"
            quantize_dynamic(str(fp32), str(final), weight_type=QuantType.QInt8)
        os.replace(final, target)


def load_accelerated(
    location: str, backend: str, device: str = "cpu", pooling: str | None = None, *, revision: str = "main"
) -> OnnxEncoder:
    """An ONNX Runtime encoder for a sentence-transformers model folder or hub id (CPU only).

    ``revision`` identifies the weights (``retrieval.dense.model_revision``) and keys the exported
    file; the caller passes it so this module never imports the dense retriever (which imports it).
    """
    if backend not in ACCELERATED:
        raise BackendUnavailable(
            f"backend {backend!r} is not available: use torch, onnx or onnx-int8 (OpenVINO needs optimum-intel, "
            "which requires transformers<5.6)"
        )
    if not device.startswith("cpu"):
        raise BackendUnavailable(f"the {backend} backend runs on the CPU; on {device} use the torch backend")
    try:
        import onnxruntime as ort
    except ImportError:
        raise BackendUnavailable(f"the {backend} backend needs `pip install onnxruntime onnx`") from None
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(location, device="cpu")
    mode, normalize = _pooling_of(model, pooling)
    dim = model.get_embedding_dimension()
    if dim is None:  # the ONNX encoder sizes its output by it
        raise BackendUnavailable(f"{location} does not say its embedding dimension; use the torch backend")
    import torch

    target = cache_root() / "onnx" / fingerprint(location, revision, backend, torch.__version__)
    path = target / ("model-int8.onnx" if backend == "onnx-int8" else "model.onnx")
    with _EXPORT_LOCK:
        if not path.is_file():
            _export(model, path, int8=backend == "onnx-int8")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return OnnxEncoder(session, model[0].tokenizer, mode, normalize, dim, int(model.max_seq_length or 512))
