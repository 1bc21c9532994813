"""The list-judging keyboard component: a Streamlit components-v1 iframe of plain HTML and JS
(``views/components/list_judge/index.html``, no build step). Streamlit widgets have no key handling,
so grading by keyboard needs this small two-way component. Judge a list and the Judging page both use it."""

from __future__ import annotations

import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any

import streamlit as st
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
    clock (``list_judging.now_ms``): each event carries its keypress's time on it, and a token of this
    server session: a new one (a restarted server) gets the pending keys at once. ``single`` (the Judging
    page): one row, the document shown, which ``u`` says unsure of and ``s`` skips."""
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
        session=_session(),
        key=key,
        default=None,
    )


def _session() -> str:
    """A token of this server session: the component sends what it holds at once to a new one."""
    token: str = st.session_state.setdefault("keylist_session", secrets.token_hex(8))
    return token


#: How often ``rerun_after_reconnect``'s empty fragment runs: rarely, since it only has to exist.
_RECONNECT_MARK = timedelta(minutes=10)


@st.fragment(run_every=_RECONNECT_MARK)
def rerun_after_reconnect() -> None:
    """An empty fragment that reruns by itself, on the page beside the keyboard's fragment, so that a tab
    which reconnects in place to a restarted server reruns the whole page, and the new server session
    sees the keys the browser still holds.

    Why: the keyboard lives in a fragment (a key reruns only it). A restarted server's new session knows
    no fragment until the whole page ran once, and drops a fragment's rerun request silently (Streamlit's
    ``AppSession.request_rerun``: "the fragment … does not exist anymore"); so the keys the component sends
    again are never seen. Streamlit's frontend reruns the whole page on a reconnect only when the last run
    was a fragment's, or when the page has a fragment that reruns by itself (``run_every``): after a full
    run (a name typed, a page opened) only the second holds. This fragment makes it hold. It draws nothing.
    """
