"""What the security tests share: everything an AppTest run shows, as text, to look for leaks."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

_TEXT_ELEMENTS = ("markdown", "caption", "warning", "error", "info", "success", "title", "header", "subheader", "text")


def shown_text(at: AppTest) -> str:
    """Every message, caption and heading on the page and in the sidebar, plus widget values and the URL."""
    parts = [str(element.value) for kind in _TEXT_ELEMENTS for element in at.get(kind)]
    parts += [str(widget.value) for widget in at.text_input]
    parts += [str(widget.placeholder) for widget in at.text_input]
    parts.append(str(at.query_params))
    return "\n".join(parts)
