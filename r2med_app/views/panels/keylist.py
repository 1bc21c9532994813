"""The list-judging keyboard component: a Streamlit components-v1 iframe of plain HTML and JS
(``views/components/list_judge/index.html``, no build step). Streamlit widgets have no key handling,
so grading by keyboard needs this small two-way component."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit.components.v1 as components

_FOLDER = Path(__file__).resolve().parents[1] / "components" / "list_judge"
_component = components.declare_component("r2med_list_judge", path=str(_FOLDER))


def keyboard_list(
    rows: list[dict[str, Any]],
    *,
    acked: list[str],
    errors: dict[str, str],
    enabled: bool,
    reason: str,
    clock: int,
    key: str,
    single: bool = False,
    memory: str = "",
) -> Any:
    """Draw the rows; return the component's value (``{"events": [...]}``, or None before any key). ``clock``
    is the server's time (``list_judging.now_ms``): each event carries its keypress's time on that clock.
    ``single`` (the Judging page): one row, the document shown, which ``s`` skips. ``memory``: the name the
    browser keeps unacknowledged keypresses under (localStorage) to send them again after a server restart
    or a reload; pages name it after the widget key, so a list only ever gets back its own."""
    return _component(
        rows=rows,
        acked=acked,
        errors=errors,
        enabled=enabled,
        reason=reason,
        clock=clock,
        single=single,
        memory=memory,
        key=key,
        default=None,
    )
