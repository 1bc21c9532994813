"""Model roles: what each model a system loads or asks is for, and the server's policy for it.

A kind declares its models as ``(role, model)`` pairs (``SystemKind.models``); what a role means to
the rest of the app is answered by the ``ModelRole`` registered under that name, so the code that
vets a link (``server.access``), records provenance (``reporting.provenance``), moves cache entries
between machines (``server.portable``) and watches a background job (``compute.jobs``) asks the
role and never branches on its name. A model of a role nobody registered is refused on a server.

Built in, each in the module of the kind that loads it: ``dense`` (an encoder, ``kinds/dense.py``),
``reranker`` (a cross-encoder, ``kinds/rerank.py``) and ``llm`` (asked on the operator's endpoint,
``kinds/llm_rerank.py``). Why a module beside ``base`` and not a package of roles: a role is a few
lines of policy about the models of the kind that introduces it, so it lives in that kind's module
(a new kind with a new role stays one file); only the contract and the registry are shared.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Container
from typing import ClassVar, TypeVar

from r2med_core.data import Dataset
from r2med_core.kinds.base import RUNS_CACHE, Registry, registered_kinds
from r2med_core.retrieval.encoding import EncodeStatus
from r2med_core.settings import Settings

#: Polled while a background job runs: the structured progress (documents, docs/s, ETA) of its work.
ProgressReader = Callable[[], EncodeStatus | None]

class ModelRole(ABC):
    """One role a model plays in a system. Subclass, set ``name``, implement ``refusal``, decorate
    with ``@register_role``; override the rest where a model of the role differs from the defaults."""

    #: The role in a kind's ``models()`` pairs (a short word).
    name: ClassVar[str]
    #: The disk-cache kinds its models' entries make (embeddings, scores): they may travel between
    #: machines (``server.portable``), e.g. encoded on a GPU box, browsed on a laptop.
    cache_kinds: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def refusal(self, model: str, settings: Settings) -> str | None:
        """Why a visitor may not make this server load or ask ``model`` in this role, or None when
        it may (the operator's settings decide; ``preset_or_allowed`` is the usual rule)."""

    def provenance_ids(self, model: str) -> list[str]:
        """The model ids a result's provenance records for ``model`` (a preset resolved to the ids it loads)."""
        return [model]

    def progress_reader(self, dataset: Dataset, model: str) -> ProgressReader | None:
        """How a background job reads the progress of this model's work on ``dataset`` (documents,
        docs/s, ETA), or None when the job's own fraction says all there is."""
        return None


def preset_or_allowed(model: str, presets: Container[str], settings: Settings) -> str | None:
    """The usual rule: a preset runs; any other id or path only when the operator allows it
    (``R2MED_ALLOW_MODELS``, see ``Settings.model_allowed``), so a link never picks a download or a path."""
    if model in presets or settings.model_allowed(model):
        return None
    if settings.demo_mode:
        return "this read-only demo runs only the preset models"
    return "this server runs only the preset models and the ones its operator allows (R2MED_ALLOW_MODELS)"


# --------------------------------------------------------------------------- registry

_ROLES: Registry[ModelRole] = Registry("model role")
R = TypeVar("R", bound=type[ModelRole])


def register_role(cls: R) -> R:
    """Class decorator: make a model role known (one instance per role name)."""
    _ROLES.add(cls)
    return cls


def unregister_role(name: str) -> None:
    """Forget a role (for tests that register one of their own)."""
    _ROLES.found.pop(name, None)


def registered_roles() -> list[ModelRole]:
    """Every registered role, in the order registered."""
    return list(_ROLES.found.values())


def model_role(name: str) -> ModelRole:
    return _ROLES.named(name)


def cache_kinds() -> tuple[str, ...]:
    """The cache kinds whose entries may travel between machines: stored runs, what each system kind
    makes itself (a BM25 index) and what each model role's models make (embeddings, scores)."""
    found = [RUNS_CACHE, *(c for kind in registered_kinds() for c in kind.cache_kinds)]
    found += [c for role in registered_roles() for c in role.cache_kinds]
    return tuple(dict.fromkeys(found))
