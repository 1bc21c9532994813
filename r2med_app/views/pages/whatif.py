"""What-if: type a question or a case and see what several systems retrieve for it, side by side."""

from __future__ import annotations

import streamlit as st

from r2med_app.views import bars, datasets, live, naming, notices, state, work
from r2med_app.views.markup import md
from r2med_core.analysis.explore import highlight, overlap, preview, query_terms
from r2med_core.llm.client import default_llm_name
from r2med_core.llm.generation import cached_hypothetical_document, hypothetical_document
from r2med_core.systems import SpecError, parse_system, search_text

dataset = datasets.current_dataset()
v = state.view()
st.title("What-if query")
notices.demo_banner(dataset)
st.caption(
    f"Search {dataset.name}'s {len(dataset.corpus):,} documents with your own question or case. "
    "The text goes into the page address, so the comparison can be shared."
)

st.text_area(
    "Your question or case",
    key=state.bound("ask"),
    on_change=state.store("ask"),
    height=120,
    placeholder="e.g. A 30-year-old runner collapses during a race; his brother died suddenly at 25. What is it?",
)
in_play = state.systems_in_play(include_rewrites=False)
options = [name for name in in_play if naming.searches_text(name)]
if len(options) < len(in_play):
    st.caption("Imported runs (`run:…`) rank only the dataset's own queries, so they cannot search your text here.")
if not v.ask_systems:
    v.ask_systems = options[:3]
c1, c2 = st.columns([3, 1])
c1.multiselect(
    "Systems",
    options,
    format_func=naming.system_label,
    key=state.bound("ask_systems", options),
    on_change=state.store("ask_systems"),
)
chosen = v.ask_systems
k = c2.select_slider("Show top", options=[5, 10, 20], value=10, key="w_whatif_k")
endpoint = live.live_endpoint()
ASKED = "whatif_hyde_asked"  # this session clicked for a HyDE request (a link alone never sends one)


def _hyde_toggled() -> None:
    state.store("ask_hyde")()
    st.session_state[ASKED] = True


use_hyde = st.toggle(
    "Rewrite my query with HyDE (live LLM)",
    key=state.bound("ask_hyde"),
    on_change=_hyde_toggled,
    disabled=endpoint is None,
    help="Needs a model under 'Live LLM endpoint' in the sidebar.",
)
if endpoint is None:
    st.caption(
        "No live LLM endpoint is configured, so typed queries run as typed. Precomputed HyDE documents exist only "
        "for the dataset's own queries; set a model under **Live LLM endpoint** in the sidebar to rewrite yours."
    )

text = v.ask.strip()
if not text:
    st.info("Type a question above and press Ctrl+Enter (or click outside the box).")
    st.stop()
if len(chosen) < 1:
    st.info("Choose at least one system.")
    st.stop()

hy_doc = None
hyde_name = default_llm_name(endpoint.model) if endpoint is not None else ""
if use_hyde and endpoint is not None and not st.session_state.get(ASKED):
    hy_doc = cached_hypothetical_document(dataset, text, endpoint)
    if hy_doc is None:  # the link turned HyDE on: nothing is sent to the LLM before a click
        st.info(f"This link turns HyDE on: the query is rewritten by {md(endpoint.model)} once you ask.")
        if st.button("Write the hypothetical document", key="w_whatif_hyde_go"):
            st.session_state[ASKED] = True
if use_hyde and endpoint is not None and st.session_state.get(ASKED):
    hy_doc, problem = bars.with_progress(
        f"a hypothetical document from {endpoint.model}",
        lambda progress: hypothetical_document(dataset, text, endpoint, progress=progress),
    )
    if hy_doc is None:
        st.error(f"No rewrite: {md(problem)}. The systems run on your text as typed.")
if hy_doc is not None and endpoint is not None:
    with st.container(border=True):
        st.markdown(f"**Hypothetical document** · hyde by {md(endpoint.model)} (live)")
        st.html(f"<div class='r2-text'>{highlight(hy_doc, query_terms(text))}</div>")

rankings: dict[str, list[tuple[str, float]]] = {}
headings: dict[str, str] = {}
for name in chosen:
    spec = parse_system(name)
    headings[name] = naming.system_label(name)
    if hy_doc is not None:
        spec = spec.with_rewrite(("hyde", hyde_name))
        headings[name] = f"{naming.system_label(str(spec))} · live"
    if not work.ready(dataset, str(spec.base)):  # its index is not built yet: a background job builds it
        work.compute_panel(work.bench().run(dataset, str(spec.base)))  # not ready: its offer, job or error
        continue
    try:
        rankings[name] = bars.with_progress(
            naming.system_label(name),
            lambda progress, spec=spec: search_text(dataset, spec, text, k, hy_doc=hy_doc, progress=progress),
        )
    except SpecError as err:
        st.error(md(err))
    except Exception as err:  # one failing model must not hide the others
        st.error(f"{md(naming.system_label(name))} could not run: {type(err).__name__}: {md(err)}")
if not rankings:
    st.stop()

agreed = set.intersection(*(set(d for d, _ in r) for r in rankings.values())) if len(rankings) > 1 else set()
if len(rankings) > 1:
    st.markdown(
        f"**{len(agreed)} document(s) in every system's top {k}**"
        + (": " + ", ".join(md(d) for d in sorted(agreed)) if agreed else " — the systems disagree completely.")
    )

terms = query_terms(text)
columns = st.columns(len(rankings))
for column, (name, ranking) in zip(columns, rankings.items()):
    with column:
        st.subheader(headings[name])
        for rank, (doc, score) in enumerate(ranking, start=1):
            flag = " · ★ all agree" if doc in agreed else ""
            body = dataset.corpus.get(doc, "")
            with st.expander(f"#{rank} · {md(doc)} · {score:.3f}{flag}"):
                st.caption("shared terms: " + (md(", ".join(overlap(body, terms))) or "none"))
                st.html(f"<div class='r2-text'>{highlight(body, terms)}</div>")
            st.caption(md(preview(body)))  # the card says what the document is before it is opened
