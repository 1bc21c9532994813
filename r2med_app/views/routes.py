"""Where the routed pages are: the router names each page by an absolute path, so the same file is named
whether the app was started installed (``r2med app``) or from a checkout (``streamlit run streamlit_app.py``).
"""

from __future__ import annotations

from pathlib import Path

PAGES = Path(__file__).resolve().parent / "pages"


def page(name: str) -> Path:
    """The routed page ``name`` (``"explorer"``) as an absolute path: Streamlit resolves a relative page path
    against the script it started, which is the router when installed but the checkout's launcher
    (``streamlit_app.py``) when run from a checkout, so only an absolute path names the same file from both."""
    return PAGES / f"{name}.py"
