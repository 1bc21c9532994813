"""The operator's settings for this server (environment, then ``.streamlit/secrets.toml``), read through
one call so every page and check sees the same values, secrets included; a bad value stops the app with
its name. ``read_only`` (the demo mode) is the switch most pages ask about.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from r2med_app.views.markup import md
from r2med_core.kinds.llm_rerank import use_operator
from r2med_core.llm.endpoints import operator_llm
from r2med_core.settings import Settings, load_settings


def _secrets() -> dict[str, Any]:
    """``.streamlit/secrets.toml`` as a dict (empty when there is none)."""
    try:
        return st.secrets.to_dict()
    except Exception:
        return {}


def settings() -> Settings:
    """The operator's settings (environment, then secrets); a bad value stops the app with its name."""
    try:
        found = load_settings(extra=_secrets())
        use_operator(operator_llm(found, secrets=_secrets()), found)  # the server's, for LLM reranking jobs
        return found
    except ValueError as err:
        st.error(f"The server is misconfigured: {md(err)}. The operator must fix this setting.")
        st.stop()
        raise  # st.stop() raises; this keeps type checkers honest


def read_only() -> bool:
    """True in demo mode: no labels written, no uploads, no live LLM, no local folders, no new models."""
    return settings().demo_mode
