"""R2MED Explorer: the router. It draws the shared sidebar, then the page the URL names.

Run it with ``streamlit run streamlit_app.py``; it opens on the embedded demo data.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from views import auth, sidebar, state, ui

# A local image, not a ":material/…:" icon: Streamlit fetches those favicons from fonts.gstatic.com.
ICON = Path(__file__).resolve().parent / "views" / "assets" / "icon.png"
st.set_page_config(page_title="R2MED Explorer", page_icon=str(ICON), layout="wide")

# Page links carry no ":material/…:" icons: Streamlit draws them as ligature text, so screen readers and
# copied links would read "dashboard Overview".
OVERVIEW = st.Page("views/overview.py", title="Overview", url_path="overview")
# The sidebar groups the pages by what a visitor came to do, in the order they usually do it: read the
# questions and what systems find, then weigh the systems' scores, then judge documents. Titles and URL
# paths are those of the flat list before, so saved links keep working.
SECTIONS = {
    "Explore questions": [
        # Streamlit serves the default page only at "/", so "/" is a hidden page that opens the Overview:
        # every page, the Overview included, then has a URL of its own for deep links.
        st.Page(lambda: st.switch_page(OVERVIEW), title="Start", url_path="start", default=True, visibility="hidden"),
        OVERVIEW,
        st.Page("views/explorer.py", title="Query explorer", url_path="explorer"),
        st.Page("views/whatif.py", title="What-if query", url_path="whatif"),
    ],
    "Score systems": [
        st.Page("views/metrics.py", title="Metrics", url_path="metrics"),
        st.Page("views/compare.py", title="Compare systems", url_path="compare"),
        st.Page("views/leaderboard.py", title="Leaderboard", url_path="leaderboard"),
        st.Page("views/rewriting.py", title="Query rewriting", url_path="rewriting"),
    ],
    "Judge relevance": [
        st.Page("views/list_judging.py", title="Judge a list", url_path="judge-list"),
        st.Page("views/judging.py", title="Judging", url_path="judging"),
        st.Page("views/annotations.py", title="Annotations", url_path="annotations"),
        st.Page("views/adjudication.py", title="Adjudication", url_path="adjudication"),
    ],
}

# expanded=True: never fold the last pages behind "View N more" (a section header still folds on a click).
page = st.navigation(SECTIONS, expanded=True)
state.view()  # read the deep link before any widget is drawn
ui.style()
if ui.read_only():
    st.info(
        "**Read-only demo.** Browse every page; saving labels, uploads, live LLMs, local folders and new "
        "models are switched off on this server.",
        icon=":material/lock:",
    )
with st.sidebar:
    auth.panel()
dataset = sidebar.sidebar()
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
