"""Query explorer: one query's gold documents next to what a system retrieved, with and without
the LLM rewrite, and a sortable, filterable table of every query's scores.
"""

from __future__ import annotations

import streamlit as st

from r2med_core.explore import (
    filter_queries,
    gold_frame,
    gold_rows,
    highlight,
    overlap,
    query_terms,
    rank_text,
    retrieved_frame,
    shared_with_gold,
)
from r2med_core.report import metric_label
from r2med_core.systems import queries_left_out, rewritten_name
from views import labels, state, ui

dataset = ui.current_dataset()
v = state.view()
st.title("Query explorer")
ui.demo_banner(dataset)

systems = list(v.systems) or list(state.DEFAULT_SYSTEMS)
top = st.columns([3, 1])
top[0].selectbox(
    "System", systems, format_func=ui.system_label, key=state.bound("system", systems), on_change=state.store("system")
)
v.system = st.session_state["w_system"]
depth = top[1].select_slider("Show top", options=[5, 10, 20, 50, 100], value=10, key="w_depth")

computed = ui.safe_results(dataset, v.system)
if computed is None:
    st.stop()
run, results = computed
rewrite = tuple(v.rewrite.split(":", 1)) if v.rewrite else None
labelled_system = rewritten_name(v.system, v.rewrite)  # the system whose ranking the user looks at last
rewritten = None
if rewrite and labelled_system != v.system:  # an imported run has no variant on the rewrite
    computed_rw = ui.safe_results(dataset, labelled_system)
    rewritten = computed_rw[0] if computed_rw else None
    rewritten_results = computed_rw[1] if computed_rw else None
    if left_out := queries_left_out(dataset, rewrite):
        st.caption(
            f"{left_out} of {len(dataset.queries)} queries are not in the {ui.md(v.rewrite)} rewrite file: "
            "with the rewrite they are not retrieved, so not evaluated (as in the benchmark)."
        )

# ------------------------------------------------------------------ the query table
table = ui.get_query_table(dataset, v.system, results, run)
with st.expander(
    f"All queries · mean nDCG@10 {results.means['ndcg_at_10']:.3f} · recall@100 {results.means['recall_at_100']:.3f}",
    expanded=not v.q,
):
    f1, f2, f3 = st.columns([1, 1, 2])
    failures = f1.checkbox("nDCG@10 = 0 only", key="w_fail")
    missed = f2.checkbox("A gold document missed (not in top 100)", key="w_missed")
    search = f3.text_input("Search query text", key="w_search", placeholder="e.g. troponin")
    shown = filter_queries(table, failures_only=failures, missed_gold=missed, search=search)
    st.caption(f"{len(shown)} of {len(table)} judged queries · click a row to open it")
    shown_ids = list(shown["query_id"])

    def _picked() -> None:
        """Open the query whose row was clicked (ids as shown when the click happened)."""
        rows = st.session_state["w_table"].selection.rows
        if rows:
            v.q = shown_ids[rows[0]]
            st.session_state["w_q"] = v.q

    st.dataframe(
        shown,
        hide_index=True,
        width="stretch",
        on_select=_picked,
        selection_mode="single-row",
        key="w_table",
        column_config={
            "ndcg_at_10": st.column_config.ProgressColumn("nDCG@10", min_value=0.0, max_value=1.0, format="%.3f"),
            "recall_at_100": st.column_config.ProgressColumn("recall@100", min_value=0.0, max_value=1.0, format="%.3f"),
            "best_gold_rank": st.column_config.NumberColumn("best gold rank"),
        },
    )
# ------------------------------------------------------------------ the selected query
query_ids = list(table["query_id"]) if len(table) else list(dataset.queries)
if not query_ids:
    st.warning("This dataset has no judged queries to explore.")
    st.stop()
if v.q not in query_ids:
    v.q = query_ids[0]


def _step(offset: int) -> None:
    position = (query_ids.index(v.q) + offset) % len(query_ids)
    v.q = query_ids[position]
    st.session_state["w_q"] = v.q


nav = st.columns([1, 6, 1])
nav[0].button("◀ Previous", on_click=_step, args=(-1,), width="stretch")
nav[1].selectbox(
    "Query",
    query_ids,
    key=state.bound("q", query_ids),
    on_change=state.store("q"),
    label_visibility="collapsed",
    format_func=ui.query_labels(dataset).__getitem__,
)
nav[2].button("Next ▶", on_click=_step, args=(1,), width="stretch")
qid = v.q = st.session_state["w_q"]

terms = query_terms(dataset.queries[qid])
bridge = shared_with_gold(dataset, qid)
with st.container(border=True):
    st.markdown(f"**Query {ui.md(qid)}**")
    st.html(f"<div class='r2-text'>{highlight(dataset.queries[qid], bridge)}</div>")
    st.caption(
        "Highlighted: the query's words that also occur in a gold document"
        + (" — none: the link is a reasoning step, not a shared word." if not bridge else ".")
        + " In documents below, every word shared with the query is highlighted."
    )
    query_labels = labels.labels_for(dataset, qid)
    if labels.label_tags(query_labels, None):
        st.caption("Labels on this query: " + labels.label_tags(query_labels, None))
    for name, value in dataset.query_meta.get(qid, {}).items():
        if name in ("doc_id",) or value in ("", None, []):
            continue
        with st.expander(ui.md(name.replace("_", " "))):
            st.text(str(value))

per_query = results.per_query.loc[qid] if qid in results.per_query.index else None
with_rewrite = (
    rewritten_results.per_query.loc[qid] if rewritten is not None and qid in rewritten_results.per_query.index else None
)
if with_rewrite is not None:
    st.caption(f"Arrows: the change with the rewrite ({ui.md(v.rewrite)}).")
m = st.columns(4)
for col, metric in zip(m, ["ndcg_at_10", "recall_at_10", "recall_at_100", "mrr"]):
    value = float(per_query[metric]) if per_query is not None else 0.0
    change = float(with_rewrite[metric]) - value if with_rewrite is not None else 0.0
    col.metric(metric_label(metric), f"{value:.3f}", delta=f"{change:+.3f}" if abs(change) > 5e-4 else None)

if rewritten is not None:
    method, llm = rewrite
    hy_doc = dataset.rewrites[rewrite].get(qid)
    with st.container(border=True):
        st.markdown(f"**Hypothetical document** · {ui.md(method)} by {ui.md(llm)} (precomputed)")
        if hy_doc:
            gold_words = shared_with_gold(dataset, qid, hy_doc)
            st.html(f"<div class='r2-text'>{highlight(hy_doc, gold_words)}</div>")
            st.caption("Highlighted: words of the hypothetical document that also occur in a gold document.")
        else:
            st.caption("No hypothetical document for this query: it is not retrieved with this rewrite.")

# ------------------------------------------------------------------ gold | retrieved
reranked = ui.get_reranked(dataset, rewritten.name if rewritten is not None else v.system)
gold = gold_rows(dataset, run, qid, rewritten, reranked)
left, right = st.columns(2)
with left:
    st.subheader(f"Gold documents ({len(gold)})")
    st.dataframe(gold_frame(gold, rewritten is not None, reranked is not None), hide_index=True, width="stretch")
    for row in gold:
        label = f"{row.doc_id} · grade {row.grade} · {rank_text(row.rank)}"
        if rewritten is not None:
            label += f" → {rank_text(row.rank_with_rewrite)} ({row.rewrite_effect})"
        tags = labels.label_tags(query_labels, row.doc_id)
        with st.expander(ui.md(label) + (f" · {tags}" if tags else "")):
            text = dataset.corpus.get(row.doc_id)
            if text is None:
                st.caption("Not in the corpus: the qrels name this document, but no system can retrieve it.")
                continue
            st.caption("shared terms: " + (ui.md(", ".join(overlap(text, terms))) or "none"))
            st.html(f"<div class='r2-text'>{highlight(text, terms)}</div>")
with right:
    rankings = {"original query": run}
    if rewritten is not None:
        rankings["rewritten query"] = rewritten
    if reranked is not None:
        rankings[f"reranked top {v.rerank_k}"] = reranked
    which = "original query"
    if len(rankings) > 1:
        which = st.radio("Ranking", list(rankings), horizontal=True, key="w_ranking")
        st.subheader(f"Retrieved top {depth} ({which})")
    else:
        st.subheader(f"Retrieved top {depth}")
    shown_run = rankings[which]
    st.dataframe(retrieved_frame(dataset, shown_run, qid, depth), hide_index=True, width="stretch")
    for rank, (doc, score) in enumerate(shown_run.top(qid, depth), start=1):
        grade = dataset.positives(qid).get(doc)
        mark = f" · ✓ gold (grade {grade})" if grade else ""
        tags = labels.label_tags(query_labels, doc)
        with st.expander(f"#{rank} · {ui.md(doc)} · {score:.3f}{mark}" + (f" · {tags}" if tags else "")):
            text = dataset.corpus.get(doc, "")
            st.caption("shared terms: " + (ui.md(", ".join(overlap(text, terms))) or "none"))
            st.html(f"<div class='r2-text'>{highlight(text, terms)}</div>")

# ------------------------------------------------------------------ labelling
st.divider()
documents = list(dict.fromkeys([*(row.doc_id for row in gold), *(d for d, _ in shown_run.top(qid, depth))]))
labels.label_form(dataset, qid, labelled_system, documents)
if query_labels:
    st.dataframe(
        [
            {
                "document": a.doc_id or "(query)",
                "failure": a.failure_type,
                "note": a.note,
                "by": a.annotator,
                "system": a.system,
                "when": a.created_at[:16],
            }
            for a in query_labels
        ],
        hide_index=True,
        width="stretch",
    )
