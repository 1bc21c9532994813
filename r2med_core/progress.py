"""Progress reporting shared by every long operation (indexing, encoding, downloads).

Core code never prints progress itself: it calls a ``Progress`` callback, so the CLI can pass a
tqdm bar and the app can pass ``st.progress`` without the core knowing about either.
"""

from __future__ import annotations

from collections.abc import Callable

#: ``progress(fraction, message)`` with ``fraction`` in [0, 1].
Progress = Callable[[float, str], None]


def no_progress(fraction: float, message: str) -> None:
    """The default callback: ignore progress."""


def notify(progress: Progress | None, fraction: float, message: str) -> None:
    """Call ``progress`` if given, clamping ``fraction`` to [0, 1]."""
    if progress is not None:
        progress(min(1.0, max(0.0, fraction)), message)


def format_seconds(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``: a duration as a person reads it."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
