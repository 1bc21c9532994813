"""Which models and systems a visitor may name (in a link or a form) on a shared server.

Each model a system loads or asks is vetted by its role (``r2med_core.kinds.roles``): presets are
always allowed, and any other model id or path (``dense:<id>``, a cross-encoder id) runs only when
the operator allows it (``R2MED_ALLOW_MODELS``, see ``Settings.model_allowed``), so a link can never
make the server download a model of its choosing or open a path on its disk; a model of a role no
kind registered is refused. A link may also add only a few fusions, each of systems already offered,
never nested.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from r2med_core.kinds.roles import model_role
from r2med_core.settings import Settings
from r2med_core.systems import SpecError, parse_system

#: At most this many systems beyond the offered ones (fusions and allowed models) come from one link.
MAX_LINK_SYSTEMS = 4


@dataclass
class Vetted:
    """The names kept, in order, and one note per refused name for the visitor."""

    kept: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def model_refusal(role: str, model: str, settings: Settings) -> str | None:
    """Why a model id or path may not run here in this role (a kind's ``models()`` pair), or None
    when it may; the role's ``refusal`` says, and a role nobody registered is refused."""
    try:
        policy = model_role(role)
    except SpecError:
        return f"this server runs no {role} models"
    return policy.refusal(model, settings)


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
        if reason := model_refusal(role, model, settings):
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
