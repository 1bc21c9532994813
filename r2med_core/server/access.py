"""Which models and systems a visitor may name (in a link or a form) on a shared server.

Presets are always allowed. Any other model id or path (``dense:<id>``, a cross-encoder id) runs
only when the operator allows it (``R2MED_ALLOW_MODELS``, see ``Settings.model_allowed``), so a
link can never make the server download a model of its choosing or open a path on its disk. A link
may also add only a few fusions, each of systems already offered, never nested.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from r2med_core.retrieval.dense import PRESETS
from r2med_core.retrieval.rerank import RERANKER_PRESETS
from r2med_core.settings import Settings
from r2med_core.systems import SpecError, parse_system

#: At most this many systems beyond the offered ones (fusions and allowed models) come from one link.
MAX_LINK_SYSTEMS = 4


@dataclass
class Vetted:
    """The names kept, in order, and one note per refused name for the visitor."""

    kept: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def model_refusal(model: str, settings: Settings) -> str | None:
    """Why a dense model id or path may not run here, or None when it may (a preset or allowed)."""
    if model in PRESETS or settings.model_allowed(model):
        return None
    if settings.demo_mode:
        return "this read-only demo runs only the preset models"
    return "this server runs only the preset models and the ones its operator allows (R2MED_ALLOW_MODELS)"


def reranker_refusal(model: str, settings: Settings) -> str | None:
    """Why a cross-encoder may not run here, or None when it may (none, a preset, or allowed)."""
    if not model or model in RERANKER_PRESETS or settings.model_allowed(model):
        return None
    return model_refusal(model, settings)


def system_refusal(name: str, settings: Settings, offered: Iterable[str] = ()) -> str | None:
    """Why a system named by a visitor may not run here, or None. The systems it combines or wraps must
    be offered or allowed themselves (a fusion's: plain systems, offered or allowed; see each kind's
    ``link_refusal``), and every model it loads must be a preset or allowed."""
    try:
        spec = parse_system(name)
    except (SpecError, RecursionError):
        return "not a system name this app knows"
    reason = spec.system_kind.link_refusal(spec, set(offered), lambda member: system_refusal(member, settings))
    if reason:
        return reason
    for role, model in spec.models():
        if role == "llm":  # sent to the operator's endpoint only, and only after a click
            reason = "this read-only demo runs no LLM" if settings.demo_mode else None
        else:
            reason = model_refusal(model, settings) if role == "dense" else reranker_refusal(model, settings)
        if reason:
            return reason
    return None


def vet_link_systems(names: Iterable[str], settings: Settings, offered: Iterable[str]) -> Vetted:
    """Keep the systems a link may add (see the module docstring); a note for each one dropped.

    ``offered`` are the systems the app offers anyway; they are kept without counting.
    """
    offered = list(offered)
    result = Vetted()
    added = 0
    for name in dict.fromkeys(names):
        if name in offered:
            result.kept.append(name)
            continue
        reason = system_refusal(name, settings, offered)
        if reason is None and added >= MAX_LINK_SYSTEMS:
            reason = f"a link may add at most {MAX_LINK_SYSTEMS} systems"
        if reason is None:
            result.kept.append(name)
            added += 1
        else:
            result.notes.append(f"{_shown(name)}: {reason}")
    return result


def _shown(name: str, limit: int = 80) -> str:
    """A refused name as it is quoted back to the visitor: short (a long nested name is cut)."""
    return name if len(name) <= limit else name[: limit - 1] + "…"
