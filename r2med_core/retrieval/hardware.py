"""Which device encodes, in which precision, with how large batches: decided once from what is there.

``auto`` picks CUDA, then Apple MPS, then the CPU. On a GPU the model runs in fp16 (half the memory,
about twice the speed; embeddings differ from fp32 in the 4th decimal, which never changes an exact
top-100 in practice) and the batch size follows the free memory; on the CPU, 32.

The encoding backend's ``auto`` is decided here too: ONNX Runtime on a CPU when it is installed and
``benchmarks/bench_encode.py`` measured it faster than torch on this machine (its verdict is kept in
the cache, ``backend_speed.json``), else torch; on a GPU always torch. On this project's 2-core
reference machine torch measured faster (README: Speed), so there ``auto`` is torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: Encoding backends (defined with the settings that name them): ``auto`` resolves per device
#: (``resolve_backend``); ``onnx-int8`` is quantised ONNX.
from r2med_core.settings import ENCODE_BACKENDS  # noqa: F401  (re-exported for callers of hardware)

DEVICES = ("auto", "cpu", "cuda", "mps")
#: What ``auto`` may run on a CPU instead of torch. fp32 ONNX, never int8: its vectors match torch's
#: to float error, so it ranks as the benchmark's models do (int8 is opt-in).
AUTO_CPU_BACKEND = "onnx"
_SPEED_FILE = "backend_speed.json"


class DeviceError(ValueError):
    """A device that does not exist here; the message says which do."""


@dataclass(frozen=True)
class Hardware:
    """Where and how to encode."""

    device: str  # "cpu", "cuda", "cuda:1", "mps"
    fp16: bool
    batch_size: int

    @property
    def kind(self) -> str:
        return self.device.split(":", 1)[0]


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _mps_available() -> bool:
    try:
        import torch

        return bool(torch.backends.mps.is_available())
    except Exception:
        return False


def available_devices() -> list[str]:
    """The devices this machine has, best first (the CPU always)."""
    return [d for d, ok in (("cuda", _cuda_available()), ("mps", _mps_available())) if ok] + ["cpu"]


def resolve_device(requested: str | None = "auto") -> str:
    """``auto`` (or None) → the best available device; an explicit device is checked to exist."""
    requested = (requested or "auto").strip().lower()
    kind = requested.split(":", 1)[0]
    if kind not in DEVICES:
        raise DeviceError(f"unknown device {requested!r}: use one of {', '.join(DEVICES)} (or cuda:N)")
    if kind == "auto":
        return available_devices()[0]
    if requested == "cpu":  # always there: no need to import torch (seconds) to check
        return requested
    if kind not in available_devices():
        raise DeviceError(f"device {requested!r} is not available here (available: {', '.join(available_devices())})")
    return requested


def batch_size_for(device: str, base: int = 32, free_bytes: int | None = None) -> int:
    """A batch size that fits: ``base`` on CPU/MPS; on CUDA, 16 per free GiB (fp16), from 8 to 512."""
    if not device.startswith("cuda"):
        return base
    if free_bytes is None:
        try:
            import torch

            index = int(device.split(":", 1)[1]) if ":" in device else 0
            free_bytes = int(torch.cuda.mem_get_info(index)[0])
        except Exception:
            return base
    gib = free_bytes / 1024**3
    return int(min(512, max(8, 16 * gib)))


def detect(requested: str | None = "auto") -> Hardware:
    """The device, precision and batch size to encode with."""
    device = resolve_device(requested)
    gpu = device.startswith("cuda")
    return Hardware(device=device, fp16=gpu, batch_size=batch_size_for(device))


def onnx_importable() -> bool:
    """True when ONNX Runtime and the ``onnx`` package (for the export) can be imported."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except Exception:  # missing, or a broken install: torch it is
        return False
    return True


def accelerable(model: Any) -> bool:
    """Whether ``auto`` may run this ``DenseModel`` through ONNX: a sentence-transformers encoder of at
    most 512 tokens (BERT-sized; a 7B decoder would not fit ONNX's 2 GB file or a CPU), without remote
    code or an instruction left out of the pooling (the ONNX encoder pools every token)."""
    return (
        model.backend == "sentence-transformers"
        and not model.trust_remote_code
        and model.pool_prompt
        and model.pooling != "lasttoken"
        and (model.max_length or 512) <= 512
    )


def record_backend_speeds(docs_per_s: dict[str, float]) -> None:
    """Keep the CPU documents/s ``bench_encode`` measured per backend, for ``auto`` on this machine."""
    from r2med_core.cache import atomic_write_text, cache_root

    payload = {name: round(float(speed), 3) for name, speed in docs_per_s.items()}
    atomic_write_text(cache_root() / _SPEED_FILE, json.dumps(payload, indent=1, sort_keys=True))


def onnx_measured_faster() -> bool:
    """True when this machine's last ``bench_encode`` found ONNX faster than torch (no measurement: no)."""
    from r2med_core.cache import cache_root

    try:
        speeds = json.loads((cache_root() / _SPEED_FILE).read_text(encoding="utf-8"))
        return float(speeds[AUTO_CPU_BACKEND]) > float(speeds["torch"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


def resolve_backend(requested: str | None, device: str, accelerable: bool = True) -> str:
    """The backend that will encode: an explicit choice as is; ``auto`` (or None) → ONNX on a CPU when
    ONNX Runtime is importable, measured faster here and the model can be exported (``accelerable``),
    else torch."""
    requested = (requested or "auto").strip().lower()
    if requested != "auto":
        return requested
    if device.split(":", 1)[0] != "cpu" or not accelerable or not onnx_importable():
        return "torch"
    return AUTO_CPU_BACKEND if onnx_measured_faster() else "torch"
