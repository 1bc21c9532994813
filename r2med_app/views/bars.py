"""Progress bars on a page: long work the page waits for (a download, a rewrite, a search, a cheap run)
reports through the core's ``Progress`` callback, and this draws it as an ``st.progress`` bar.

A module of its own because both the dataset loader (a hub download) and the compute glue (``work``)
draw bars, and the compute glue reads the dataset loader: a bar here keeps that one way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from r2med_core.progress import Progress

T = TypeVar("T")


def bar(holder: DeltaGenerator, label: str) -> Progress:
    """A ``Progress`` callback drawing into ``holder`` (an ``st.empty()``); the message, else ``label``."""

    def report(fraction: float, message: str) -> None:
        holder.progress(min(max(fraction, 0.0), 1.0), text=message or label)

    return report


def with_progress(label: str, work: Callable[[Progress], T]) -> T:
    """Run long work with a bar drawn at once ("Computing …": a model may take seconds to load before its
    first report) and gone when the work ends; drawn outside any cached function (Streamlit would replay
    a bar drawn inside one on every cache hit)."""
    holder = st.empty()
    holder.progress(0.0, text=f"Computing {label} …")
    try:
        return work(bar(holder, label))
    finally:
        holder.empty()
