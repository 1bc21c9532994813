"""The app's look beyond Streamlit's theme: the highlighted document text, the layout for narrow windows
and narrow containers, and the sidebar folded once on a narrow window. Fixed strings only (nothing from a
dataset or a visitor), drawn once per run by the router; the widths are named so the browser tests that
check the layout measure against the same numbers.
"""

from __future__ import annotations

import streamlit as st

#: The width under which the app lays itself out for a narrow window (a laptop half, a tablet).
NARROW_PX = 1000
#: The width of its own container under which a pair of panels holding tables (the explorer's gold |
#: retrieved, the Annotations page's labels | chart) stacks: each half then has room for its table whole
#: (at 1440 px with the sidebar open the main column is about 980 px, halves of 480 px cut the gold table's
#: last column and left the retrieved preview a few words wide). Measured on the container, not the window,
#: so opening or folding the sidebar counts.
WIDE_PX = 1100
_STYLE = f"""<style>
.r2-text {{ line-height: 1.55; font-size: 0.95rem; max-height: 24rem; overflow-y: auto; }}
.r2-text mark {{ background: #fde68a; color: inherit; padding: 0 2px; border-radius: 3px; }}
@media (max-width: {NARROW_PX}px) {{
  /* metric cards: "0.000 → 0.333" fits instead of "0.00…" */
  [data-testid="stMetricValue"] {{ font-size: 1.35rem; }}
  /* side-by-side panels (gold | retrieved, two systems) stack */
  [class*="st-key-r2-stack"] [data-testid="stHorizontalBlock"] {{ flex-wrap: wrap; }}
  [class*="st-key-r2-stack"] [data-testid="stColumn"] {{ min-width: 100%; }}
}}
[class*="st-key-r2-wide"] {{ container-type: inline-size; }}
@container (max-width: {WIDE_PX}px) {{
  [class*="st-key-r2-wide"] [data-testid="stHorizontalBlock"] {{ flex-wrap: wrap; }}
  [class*="st-key-r2-wide"] [data-testid="stColumn"] {{ min-width: 100%; }}
}}
/* a popover's table (Provenance: hashes, paths, versions) wraps its long values inside the popover */
[data-testid="stPopoverBody"] [data-testid="stTable"] td {{ overflow-wrap: anywhere; }}
</style>"""
# Streamlit keeps its 300 px sidebar open at any width over 768 px; at NARROW_PX and under (where the CSS
# above stacks the panels: `max-width` includes it) it is folded once per browser tab (the visitor can open
# it again), so a 1000 px window has a table's room. A fixed script: nothing from a dataset or a visitor in it.
_NARROW_SCRIPT = f"""<script>
(() => {{
  if (window.innerWidth > {NARROW_PX} || sessionStorage.getItem("r2-sidebar-folded")) return;
  const fold = (tries) => {{
    const button = document.querySelector('[data-testid="stSidebarCollapseButton"] button');
    if (button && button.getAttribute("aria-expanded") === "true") {{
      sessionStorage.setItem("r2-sidebar-folded", "1");
      button.click();
    }} else if (tries > 0) {{
      setTimeout(() => fold(tries - 1), 200);
    }}
  }};
  fold(25);
}})();
</script>"""


def style() -> None:
    """Styles for highlighted document text and narrow windows, and the sidebar folded under
    ``NARROW_PX`` (fixed strings: nothing from a dataset goes in here)."""
    st.html(_STYLE)
    st.html(_NARROW_SCRIPT, unsafe_allow_javascript=True)
