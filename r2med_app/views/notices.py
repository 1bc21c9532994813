"""The notes that say a number or a dataset is not the benchmark's: the fidelity badge beside a local
number whose setting differs (live rewrites judged by the prompts and sampling they were made with) and
the banner over illustrative demo data. Kept together so every page labels the same things the same way.
"""

from __future__ import annotations

import streamlit as st

from r2med_app.views.datasets import base_dataset
from r2med_app.views.markup import md
from r2med_core import Dataset
from r2med_core.analysis.fidelity import fidelity
from r2med_core.llm.generation import live_generation_settings, live_rewrite_options


def fidelity_badge(dataset: Dataset, system: str, *, reranker: str | None = None, keep_tail: bool = False) -> str:
    """A short note for a local number whose setting is not the benchmark's ("" when it is), saying how
    it differs; live rewrites are judged by the prompts and sampling they were generated with."""
    base = base_dataset()
    live = {
        rw: settings
        for rw in live_rewrite_options(base)
        if rw not in base.rewrites and (settings := live_generation_settings(base, *rw)) is not None
    }
    found = fidelity(
        system,
        dataset_name=dataset.name,
        reranker=reranker,
        keep_tail=keep_tail,
        live=live,
        provenance=base.rewrite_provenance,
    )
    return "" if found.is_benchmark else f"{found.badge()}: " + "; ".join(found.differences)


def demo_banner(dataset: Dataset) -> None:
    if dataset.is_demo:
        notice = dataset.meta.get("notice", "Illustrative demo data written for R2MED Explorer.")
        st.info(f"**Demo data.** {md(notice)}", icon="ℹ️")
