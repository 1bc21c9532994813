"""Annotations: the review queue (proposals, accept or reject; disagreements go to adjudication),
agreement between annotators on grades and on failure types, every label with counts per type, exports,
import, and re-evaluation with the team's judgements (``r2med_core.judging.team``).
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.express as px
import streamlit as st

from r2med_app.views import annotation_db, datasets, routes, serving, state
from r2med_app.views.markup import md
from r2med_app.views.panels import auth, judge, team
from r2med_app.views.panels.labels import grade_label
from r2med_core.analysis.explore import shorten
from r2med_core.data import DataError
from r2med_core.judging.adjudication import adjudication_queue, history
from r2med_core.judging.agreement import VOCABULARIES, agreement
from r2med_core.judging.annotations import TAXONOMY, Annotation, AnnotationStoreError, labels_frame
from r2med_core.judging.backup import backup_text, restore_backup_bytes
from r2med_core.judging.identity import Action, PermissionDenied, Person
from r2med_core.judging.team import Proposal, qrels_text, review_queue
from r2med_core.reporting.figures import count_axis, plot_text
from r2med_core.reporting.review_tables import LABEL_KEY_COLUMNS, label_counts, labels_table
from r2med_core.settings import Settings, load_settings

QUEUE_PAGE = 20  # review items drawn at once
ALL = "(all)"


def _type_label(code: object) -> str:
    return TAXONOMY[code].label if code in TAXONOMY else str(code)


def _describe(row: pd.Series) -> str:
    target = row["doc_id"] if isinstance(row["doc_id"], str) else "(query)"
    return (
        f"#{row.name} · {row['task']} · query {row['query_id']} · {target} · {row['failure_type']} · {row['annotator']}"
    )


def _settings() -> Settings:
    try:
        return load_settings()
    except ValueError:
        return Settings()


def _person(action: Action) -> Person | None:
    """Who may do ``action`` now, or None with the reason left in the flash (shown on the page).

    Without sign-in, reviewing needs a typed name and managing the store needs nothing (as before)."""
    off = "Reviewing is off in this read-only demo." if action == "review" else "Off in this demo."
    return auth.permitted(action, off=off, records="reviews")


def _review(annotation_id: int, accept: bool, same: int) -> None:
    """Accept or reject one grade proposed on a pair (a button callback; the page then shows the result).
    The review is recorded on its first proposal and settles the ``same`` identical ones with it."""
    person, v = _person("review"), state.view()
    if person is None or store is None:
        return
    label = store.get(annotation_id)
    reviewer = person.name
    judged = dataset.qrels if (label.dataset, label.task) == (dataset.source, dataset.name) else None
    try:
        store.review(annotation_id, accept, reviewer, qrels=judged)
    except (PermissionDenied, ValueError, KeyError, AnnotationStoreError) as err:
        v.flash_error = f"Not reviewed: {md(err)}"
        return
    also = f", and with it {same - 1} identical proposal(s)" if same > 1 else ""
    v.flash = (
        f"{'Accepted' if accept else 'Rejected'} {md(_type_label(label.failure_type))} on {md(label.doc_id)} "
        f"as {md(reviewer)} (label #{annotation_id}{also})."
    )


def _delete(annotation_id: int) -> None:
    if _person("manage") is None:
        return
    try:
        store.delete(annotation_id)
    except (KeyError, AnnotationStoreError) as err:
        state.view().flash_error = f"Not deleted: {md(err)}"
        return
    state.view().flash = f"Deleted label #{annotation_id}."


def _label_line(a: Annotation) -> str:
    where = f" at rank {a.rank}" if a.rank else ""
    note = f" — “{shorten(a.note, 160)}”" if a.note.strip() else ""
    who = a.annotator if a.by_model else f"by {a.annotator}"  # an LLM judge's reads "proposed by <model>"
    return md(f"{_type_label(a.failure_type)} {who} · {a.system or 'no system'}{where}{note}")


def _queue_item(item: Proposal) -> None:
    _, task, query_id, doc_id = item.pair
    with st.container(border=True):
        st.markdown(f"**Proposed** · {md(task)} · query {md(query_id)} · document {md(doc_id)}")
        if task == dataset.name and query_id in dataset.queries:
            st.caption(md(shorten(dataset.queries[query_id], 200)))
        if sight.labelled(item.labels):
            st.caption("You labelled this: another reviewer settles it (nobody reviews their own label).")
        # One review per grade proposed: it settles the pair for every identical proposal, whoever made it.
        for grade, same in item.by_grade().items():
            first = same[0]
            row = st.columns([6, 1, 1])
            row[0].markdown("; ".join(_label_line(a) for a in same))
            for column, (name, accept) in zip(row[1:], (("Accept", True), ("Reject", False))):
                column.button(
                    name,
                    key=f"w_{name.lower()}_{first.id}",
                    on_click=_review,
                    args=(first.id, accept, len(same)),
                    type="primary" if accept else "secondary",
                    help=f"{name}s {grade_label(grade)} for this document, for all {len(same)} who proposed it.",
                    disabled=serving.read_only() or not sight.may_review(item.labels),
                )


dataset = datasets.current_dataset()
store = annotation_db.annotation_store()
v = state.view()
st.title("Annotations")
if store is None:
    st.stop()
acting = auth.acting()
# Who may be told the server's path or database host is the core's rule (visibility.Sight.store_place).
where = acting.sight.store_place(store.location, public=serving.read_only())
st.caption(f"Stored {md(where)} ({store.kind}). Label queries and documents from the Query explorer.")
state.show_flash()
may_manage = not acting.signed_in_mode or (acting.person is not None and acting.person.may("manage"))

# Who sees which labels, proposals, figures and downloads is r2med_core.judging.visibility's rule (roles, signed
# out, blind per unit); this page only asks it.
sight = acting.sight
everything = sight.labels(store.list())
if sight.notice():
    st.info(md(sight.notice()), icon=":material/visibility_off:")

# ------------------------------------------------------------------ rows that break a rule
seen = {a.id for a in everything}
flagged = [(a, problems) for a, problems in store.flagged() if a.id in seen]
if flagged:
    st.warning(
        f"{len(flagged)} stored label(s) break a rule (written by another tool, an older version or by hand). "
        "A TREC qrels file cannot hold them; delete them here, or fix them in a JSONL export and import it."
    )
    st.dataframe(
        pd.DataFrame(
            [
                {"id": a.id, "task": a.task, "query": a.query_id, "document": a.doc_id, "problem": "; ".join(p)}
                for a, p in flagged
            ]
        ),
        hide_index=True,
        width="stretch",
    )
    bad = st.selectbox("Flagged label", [a.id for a, _ in flagged], key="w_ann_flagged")
    st.button(
        "Delete the flagged label",
        key="w_ann_flag_delete",
        on_click=_delete,
        args=(bad,),
        disabled=serving.read_only() or not may_manage,
    )

# ------------------------------------------------------------------ who is reviewing
auth.reviewer_line(
    acting,
    verb="review labels",
    recorded="Reviews are recorded",
    own="reviews their own label",
    placeholder="recorded with every review",
    name_help="Asked once and kept for this session (also used when you label in the Query explorer).",
)


def _downloads(columns: list) -> None:  # type: ignore[type-arg]
    """Every label (CSV, JSONL) and the full backup for whoever may export the whole store; the task's team
    qrels (TREC) for whoever reviews (``sight``, r2med_core.judging.visibility's rule)."""
    e = columns
    if sight.exports_store:
        e[0].download_button("All labels (CSV)", store.csv_text(), file_name="r2med_annotations.csv", mime="text/csv")
        e[1].download_button(
            "All labels (JSONL)", store.jsonl_text(), file_name="r2med_annotations.jsonl", mime="application/jsonl"
        )
    if sight.reviews and judged is not None:
        try:
            text = qrels_text(judged.qrels, f"{dataset.name} team qrels")
        except DataError as err:
            e[2].error(md(err))
        else:
            e[2].download_button(
                f"Team qrels for {dataset.name} (TREC)",
                text,
                file_name=f"{dataset.name}_team_qrels.txt",
                mime="text/plain",
                help="The whole qrels as the team judges them (as `python -m r2med_core qrels` writes them): "
                + judged.caption(),
            )
    if sight.exports_store:
        st.download_button(
            "Download a full backup",
            backup_text(store),
            file_name="r2med_backup.jsonl",
            mime="application/jsonl",
            help="Labels, every adjudication decision with its history, and the judging queue; restore it below.",
        )
    else:
        st.caption(
            "Every label and the full backup are downloaded by admins: they hold the whole store"
            + ("." if sight.reviews else "; the team's qrels by reviewers.")
        )


# ------------------------------------------------------------------ review queue
st.subheader("Review queue")
st.caption(
    "A grade above 0 that only one annotator (or the LLM judge) gave is a proposal: it counts once a reviewer "
    "accepts it, and accepting settles the document for everyone who proposed the same grade. Grades two or "
    "more annotators agree on count without a review; where they disagree, a reviewer decides on the "
    "Adjudication page (the labels are kept as saved)."
)
tasks = sorted({str(a.task) for a in everything})
annotators = sorted({str(a.annotator) for a in everything})
q1, q2 = st.columns(2)
task_filter = q1.selectbox("Task", [ALL, *tasks], key="w_queue_task")
who_filter = q2.selectbox("Annotator", [ALL, *annotators], key="w_queue_annotator")
decisions = history(store)
queue = review_queue(
    everything,
    decisions,
    qrels={(dataset.source, dataset.name): dataset.qrels},
    task=None if task_filter == ALL else task_filter,
    annotator=None if who_filter == ALL else who_filter,
)
disputed = adjudication_queue(everything, decisions, task=None if task_filter == ALL else task_filter)
if disputed:
    st.page_link(
        routes.page("adjudication"),
        label=f"{len(disputed)} unit(s) where annotators disagree wait on the Adjudication page",
    )
if not queue:
    st.caption("Nothing to review.")
for item in queue[:QUEUE_PAGE]:
    _queue_item(item)
if len(queue) > QUEUE_PAGE:
    st.caption(f"Showing the oldest {QUEUE_PAGE} of {len(queue)} items; the next appear as these are reviewed.")

# ------------------------------------------------------------------ LLM relevance proposals
if sight.reviews:  # the model's proposals are review work, and would show judgements
    judge.panel(dataset, store)

# ------------------------------------------------------------------ agreement


def _agreement(labels: list[Annotation]) -> None:
    """Cohen's kappa per annotator pair and Fleiss' kappa, on the grades and on the failure types apart
    (blind labels only, with sign-in)."""
    blind = acting.signed_in_mode
    measured = {vocabulary: agreement(labels, vocabulary, blind_only=blind) for vocabulary in VOCABULARIES}
    if acting.signed_in_mode:
        st.caption(
            "Blind per document: only labels saved while their annotator had not seen the judgements, others' "
            "labels or the model's proposals on that query or document are counted."
        )
    if not any(m.pairs for m in measured.values()):
        st.caption("Appears when two or more annotators grade the same document, or label the same query or document.")
        return

    def _kappa(value: float) -> str:
        return "undefined" if math.isnan(value) else f"{value:.2f}"

    st.dataframe(
        pd.DataFrame(
            [
                {
                    "ratings": f"{vocabulary}s",
                    "annotators": f"{p.annotator_a} · {p.annotator_b}",
                    "shared items": p.units,
                    "same rating": p.agreed,
                    "Cohen's kappa": _kappa(p.kappa),
                }
                for vocabulary, m in measured.items()
                for p in m.pairs
            ]
        ),
        hide_index=True,
        width="stretch",
    )
    for vocabulary, m in measured.items():
        if m.group is not None:
            st.caption(
                f"Fleiss' kappa on {vocabulary}s over {m.group.units} items rated by {len(m.group.annotators)} "
                f"annotators ({md(', '.join(m.group.annotators))}): {_kappa(m.group.kappa)}."
            )
    shared = " and ".join(f"{m.shared_units} on {vocabulary}s" for vocabulary, m in measured.items())
    st.caption(
        f"Items rated by two or more annotators: {shared} (a grade counts as the grade it is, whichever page "
        "gave it). Kappa: 1 = full agreement, 0 = no more than chance; undefined with fewer than two shared "
        "items or when an annotator gave one rating throughout (it then says nothing). "
        "Disagreements wait on the Adjudication page."
    )


st.subheader("Agreement between annotators")
if sight.reviews:
    _agreement(everything)
else:
    st.caption("Agreement figures are for reviewers.")

# ------------------------------------------------------------------ every label
table = labels_frame(everything)
if table.empty and sight.notice():
    st.caption("No labels to show you (see above).")
elif table.empty:
    st.info("No labels yet. Open the Query explorer, pick a query and grade a document or label a failure under it.")
else:
    st.subheader("All labels")
    c = st.columns(4)
    filters = {
        "task": c[0].multiselect("Task", sorted(map(str, table["task"].unique())), key="w_ann_task"),
        "failure_type": c[1].multiselect(
            "Failure type",
            sorted(map(str, table["failure_type"].unique())),
            format_func=_type_label,
            key="w_ann_type",
        ),
        "system": c[2].multiselect("System", sorted(map(str, table["system"].unique())), key="w_ann_system"),
        "annotator": c[3].multiselect("Annotator", sorted(map(str, table["annotator"].unique())), key="w_ann_by"),
    }
    shown = table
    for column, chosen in filters.items():
        if chosen:
            shown = shown[shown[column].astype(str).isin(chosen)]
    # What matters first (r2med_core.reporting.review_tables): the unit and what was said on it stay pinned while
    # the rest scrolls; the chart goes beside the table only where both have room (look.WIDE_PX), else under it.
    left, right = st.container(key="r2-wide-labels").columns([2, 1])
    with left:
        st.dataframe(
            labels_table(shown),
            hide_index=True,
            width="stretch",
            column_config={name: st.column_config.Column(pinned=True) for name in LABEL_KEY_COLUMNS}
            | {"note": st.column_config.Column(width="medium")},
        )
    with right:
        counts = label_counts(shown["failure_type"])
        fig = px.bar(
            counts.assign(label=counts["label"].map(plot_text)),
            x="labels",
            y="label",
            color="ratings",
            orientation="h",
            title="Labels by grade and failure type",
            labels={"label": "", "labels": "labels", "ratings": ""},
            category_orders={"label": [plot_text(label) for label in counts["label"]]},
        )
        fig.update_layout(
            xaxis=count_axis(int(counts["labels"].max()) if len(counts) else 0),
            yaxis={"automargin": True, "dtick": 1},  # every label, whole (margin 0 cut "Grade 0" to "rade 0")
            height=160 + 30 * len(counts),
            margin={"r": 0},
            # Inside, bottom right: the bars are sorted longest first, so the shortest leave that corner free.
            legend={"yanchor": "bottom", "y": 0.02, "xanchor": "right", "x": 0.98, "title": None},
        )
        st.plotly_chart(fig, width="stretch", key="annotation_counts")

    with st.expander("Delete a label"):
        options = list(shown["id"])
        picked = st.selectbox(
            "Label", options, format_func=lambda i: _describe(shown.set_index("id").loc[i]), key="w_ann_pick"
        )
        if picked is not None:
            if not serving.read_only() and may_manage:
                st.button("Delete this label", key="w_ann_delete", on_click=_delete, args=(int(picked),))

# ------------------------------------------------------------------ exchange
judged = team.read(dataset)
st.subheader("Export and import")
_downloads(st.columns(3))
if serving.read_only():
    st.caption("Importing labels is off in this read-only demo.")
elif not may_manage:
    st.caption("Importing labels needs the admin role.")
limit = _settings().upload_max_bytes


def _uploader(label: str, key: str):  # type: ignore[no-untyped-def]
    """A JSONL upload within the limit, for a manager only (never in the read-only demo)."""
    if serving.read_only() or not may_manage:
        return None
    return st.file_uploader(
        f"{label}; at most {limit / 2**20:g} MB)",
        type=["jsonl"],
        max_upload_size=max(1, math.ceil(limit / 2**20)),
        key=key,
    )


uploaded = _uploader("Import labels exported as JSONL (merged; duplicates skipped", "w_ann_upload")
if uploaded is not None and st.button("Import", key="w_ann_import") and _person("manage") is not None:
    shown_name = md(uploaded.name)  # only ever shown, never used as a path
    try:
        if uploaded.size > limit:
            raise DataError([])
        report = store.import_jsonl_bytes(uploaded.getvalue(), uploaded.name, max_bytes=limit)
    except DataError:
        st.error(
            f"{shown_name} is {uploaded.size / 2**20:.2f} MB, over the {limit / 2**20:.2f} MB upload limit "
            "(R2MED_UPLOAD_MAX_MB). Split it, or ask the operator to raise the limit."
        )
    except AnnotationStoreError as err:
        st.error(f"Import stopped: {md(err)}. Labels imported before this are kept; importing again skips them.")
    else:
        st.success(
            f"Imported {report.added} labels from {shown_name}; {report.skipped_duplicates} duplicates skipped"
            + (f"; {len(report.errors)} line(s) could not be read (below)." if report.errors else ".")
        )
        for problem in report.errors[:20]:
            st.error(md(f"{uploaded.name}:{problem.line}: {problem.message}"))
        if len(report.errors) > 20:
            st.caption(f"… and {len(report.errors) - 20} more bad lines.")

backup = _uploader("Restore a full backup (merged; what is already here is kept", "w_ann_restore_upload")
if backup is not None and st.button("Restore", key="w_ann_restore") and _person("manage") is not None:
    try:
        restored = restore_backup_bytes(store, backup.getvalue(), backup.name, max_bytes=limit)
    except DataError as err:
        for problem in err.problems[:20]:
            st.error(md(str(problem)))
    except AnnotationStoreError as err:
        st.error(f"Restore stopped: {md(err)}. What was restored is kept; restoring again adds the rest.")
    else:
        st.success(
            f"Restored from {md(backup.name)}: {restored.labels_added} labels, {restored.decisions_added} "
            f"decisions, {restored.queue_added} queued documents added; "
            f"{restored.labels_present + restored.decisions_present + restored.queue_present} already here."
        )
        for problem in restored.errors[:20]:
            st.error(md(str(problem)))
        if len(restored.errors) > 20:
            st.caption(f"… and {len(restored.errors) - 20} more bad lines.")

# ------------------------------------------------------------------ re-evaluation
if judged is not None:
    team.reevaluation(dataset, judged)
