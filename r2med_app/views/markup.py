"""Text shown through Streamlit's Markdown, escaped: ``md`` for one string (a label, a title, a caption)
and ``table`` for a whole frame. Everything a page shows from a dataset, a file, an LLM or a visitor passes
through one of the two, so a name written as ``[x](https://…)`` or ``**x**`` shows as written, never as a
link or bold. One file, so the one escaping rule (and ``tests/test_app_tables.py``'s check that no page
draws a table another way) has one place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pandas as pd
import streamlit as st

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")
#: Where GitHub-flavoured Markdown starts a link of bare text: ``http://``, ``https://`` and ``www.``. It finds
#: them in the parsed text, after the escapes are undone, so escaping alone leaves ``www.x.org`` a link; a word
#: joiner (U+2060: invisible, no space) put after the colon or before the dot shows the same text, never linked.
#: E-mail addresses are left as they are: their link only ever opens a mail to the address shown, and people's
#: addresses (the signed-in identities) must read and copy exactly.
_AUTOLINK = re.compile(r"(?i)(?<=https:)(?=//)|(?<=http:)(?=//)|(?<=www)(?=\.)")
WORD_JOINER = "\u2060"


def md(text: object) -> str:
    """Text from a dataset, a file or a user, escaped for Streamlit's markdown (labels, titles,
    captions), so ids and names show as written and can never add formatting or links (a bare
    ``https://…`` or ``www.…`` included: see ``_AUTOLINK``)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", _AUTOLINK.sub(WORD_JOINER, str(text)))


def table(data: pd.DataFrame, *, hide_index: bool | None = None, formats: Mapping[str, str] | None = None) -> None:
    """``st.table`` (an HTML table that wraps in its column: every column in view) with each text cell, header
    and index label escaped: ``st.table`` reads them as Markdown, so a document id, a note or a name written
    as ``[x](https://…)`` or ``**x**`` would become a link or bold. ``formats``: a column's number format
    (``"{:.3f}"``), applied before escaping."""
    frame = data.copy()
    for column, spec in (formats or {}).items():
        frame[column] = [spec.format(value) if pd.notna(value) else "" for value in frame[column]]

    def escaped(value: object) -> object:
        return md(value) if isinstance(value, str) else value

    frame = frame.map(escaped)
    frame.columns = [escaped(c) for c in frame.columns]
    frame.index = frame.index.map(escaped)
    st.table(frame, hide_index=hide_index)
