"""Query explorer: one query's gold documents next to what a system retrieved, with and without
the LLM rewrite, and a sortable, filterable table of every query's scores.
"""

from __future__ import annotations

import streamlit as st

from r2med_app.views import datasets, markup, naming, notices, state, summaries, work
from r2med_app.views.markup import md
from r2med_app.views.panels import auth, diagnosis, failures, judge, labels
from r2med_core.analysis.explore import (
    GLOSSARY,
    QUERY_METRICS,
    filter_queries,
    gold_frame,
    gold_rows,
    highlight,
    mask_blind,
    overlap,
    preview,
    query_terms,
    rank_text,
    retrieved_frame,
    shared_with_gold,
    side_by_side,
    step,
)
from r2med_core.evaluation import metric_explained, metric_label
from r2med_core.judging.annotations import TAXONOMY, grade_words
from r2med_core.systems import (
    dense_instruction_notes,
    queries_left_out,
    rewrite_told,
    rewrite_words,
    rewritten_name,
)

dataset = datasets.current_dataset()
v = state.view()
within = state.scope(datasets.dataset_key(dataset))  # widgets whose options depend on the dataset are keyed by it
st.title("Query explorer")
notices.demo_banner(dataset)
with st.expander(f"Glossary: {', '.join(GLOSSARY)}"):
    st.markdown("\n".join(f"- **{md(word)}**: {md(meaning)}" for word, meaning in GLOSSARY.items()))

systems = list(v.systems) or list(state.DEFAULT_SYSTEMS)
top = st.columns([3, 1])
top[0].selectbox(
    "System",
    systems,
    format_func=naming.system_label,
    key=state.bound("system", systems),
    on_change=state.store("system"),
)
v.system = st.session_state["w_system"]
DEPTHS = [5, 10, 20, 50, 100]
depth = top[1].select_slider(
    "Show top", options=DEPTHS, key=state.bound("depth", DEPTHS, 10), on_change=state.store("depth")
)

# The page below the pickers is one slot: while another system loads, its "Getting ready" message takes
# the slot's place at once, so the previous system's numbers never stay on screen under the new name.
body = st.empty()
computed = work.results(dataset, v.system, slot=body)
if computed is None:
    st.stop()
with body.container():
    run, results = computed
    for note in [*dense_instruction_notes(dataset, v.system), *results.notes]:
        st.caption(md(note))
    rewrite = tuple(v.rewrite.split(":", 1)) if v.rewrite else None
    rewritten = None
    rewritten_system = rewritten_name(v.system, v.rewrite)
    if rewrite and rewritten_system != v.system:  # an imported run has no variant on the rewrite
        computed_rw = work.results(dataset, rewritten_system)
        rewritten = computed_rw[0] if computed_rw else None
        rewritten_results = computed_rw[1] if computed_rw else None
        if left_out := queries_left_out(dataset, rewrite):
            st.caption(
                f"{left_out} of {len(dataset.queries)} queries are not in the {md(v.rewrite)} rewrite file: "
                "with the rewrite they are not retrieved, so not evaluated (as in the benchmark)."
            )

    # ------------------------------------------------------------------ the query table
    acting = auth.acting()
    table = work.get_query_table(dataset, v.system, results, run)
    blind_ids = labels.blind_queries(dataset, acting, list(table["query_id"]))
    table = mask_blind(table, blind_ids)
    picker_key = state.widget_key("q", within)
    table_key = state.widget_key("all_queries", within)
    # Open when the session starts without a chosen query; after that it stays as the user left it (a filter
    # change or a picked query never closes it).
    with st.expander(
        f"All queries · mean nDCG@10 {results.means['ndcg_at_10']:.3f}"
        f" · recall@100 {results.means['recall_at_100']:.3f}",
        expanded=bool(st.session_state.get(table_key, not v.q)),
        key=table_key,
        on_change="rerun",
    ):
        f1, f2, f3 = st.columns([1.4, 1.2, 2])
        f1.checkbox(
            "Failures only",
            key=state.bound("fail"),
            on_change=state.store("fail"),
            help="Only the questions with no relevant (gold) document in the top 10, i.e. nDCG@10 = 0.",
        )
        f2.checkbox(
            "Gold missed",
            key=state.bound("missed"),
            on_change=state.store("missed"),
            help="Only queries with a gold document outside the top 100 (not retrieved at all).",
        )
        f3.text_input(
            "Search query text",
            key=state.bound("search"),
            on_change=state.store("search"),
            placeholder="e.g. troponin, or a query id",
        )
        # The system's failures, asked once: the class column here and the verdict above a question read them.
        found = failures.failures_of(dataset, v.system)
        table, classed = diagnosis.explorer_classes(found.diagnosis if found is not None else None, table)
        table = mask_blind(table, blind_ids)  # a query's failure class tells whether it failed: hidden too
        shown = diagnosis.filter_classes(
            filter_queries(table, failures_only=v.fail, missed_gold=v.missed, search=v.search)
        )
        st.caption(
            f"{len(shown)} of {len(table)} judged queries · click a row to open its query · "
            "Next/Previous follow the filters"
        )
        if blind_ids:
            st.caption(
                f"Blind first: the {len(blind_ids)} queries you have not labelled as a whole yet show no scores, and "
                "the score filters leave them out, until you save your own label on each whole query."
            )
        shown_ids = list(shown["query_id"])

        def _picked() -> None:
            """Open the query whose row was clicked, anywhere on the row (ids as shown when the click
            happened), and fold the table so the opened query is in view."""
            selection = st.session_state[state.widget_key("table", within)].selection
            rows = list(selection.rows) or [cell[0] for cell in selection.cells]
            if rows:
                v.q = shown_ids[rows[0]]
                st.session_state[picker_key] = v.q
                st.session_state[table_key] = False

        st.dataframe(
            shown,
            hide_index=True,
            width="stretch",
            on_select=_picked,
            selection_mode=["single-row", "single-cell"],  # a click on any cell opens its row's query
            key=state.widget_key("table", within),
            # The scores first and the query text last, so the numbers stay in view on a narrow screen.
            column_order=["query_id", "ndcg_at_10", "recall_at_100", "gold", "gold_missed", "best_gold_rank"]
            + ["failure_class"] * classed
            + ["query"],
            column_config={
                "query_id": st.column_config.TextColumn("id", width=60),
                "query": st.column_config.TextColumn("query"),
                "ndcg_at_10": st.column_config.ProgressColumn(
                    "nDCG@10", min_value=0.0, max_value=1.0, format="%.3f", width=90, help=GLOSSARY["nDCG@10"]
                ),
                "recall_at_100": st.column_config.ProgressColumn(
                    "recall@100", min_value=0.0, max_value=1.0, format="%.3f", width=90, help=GLOSSARY["Recall@100"]
                ),
                "gold": st.column_config.NumberColumn("gold", width=50, help=GLOSSARY["gold"]),
                "gold_missed": st.column_config.NumberColumn(
                    "missed", width=60, help="Gold documents not in the top 100."
                ),
                "best_gold_rank": st.column_config.NumberColumn(
                    "best rank", width=75, help="Rank of the best-placed gold document."
                ),
                "failure_class": st.column_config.TextColumn(
                    "failure class", help="A diagnostic, not a benchmark metric."
                ),
            },
        )
        st.download_button(
            "Download these queries (CSV)",
            shown.to_csv(index=False),
            file_name=f"{dataset.name}_queries.csv",
            mime="text/csv",
            key="w_queries_csv",
        )
    # ------------------------------------------------------------------ the selected query
    query_ids = list(table["query_id"]) if len(table) else list(dataset.queries)
    if not query_ids:
        st.warning("This dataset has no judged queries to explore.")
        st.stop()
    if v.q not in query_ids:
        v.q = query_ids[0]
    filtered = bool(v.fail or v.missed or v.search.strip() or (classed and v.diag))
    walk = [q for q in shown_ids if q in query_ids] if filtered else query_ids  # what Next/Previous step through

    def _step(offset: int) -> None:
        target = step(walk, v.q, offset)
        if target is not None:
            v.q = target
            st.session_state[picker_key] = v.q

    nav = st.columns([1.4, 5, 1.4])  # room for "◀ Previous K" on a narrow window
    nav[0].button(
        "◀ Previous", on_click=_step, args=(-1,), width="stretch", shortcut="K", disabled=not walk, key="w_prev"
    )
    nav[1].selectbox(
        "Query",
        query_ids,
        key=state.bound("q", query_ids, within=within),
        on_change=state.store("q", within),
        label_visibility="collapsed",
        format_func=summaries.query_labels(dataset).__getitem__,
    )
    nav[2].button("Next ▶", on_click=_step, args=(1,), width="stretch", shortcut="J", disabled=not walk, key="w_next")
    qid = v.q = st.session_state[picker_key]
    if filtered:
        where = f"{walk.index(qid) + 1} of {len(walk)}" if qid in walk else f"not among the {len(walk)}"
        st.caption(f"Filtered: this query is {where} filtered queries; Next (J) and Previous (K) step through them.")

    terms = query_terms(dataset.queries[qid])
    stored = labels.labels_for(dataset, qid)
    query_labels = acting.sight.labels(stored)  # the labels this visitor may see (r2med_core.judging.visibility)
    # Blind per unit (sign-in on): until this person saves their own label on the whole query they see the
    # query and the retrieved documents only: no judgements, others' labels, scores or LLM rewrite.
    blind = acting.sight.hidden(stored, (dataset.source, dataset.name, qid, None))
    bridge = frozenset() if blind else shared_with_gold(dataset, qid)
    with st.container(border=True):
        st.markdown(f"**Query {md(qid)}**")
        st.html(f"<div class='r2-text'>{highlight(dataset.queries[qid], bridge)}</div>")
        if blind:
            st.info(
                "**Blind first.** Label this query from the query and the documents alone: the judgements, "
                "other people's labels and the systems' scores appear once you have saved your own label on the "
                "whole query (a label on one document shows the others' on that document, on the Annotations page).",
                icon=":material/visibility_off:",
            )
        else:
            st.caption(
                "Highlighted: the query's words that also occur in a gold document"
                + (" — none: the link is a reasoning step, not a shared word." if not bridge else ".")
                + " In documents below, every word shared with the query is highlighted."
            )
        if not blind and labels.label_tags(query_labels, None):
            st.caption("Labels on this query: " + labels.label_tags(query_labels, None))
        for name, value in ({} if blind else dataset.query_meta.get(qid, {})).items():
            if name in ("doc_id",) or value in ("", None, []):
                continue
            with st.expander(md(name.replace("_", " "))):
                st.text(str(value))
    if not blind and found is not None:  # the verdict tells whether the query failed: not before one's own label
        failures.verdict_box(found, qid, picker_key)
        failures.contrast_box(dataset, run, qid, v.system)

    per_query = results.per_query.loc[qid] if qid in results.per_query.index else None
    with_rewrite = (
        rewritten_results.per_query.loc[qid]
        if rewritten is not None and qid in rewritten_results.per_query.index
        else None
    )
    if with_rewrite is not None:
        st.caption(f"Arrows: the change with the rewrite, {md(rewrite_words(v.rewrite, dataset))}.")
    m = st.columns(4)
    TILES = () if blind else QUERY_METRICS
    for col, metric in zip(m, TILES):
        value = float(per_query[metric]) if per_query is not None else 0.0
        help_text = GLOSSARY[metric_label(metric)]
        if with_rewrite is None:
            col.metric(metric_label(metric), f"{value:.3f}", help=help_text)
            continue
        after = float(with_rewrite[metric])
        change = after - value
        col.metric(
            metric_label(metric),
            f"{value:.3f} → {after:.3f}",  # without → with the rewrite, both shown plainly
            delta=f"{change:+.3f}" if abs(change) > 5e-4 else None,
            help=help_text,
        )
    if TILES:
        st.caption(md("; ".join(metric_explained(metric) for metric in TILES) + "."))

    if rewritten is not None and not blind:
        hy_doc = dataset.rewrites[rewrite].get(qid)
        with st.container(border=True):
            told = rewrite_told(dataset, rewrite)
            st.markdown(f"**Hypothetical document** · {md(told)}")
            if hy_doc:
                gold_words = shared_with_gold(dataset, qid, hy_doc)
                st.html(f"<div class='r2-text'>{highlight(hy_doc, gold_words)}</div>")
                st.caption("Highlighted: words of the hypothetical document that also occur in a gold document.")
            else:
                st.caption("No hypothetical document for this query: it is not retrieved with this rewrite.")

    # ------------------------------------------------------------------ gold | retrieved

    def _blind_documents() -> list[str]:
        """The blind view: the retrieved documents to judge, in the system's order, without scores or marks."""
        st.subheader(f"Documents to judge ({depth})")
        shown = [doc for doc, _ in run.top(qid, depth)]
        for doc in shown:
            text = dataset.corpus.get(doc, "")
            with st.expander(md(doc)):
                st.html(f"<div class='r2-text'>{highlight(text, terms)}</div>")
            st.caption(md(preview(text)))
        return shown

    if blind:
        documents = _blind_documents()
        st.divider()
        labels.label_form(dataset, qid, run, documents, state.scope(within, qid))
        st.stop()
    reranked = work.reranked(dataset, rewritten.name if rewritten is not None else v.system)
    gold = gold_rows(dataset, run, qid, rewritten, reranked)
    left, right = st.container(key="r2-wide-gold").columns(2)  # stacked when a half is too narrow (look.WIDE_PX)
    with left:
        st.subheader(f"Gold documents ({len(gold)})")
        st.caption(f"Gold: {GLOSSARY['gold']} Grade: {GLOSSARY['grade']}")
        # Wrapped in its cell, every column in view (a grid cut "effect" to "effe…" in half of 1440 px).
        markup.table(gold_frame(gold, rewritten is not None, reranked is not None), hide_index=True)
        for row in gold:
            label = f"{row.doc_id} · {grade_words(row.grade)} · {rank_text(row.rank)}"
            if rewritten is not None:
                label += f" → {rank_text(row.rank_with_rewrite)} ({row.rewrite_effect})"
            tags = labels.label_tags(query_labels, row.doc_id)
            text = dataset.corpus.get(row.doc_id)
            with st.expander(md(label) + (f" · {tags}" if tags else "")):
                if text is None:
                    st.caption("Not in the corpus: the qrels name this document, but no system can retrieve it.")
                    continue
                st.caption("shared words: " + (md(", ".join(overlap(text, terms))) or "none"))
                st.html(f"<div class='r2-text'>{highlight(text, terms)}</div>")
                judge.why_relevant(dataset, qid, row.doc_id, within)
            st.caption(md(preview(text)))
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
        shown_system = {"original query": v.system, "rewritten query": rewritten_system}.get(which)
        reasons = work.explanations(dataset, shown_system, qid) if shown_system else None
        if reasons is not None:
            st.caption(f"Under each document: {md(reasons.note)}, by {md(reasons.by)}.")
        # A table whose preview wraps in its cell (a data grid cut it to a few words in a half-width column).
        # Escaped (markup.table): a document's words are the dataset's, never Markdown to obey.
        markup.table(retrieved_frame(dataset, shown_run, qid, depth), hide_index=True, formats={"score": "{:.3f}"})
        for rank, (doc, score) in enumerate(shown_run.top(qid, depth), start=1):
            grade = dataset.positives(qid).get(doc)
            mark = f" · ✓ gold, {md(grade_words(grade))}" if grade else ""
            tags = labels.label_tags(query_labels, doc)
            text = dataset.corpus.get(doc, "")
            with st.expander(f"#{rank} · {md(doc)} · {score:.3f}{mark}" + (f" · {tags}" if tags else "")):
                st.caption("shared words: " + (md(", ".join(overlap(text, terms))) or "none"))
                st.html(f"<div class='r2-text'>{highlight(text, terms)}</div>")
            st.caption(md(preview(text)))
            if reasons is not None and doc in reasons.texts:
                with st.container(border=True):
                    st.markdown(f"**Why, says {md(reasons.by)}:** {md(reasons.texts[doc])}")
                    st.caption(md(reasons.details[doc]))

    # ------------------------------------------------------------------ two systems side by side
    others = [s for s in systems if s != v.system]
    if others:
        with st.expander("Side by side with another system"):
            other = st.selectbox("Other system", others, format_func=naming.system_label, key="w_side_system")
            # Nothing runs until asked: an expander's body runs even while folded, and the other system may
            # need minutes (or the operator's LLM).
            shown = st.toggle("Show its top documents next to these", key="w_side_show")
            computed_other = work.results(dataset, other) if shown else None  # a Compute button when not ready
            if computed_other is not None:
                table = side_by_side(
                    dataset,
                    {naming.system_label(v.system): run, naming.system_label(other): computed_other[0]},
                    qid,
                    depth,
                )
                st.dataframe(table, hide_index=True, width="stretch")
                st.caption("✓: a gold document (its grade). Each column is that system's top " + str(depth) + ".")

    # ------------------------------------------------------------------ labelling
    st.divider()
    documents = list(dict.fromkeys([*(row.doc_id for row in gold), *(d for d, _ in shown_run.top(qid, depth))]))
    labels.label_form(dataset, qid, shown_run, documents, state.scope(within, qid))
    if query_labels:
        st.dataframe(
            [
                {
                    "document": a.doc_id or "(query)",
                    "failure": TAXONOMY[a.failure_type].label if a.failure_type in TAXONOMY else a.failure_type,
                    "status": labels.status_of(a),
                    "note": a.note,
                    "by": a.annotator,
                    "system": a.system,
                    "rank": a.rank,
                    "when": a.created_at[:16],
                }
                for a in query_labels
            ],
            hide_index=True,
            width="stretch",
        )
