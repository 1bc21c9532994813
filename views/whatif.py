"""What-if: type a question or a case and see what several systems retrieve for it, side by side."""

from __future__ import annotations

import streamlit as st

from r2med_core.explore import highlight, overlap, query_terms
from r2med_core.systems import SpecError, search_text
from views import ui

dataset = ui.current_dataset()
v = ui.view()
st.title("What-if query")
ui.demo_banner(dataset)
st.caption(
    f"Search {dataset.name}'s {len(dataset.corpus):,} documents with your own question or case. "
    "The text goes into the page address, so the comparison can be shared."
)

st.text_area(
    "Your question or case",
    key=ui.bound("ask"),
    on_change=ui.store("ask"),
    height=120,
    placeholder="e.g. A 30-year-old runner collapses during a race; his brother died suddenly at 25. What is it?",
)
options = [s for s in ui.systems_in_play(include_rewrites=False)]
c1, c2 = st.columns([3, 1])
chosen = c1.multiselect("Systems", options, default=options[:3], format_func=ui.system_label, key="w_whatif_systems")
k = c2.select_slider("Show top", options=[5, 10, 20], value=10, key="w_whatif_k")
if v.rewrite:
    st.info(
        "HyDE on a typed query needs an LLM to write its hypothetical document; precomputed rewrites exist only for "
        "the dataset's own queries. Configure a live endpoint to rewrite typed queries; meanwhile the systems run "
        "on your text as typed."
    )

text = v.ask.strip()
if not text:
    st.info("Type a question above and press Ctrl+Enter (or click outside the box).")
    st.stop()
if len(chosen) < 1:
    st.info("Choose at least one system.")
    st.stop()

rankings: dict[str, list[tuple[str, float]]] = {}
for name in chosen:
    holder = st.empty()
    try:
        rankings[name] = search_text(dataset, name, text, k, progress=lambda f, m, h=holder: h.progress(f, text=m))
    except SpecError as err:
        st.error(str(err))
    except Exception as err:
        st.error(f"{ui.system_label(name)} could not run: {type(err).__name__}: {err}")
    finally:
        holder.empty()
if not rankings:
    st.stop()

agreed = set.intersection(*(set(d for d, _ in r) for r in rankings.values())) if len(rankings) > 1 else set()
if len(rankings) > 1:
    st.markdown(
        f"**{len(agreed)} document(s) in every system's top {k}**"
        + (": " + ", ".join(f"`{d}`" for d in sorted(agreed)) if agreed else " — the systems disagree completely.")
    )

terms = query_terms(text)
columns = st.columns(len(rankings))
for column, (name, ranking) in zip(columns, rankings.items()):
    with column:
        st.subheader(ui.system_label(name))
        for rank, (doc, score) in enumerate(ranking, start=1):
            flag = " · ★ all agree" if doc in agreed else ""
            with st.expander(f"#{rank} · {doc} · {score:.3f}{flag}"):
                body = dataset.corpus.get(doc, "")
                st.caption("shared terms: " + (", ".join(overlap(body, terms)) or "none"))
                st.html(f"<div class='r2-text'>{highlight(body, terms)}</div>")
