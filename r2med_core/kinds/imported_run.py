"""``run:<name>``: a run made elsewhere and imported (see ``imported_runs``); read from its file, never
computed, so it ranks only the dataset's own queries and takes no rewrite."""

from __future__ import annotations

from typing import Any

from r2med_core.data import Dataset
from r2med_core.imported_runs import RUN_PREFIX, is_run_name, load_run, run_digest
from r2med_core.kinds.base import Parse, SpecError, SystemKind, SystemSpec, done, register
from r2med_core.progress import Progress
from r2med_core.runs import Run


def _imported(function: Any, dataset: Dataset, name: str) -> Any:
    """Look an imported run up by name; an unknown name is a SpecError like any unknown system."""
    try:
        return function(dataset, name)
    except KeyError as err:
        raise SpecError(err.args[0]) from None


@register
class ImportedRunKind(SystemKind):
    name = "run"
    grammar = f"{RUN_PREFIX}<name> (an imported run)"
    priority = 30
    stores_run = False  # it is its file

    def parse(self, text: str, parse: Parse) -> SystemSpec | None:
        if not text.startswith(RUN_PREFIX):
            return None
        name = text[len(RUN_PREFIX) :]
        if "+" in name:
            raise SpecError(f"{text!r}: an imported run is fixed; it cannot be combined with a rewrite")
        if not is_run_name(name):
            raise SpecError(
                f"{text!r}: a run name is letters, digits, '.', '_' and '-' (at most 64), as listed under Your runs"
            )
        return SystemSpec("run", name)

    def format(self, spec: SystemSpec) -> str:
        return RUN_PREFIX + spec.name

    def label(self, spec: SystemSpec) -> str:
        return f"Run {spec.name} (imported)"

    def key_parts(self, dataset: Dataset, spec: SystemSpec, k: int) -> dict[str, Any]:
        return {"run": _imported(run_digest, dataset, spec.name)}

    def compute(self, dataset: Dataset, spec: SystemSpec, k: int, progress: Progress | None) -> Run:
        imported = _imported(load_run, dataset, spec.name).run
        done(progress, spec, "loaded")
        return Run(str(spec), {q: r[:k] for q, r in imported.rankings.items()}, imported.seconds, imported.usage)

    def no_text_reason(self, spec: SystemSpec) -> str:
        return f"{spec.label} is a fixed run of the dataset's own queries: it cannot search typed text"

    def differences(self, spec: SystemSpec, dataset_name: str | None) -> list[str]:
        return ["a run made elsewhere: its setting is not known"]

    def estimate_seconds(self, dataset: Dataset, spec: SystemSpec, k: int) -> float:
        return 0.1  # read from its file, never computed
