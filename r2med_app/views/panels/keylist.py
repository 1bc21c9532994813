"""The list-judging keyboard component: a Streamlit components-v1 iframe of plain HTML and JS
(``views/components/list_judge/index.html``, no build step). Streamlit widgets have no key handling,
so grading by keyboard needs this small two-way component. Judge a list and the Judging page both use it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit.components.v1 as components

from r2med_core.judging.list_judging import GradeEvent, SaveOnce, now_ms

_FOLDER = Path(__file__).resolve().parents[1] / "components" / "list_judge"
_component = components.declare_component("r2med_list_judge", path=str(_FOLDER))


def keyboard_list(
    rows: list[dict[str, Any]],
    *,
    events: list[GradeEvent],
    ledger: SaveOnce,
    enabled: bool,
    reason: str,
    key: str,
    single: bool = False,
) -> Any:
    """Draw the rows; return the component's value (``{"events": [...]}``, or None before any key).

    ``events`` are the ones the component sent; those ``ledger`` handled are acknowledged (a refused one
    with its reason), the rest stay pending in the browser — kept in its localStorage under ``key`` until
    acknowledged, so a server restart or a reload loses no keypress. The component gets the server's
    clock (``list_judging.now_ms``): each event carries its keypress's time on it. ``single`` (the Judging
    page): one row, the document shown, which ``s`` skips."""
    handled = [o for o in (ledger.outcome(e.event_id) for e in events) if o is not None]
    return _component(
        rows=rows,
        acked=[o.event.event_id for o in handled],
        errors={o.event.event_id: o.error for o in handled if o.status == "refused"},
        enabled=enabled,
        reason=reason,
        clock=now_ms(),
        single=single,
        memory=key,
        key=key,
        default=None,
    )
