"""Annotations: every failure label, counts per type, exports, import, and re-evaluation with the
accepted "relevant but unjudged" additions.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
import plotly.express as px
import streamlit as st

from r2med_core.annotations import TAXONOMY, reevaluate
from r2med_core.evaluation import MAIN_METRICS
from r2med_core.report import metric_label
from views import state, ui


def _describe(row: pd.Series) -> str:
    target = row["doc_id"] if isinstance(row["doc_id"], str) else "(query)"
    return (
        f"#{row.name} · {row['task']} · query {row['query_id']} · {target} · {row['failure_type']} · {row['annotator']}"
    )


dataset = ui.current_dataset()
store = ui.annotation_store()
st.title("Annotations")
if store is None:
    st.stop()
st.caption(f"Stored in {ui.md(store.path)} (SQLite). Label queries and documents from the Query explorer.")

everything = store.to_dataframe()
if everything.empty:
    st.info("No labels yet. Open the Query explorer, pick a query and use **Label a failure** under it.")
else:
    c = st.columns(4)
    filters = {
        "task": c[0].multiselect("Task", sorted(everything["task"].unique()), key="w_ann_task"),
        "failure_type": c[1].multiselect(
            "Failure type",
            sorted(everything["failure_type"].unique()),
            format_func=lambda code: TAXONOMY[code].label if code in TAXONOMY else code,
            key="w_ann_type",
        ),
        "system": c[2].multiselect("System", sorted(everything["system"].unique()), key="w_ann_system"),
        "annotator": c[3].multiselect("Annotator", sorted(everything["annotator"].unique()), key="w_ann_by"),
    }
    shown = everything
    for column, chosen in filters.items():
        if chosen:
            shown = shown[shown[column].isin(chosen)]
    left, right = st.columns([2, 1])
    with left:
        st.dataframe(shown, hide_index=True, width="stretch")
    with right:
        counts = shown["failure_type"].map(lambda code: TAXONOMY[code].label if code in TAXONOMY else code)
        fig = px.bar(
            counts.value_counts().rename_axis("failure type").reset_index(name="labels"),
            x="labels",
            y="failure type",
            orientation="h",
        )
        fig.update_layout(yaxis={"categoryorder": "total ascending"}, height=320, margin={"l": 0, "r": 0})
        st.plotly_chart(fig, width="stretch", key="annotation_counts")

    with st.expander("Review: accept or remove labels"):
        options = list(shown["id"])
        picked = st.selectbox(
            "Label", options, format_func=lambda i: _describe(shown.set_index("id").loc[i]), key="w_ann_pick"
        )
        if picked is not None:
            row = shown.set_index("id").loc[picked]
            b1, b2 = st.columns(2)
            if row["failure_type"] == "relevant_unjudged":
                wanted = not bool(row["accepted"])
                if b1.button("Accept as a qrels addition" if wanted else "Un-accept", key="w_ann_accept"):
                    store.set_accepted(int(picked), wanted)
                    st.rerun()
            if b2.button("Delete this label", key="w_ann_delete"):
                store.delete(int(picked))
                st.rerun()

st.subheader("Export and import")
e = st.columns(3)
e[0].download_button("All labels (CSV)", store.csv_text(), file_name="r2med_annotations.csv", mime="text/csv")
e[1].download_button(
    "All labels (JSONL)", store.jsonl_text(), file_name="r2med_annotations.jsonl", mime="application/jsonl"
)
e[2].download_button(
    f"Qrels additions for {dataset.name} (TREC)",
    store.qrels_additions_text(dataset.source, dataset.name),
    file_name=f"{dataset.name}_qrels_additions.txt",
    mime="text/plain",
    help="Accepted 'relevant but unjudged' labels as `qid 0 docid 1` lines, to extend the judgements.",
)
uploaded = st.file_uploader("Import labels exported as JSONL (merged; duplicates skipped)", type=["jsonl"])
if uploaded is not None and st.button("Import", key="w_ann_import"):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / uploaded.name
        path.write_bytes(uploaded.getvalue())
        report = store.import_jsonl(path)
    st.success(f"Imported {report.added} labels; {report.skipped_duplicates} duplicates skipped.")
    for problem in report.errors[:20]:
        st.error(ui.md(f"{uploaded.name}:{problem.line}: {problem.message}"))

st.subheader(f"Re-evaluation on {ui.md(dataset.name)}")
additions = store.qrels_additions(dataset.source, dataset.name)
n_added = sum(len(docs) for docs in additions.values())
if not n_added:
    st.caption("No accepted 'relevant but unjudged' labels on this task yet: the extended qrels equal the original.")
else:
    st.caption(f"{n_added} accepted additions on {len(additions)} queries.")
    rows = []
    for name in state.systems_in_play():
        computed = ui.safe_results(dataset, name)
        if computed is None:
            continue
        original, extended = reevaluate(computed[0], dataset.qrels, additions, dataset.name)
        for label, result in (("original qrels", original), ("with additions", extended)):
            rows.append(
                {"system": ui.system_label(name), "qrels": label}
                | {metric_label(m): result.means[m] for m in MAIN_METRICS}
            )
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
