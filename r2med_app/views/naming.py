"""What a system is called on screen and what it can do with typed text: the label says where a rewrite
it runs on was written by hand, so no page shows an illustration as a model's output.
"""

from __future__ import annotations

from r2med_app.views.datasets import base_dataset
from r2med_core import DataError, Dataset
from r2med_core.systems import SpecError, parse_system, system_words


def system_label(name: str) -> str:
    """A system's label, marked where a rewrite it runs on was written by hand (``systems.system_words``)."""
    try:
        dataset: Dataset | None = base_dataset()
    except DataError:  # no dataset in view (a broken folder): the label without the dataset's facts
        dataset = None
    return system_words(name, dataset)


def searches_text(name: str) -> bool:
    """Whether a system can rank typed text (imported runs cannot)."""
    try:
        return parse_system(name).searches_text
    except SpecError:
        return False
