"""R2MED Explorer: the router. It draws the shared sidebar, then the page the URL names.

Run it with ``r2med app`` (installed) or ``streamlit run streamlit_app.py`` (a checkout); it opens on the
embedded demo data. Pages are named by absolute paths (``routes.page``), so the router works whichever script
started it.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

HERE = Path(__file__).resolve().parent
# A local image, not a ":material/…:" icon: Streamlit fetches those favicons from fonts.gstatic.com.
ICON = HERE / "views" / "assets" / "icon.png"
st.set_page_config(page_title="R2MED Explorer", page_icon=str(ICON), layout="wide")
# A session's first run draws the app's name before anything slow: on a fresh server the imports below (the
# core, pandas, plotly, scipy …) and the first data load took seconds of blank page. Its later runs find
# all that loaded and leave the slot empty, so a rerun never flickers. The slot itself is made on every run:
# an element that only the first run drew would shift every later element's place in the page, so the
# second run would draw the whole page anew (stale copies of the first run's tables lingered beside it).
_LOADING = st.empty()
if not st.session_state.get("r2med_drawn"):
    _LOADING.markdown("# R2MED Explorer\n\nLoading the app and its data…")

from r2med_app.views import look, routes, serving, state  # noqa: E402  (after the first paint, on purpose)
from r2med_app.views.panels import auth, sidebar  # noqa: E402


def _loaded() -> None:
    """The page is about to draw itself: the loading note goes, and this session's later runs skip it."""
    st.session_state["r2med_drawn"] = True
    _LOADING.empty()


# Page links carry no ":material/…:" icons: Streamlit draws them as ligature text, so screen readers and
# copied links would read "dashboard Overview".
OVERVIEW = st.Page(routes.page("overview"), title="Overview", url_path="overview")
# The sidebar groups the pages by what a visitor came to do, in the order they usually do it: read the
# questions and what systems find, then weigh the systems' scores, then judge documents. Titles and URL
# paths are those of the flat list before, so saved links keep working.
SECTIONS = {
    "Explore questions": [
        # Streamlit serves the default page only at "/", so "/" is a hidden page that opens the Overview:
        # every page, the Overview included, then has a URL of its own for deep links.
        st.Page(lambda: st.switch_page(OVERVIEW), title="Start", url_path="start", default=True, visibility="hidden"),
        OVERVIEW,
        st.Page(routes.page("explorer"), title="Query explorer", url_path="explorer"),
        st.Page(routes.page("whatif"), title="What-if query", url_path="whatif"),
    ],
    "Score systems": [
        st.Page(routes.page("metrics"), title="Metrics", url_path="metrics"),
        st.Page(routes.page("compare"), title="Compare systems", url_path="compare"),
        st.Page(routes.page("leaderboard"), title="Leaderboard", url_path="leaderboard"),
        st.Page(routes.page("rewriting"), title="Query rewriting", url_path="rewriting"),
    ],
    "Judge relevance": [
        st.Page(routes.page("list_judging"), title="Judge a list", url_path="judge-list"),
        st.Page(routes.page("judging"), title="Judging", url_path="judging"),
        st.Page(routes.page("annotations"), title="Annotations", url_path="annotations"),
        st.Page(routes.page("adjudication"), title="Adjudication", url_path="adjudication"),
    ],
}

# expanded=True: never fold the last pages behind "View N more" (a section header still folds on a click).
page = st.navigation(SECTIONS, expanded=True)
state.view()  # read the deep link before any widget is drawn
look.style()
if serving.read_only():
    st.info(
        "**Read-only demo.** Browse every page; saving labels, uploads, live LLMs, local folders and new "
        "models are switched off on this server.",
        icon=":material/lock:",
    )
with st.sidebar:
    auth.panel()
dataset = sidebar.sidebar()
_loaded()
if dataset is None:
    state.sync_url()
    st.title("R2MED Explorer")
    if state.view().source_error:
        st.error(state.view().source_error)
    st.warning("Choose a data source in the sidebar that loads, and the pages will open on it.")
    st.stop()
# Before the page too: a page that ends in st.stop() (What-if with no question yet) cannot write the URL
# afterwards, and a click on a sidebar link opens the page at its bare path.
state.sync_url()
try:
    page.run()
finally:
    state.sync_url()  # after the page, so values it settled (e.g. the selected query) are in the link
