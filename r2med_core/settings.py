"""Operator settings: what the person running the server controls, read from the environment.

A shared server has visitors (anyone who opens a page or a link) and one operator (whoever starts
it). Everything a visitor can reach is bounded by these settings, never by a URL parameter, a form
field or an upload. The app may also pass values from ``st.secrets`` (``.streamlit/secrets.toml``)
through ``load_settings(extra=...)``; the environment wins over secrets.

| variable | meaning | default |
|---|---|---|
| ``R2MED_DATA_ROOTS`` | folders (os.pathsep-separated) where local datasets may open | ./data, $R2MED_DATA_DIR |
| ``R2MED_DATA_DIR`` | one folder holding a sub-folder per R2MED task | unset |
| ``R2MED_DATA_HOME`` | where the annotation store and uploaded runs are kept | the user data folder |
| ``R2MED_ALLOW_MODELS`` | model ids / paths (comma-separated; ``*``: any hub id, not a path) visitors may name | none |
| ``R2MED_LLM_ENDPOINTS`` | more base URLs (comma-separated; a list in secrets) that get the operator's key; | none |
|  | an entry ``NAME=URL`` (or ``NAME=URL MODEL``) is also offered by name (``llm=NAME``) | |
| ``R2MED_LLM_CONCURRENCY`` | LLM requests in flight at once: 1 for llama-cpp-python's server (it serialises), | 1 |
|  | more for vLLM or a multi-slot llama.cpp server | |
| ``R2MED_DEMO_MODE`` | ``1``: read-only public demo (no labels, uploads, live LLM, local folders, new models) | off |
| ``R2MED_UPLOAD_MAX_MB`` | largest upload accepted (annotations, runs) | 50 |
| ``R2MED_CACHE_MAX_GB`` | size cap of the disk cache (least recently used entries evicted) | no cap |
| ``R2MED_RUNS_DIR`` | a folder of TREC runs, one sub-folder per task, offered as ``run:<name>`` systems | unset |
| ``R2MED_TRUST_REMOTE_CODE`` | ``1``: presets that run their hub repository's own code (NV-Embed-v2) may load | off |
| ``R2MED_LLM_REPLY_MAX_MB`` | largest LLM reply accepted (a larger one fails its query) | 1 |
| ``R2MED_LLM_RERANK_MAX_TOKENS`` | reply bound of LLM rerankings (labelled; the benchmark sends none) | 10240 |
| ``R2MED_JUDGES_PER_DOCUMENT`` | annotators each queued document is assigned to on the Judging page | 2 |

The operator's LLM key is ``OPENAI_API_KEY`` and its server ``OPENAI_BASE_URL`` (environment or
secrets); ``r2med_core.llm.endpoints`` decides where that key may go.
| ``R2MED_DEVICE`` | where models encode: ``auto`` (CUDA, then Apple MPS, then CPU), ``cpu``, ``cuda``, ``mps`` | auto |
| ``R2MED_ENCODE_BACKEND`` | ``auto`` (ONNX on CPU if installed and faster), ``torch``, ``onnx``, ``onnx-int8`` | auto |
| ``R2MED_SWEEP_DIR`` | the ``--output-dir`` of a ``sweep``, whose grid the Leaderboard shows | unset |
| ``R2MED_COMPUTE_SECONDS`` | work estimated longer than this waits for a click on "Compute" | 2 |
| ``R2MED_LLM_PRICES`` | price per 1M tokens by model: ``gpt-4o=2.5/10 USD,…`` (input/output) | none: tokens only |
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: The encoding backends a setting may name (``hardware`` resolves "auto"). Kept here, not in
#: ``hardware``, so settings imports nothing of the package (hardware reads the cache, which reads settings).
ENCODE_BACKENDS = ("auto", "torch", "onnx", "onnx-int8", "openvino")

#: Where what users make here (labels, uploaded runs) is kept, when set; else the per-user data folder.
DATA_ENV = "R2MED_DATA_HOME"
APP_DIR = "r2med_explorer"

_TRUE = ("1", "true", "yes", "on")
#: Annotators each document of the judging queue goes to by default: two, so their agreement can be measured.
JUDGES_PER_DOCUMENT = 2


@dataclass(frozen=True)
class Price:
    """What the operator says a model costs per 1M prompt (input) and completion (output) tokens."""

    input_per_million: float
    output_per_million: float
    currency: str = ""

    def of(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million) / 1e6


def parse_prices(text: str | None) -> dict[str, Price]:
    """``R2MED_LLM_PRICES``: ``MODEL=INPUT/OUTPUT [CURRENCY]`` entries, comma-separated; raises
    ValueError naming the variable and the entry that cannot be read."""
    prices: dict[str, Price] = {}
    for entry in (text or "").split(","):
        if not entry.strip():
            continue
        model, _, value = entry.partition("=")
        parts = value.split()
        amounts = parts[0].split("/") if parts else []
        try:
            if not model.strip() or len(amounts) != 2 or len(parts) > 2:
                raise ValueError
            numbers = [float(a) for a in amounts]
            if any(not 0 <= n < float("inf") for n in numbers):
                raise ValueError
        except ValueError:
            raise ValueError(
                f"R2MED_LLM_PRICES: cannot read {entry.strip()!r}; write MODEL=INPUT/OUTPUT [CURRENCY], "
                "prices per 1M tokens, e.g. gpt-4o=2.5/10 USD"
            ) from None
        prices[model.strip()] = Price(numbers[0], numbers[1], parts[1] if len(parts) == 2 else "")
    return prices


@dataclass(frozen=True)
class Settings:
    """The operator's choices for this server (see the module docstring for the variables)."""

    data_roots: tuple[Path, ...] = ()
    data_dir: Path | None = None
    allow_models: tuple[str, ...] = ()
    demo_mode: bool = False
    upload_max_mb: float = 50.0
    cache_max_gb: float | None = None
    runs_dir: Path | None = None
    trust_remote_code: bool = False
    llm_reply_max_mb: float = 1.0

    @property
    def llm_reply_max_bytes(self) -> int:
        return int(self.llm_reply_max_mb * 1024 * 1024)
    llm_endpoints: tuple[str, ...] = ()
    llm_prices: tuple[tuple[str, Price], ...] = ()  # (model, price) pairs: Settings stays hashable
    device: str = "auto"
    encode_backend: str = "auto"
    sweep_dir: Path | None = None
    compute_seconds: float = 2.0
    judges_per_document: int = JUDGES_PER_DOCUMENT
    llm_concurrency: int = 1
    llm_rerank_max_tokens: int | None = None

    @property
    def prices(self) -> dict[str, Price]:
        """The operator's price per 1M tokens by model id (empty: costs are shown in tokens only)."""
        return dict(self.llm_prices)

    @property
    def upload_max_bytes(self) -> int:
        return int(self.upload_max_mb * 1024 * 1024)

    def model_allowed(self, model: str) -> bool:
        """True when the operator lets visitors name this model id or path (presets are checked by the caller).

        Nothing is allowed in demo mode. ``*`` allows any hub id but never a path on this machine:
        a path must be listed exactly, so a URL can never make the server open a folder of its choosing.
        """
        if self.demo_mode or not model.strip():
            return False
        if model in self.allow_models:
            return True
        return "*" in self.allow_models and not _looks_like_path(model)


def _looks_like_path(model: str) -> bool:
    """A local path rather than a hub id (``org/name``): absolute, relative, home, or present on disk."""
    if model.startswith(("/", ".", "~", "\\")) or "\\" in model or ":" in model or model.count("/") > 1:
        return True
    try:
        return Path(model).expanduser().exists()
    except (OSError, ValueError):
        return True


def _number(value: str | None, name: str, default: float | None) -> float | None:
    if value is None or not value.strip():
        return default
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return number


def load_settings(environ: Mapping[str, str] | None = None, extra: Mapping[str, object] | None = None) -> Settings:
    """Read the settings; ``extra`` (e.g. ``st.secrets``) fills what the environment leaves unset.

    Raises ValueError naming the variable when a value cannot be used.
    """
    env = dict(os.environ if environ is None else environ)
    for name, value in (extra or {}).items():
        if name.startswith("R2MED_") and name not in env and isinstance(value, (str, int, float, bool)):
            env[name] = str(value)
    data_dir = Path(env["R2MED_DATA_DIR"]).expanduser() if env.get("R2MED_DATA_DIR", "").strip() else None
    if env.get("R2MED_DATA_ROOTS", "").strip():
        roots = tuple(Path(p).expanduser() for p in env["R2MED_DATA_ROOTS"].split(os.pathsep) if p.strip())
    else:
        roots = (Path.cwd() / "data", *((data_dir,) if data_dir else ()))
    allow = tuple(m.strip() for m in env.get("R2MED_ALLOW_MODELS", "").split(",") if m.strip())
    runs_dir = Path(env["R2MED_RUNS_DIR"]).expanduser() if env.get("R2MED_RUNS_DIR", "").strip() else None
    endpoints = _endpoints(env.get("R2MED_LLM_ENDPOINTS"), (extra or {}).get("R2MED_LLM_ENDPOINTS"))
    sweep_dir = Path(env["R2MED_SWEEP_DIR"]).expanduser() if env.get("R2MED_SWEEP_DIR", "").strip() else None
    backend = env.get("R2MED_ENCODE_BACKEND", "").strip().lower() or "auto"
    if backend not in ENCODE_BACKENDS:
        raise ValueError(f"R2MED_ENCODE_BACKEND must be one of {', '.join(ENCODE_BACKENDS)}, got {backend!r}")
    return Settings(
        data_roots=roots,
        data_dir=data_dir,
        allow_models=allow,
        demo_mode=env.get("R2MED_DEMO_MODE", "").strip().lower() in _TRUE,
        upload_max_mb=_number(env.get("R2MED_UPLOAD_MAX_MB"), "R2MED_UPLOAD_MAX_MB", 50.0) or 50.0,
        cache_max_gb=_number(env.get("R2MED_CACHE_MAX_GB"), "R2MED_CACHE_MAX_GB", None),
        runs_dir=runs_dir,
        trust_remote_code=env.get("R2MED_TRUST_REMOTE_CODE", "").strip().lower() in _TRUE,
        llm_reply_max_mb=_number(env.get("R2MED_LLM_REPLY_MAX_MB"), "R2MED_LLM_REPLY_MAX_MB", 1.0) or 1.0,
        llm_endpoints=endpoints,
        device=env.get("R2MED_DEVICE", "").strip().lower() or "auto",
        encode_backend=backend,
        sweep_dir=sweep_dir,
        compute_seconds=_number(env.get("R2MED_COMPUTE_SECONDS"), "R2MED_COMPUTE_SECONDS", 2.0) or 2.0,
        llm_prices=tuple(parse_prices(env.get("R2MED_LLM_PRICES")).items()),
        judges_per_document=_count(env, "R2MED_JUDGES_PER_DOCUMENT", JUDGES_PER_DOCUMENT),
        llm_concurrency=_count(env, "R2MED_LLM_CONCURRENCY", 1),
        llm_rerank_max_tokens=_whole(env.get("R2MED_LLM_RERANK_MAX_TOKENS"), "R2MED_LLM_RERANK_MAX_TOKENS"),
    )


def _whole(value: str | None, name: str) -> int | None:
    """A positive whole number, or None when unset; ValueError naming the variable otherwise."""
    number = _number(value, name, None)
    if number is not None and number != int(number):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return None if number is None else int(number)


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    """The variable ``name`` as a whole number from 1 to 1000; ValueError naming it otherwise."""
    text = env.get(name, "").strip()
    if not text:
        return default
    if not text.isdecimal() or len(text) > 4 or not 1 <= int(text) <= 1000:
        raise ValueError(f"{name} must be a whole number from 1 to 1000, got {text[:20]!r}")
    return int(text)


def _endpoints(from_env: str | None, from_secrets: object) -> tuple[str, ...]:
    """``R2MED_LLM_ENDPOINTS``: comma-separated in the environment, a list (or a string) in secrets."""
    if from_env is not None and from_env.strip():
        values: list[object] = list(from_env.split(","))
    elif isinstance(from_secrets, str):
        values = list(from_secrets.split(","))
    elif isinstance(from_secrets, (list, tuple)):
        values = list(from_secrets)
    else:
        values = []
    return tuple(str(v).strip() for v in values if str(v).strip())


def user_data_dir() -> Path:
    """The per-user data folder (the platformdirs rule, without the dependency)."""
    home = Path.home()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = home / "Library" / "Application Support"
    else:
        xdg = os.environ.get("XDG_DATA_HOME", "")
        base = Path(xdg) if xdg and Path(xdg).is_absolute() else home / ".local" / "share"
    return base / APP_DIR


def user_data_home() -> Path:
    """``$R2MED_DATA_HOME``, else the per-user data folder: the annotation store and uploaded runs live here."""
    configured = os.environ.get(DATA_ENV)
    return Path(configured).expanduser() if configured else user_data_dir()
