"""Adjudication: reviewers settle units whose annotators disagree — on a document's grade, or on a failure
type — (the labels are never changed), see agreement before and after, download the team's qrels changes
and the raw labels, and see the re-evaluation with the team's judgements (``r2med_core.judging.team``)."""

from __future__ import annotations

import streamlit as st

from r2med_app.views import annotation_db, datasets, markup, serving, state
from r2med_app.views.markup import md
from r2med_app.views.panels import auth, team
from r2med_app.views.panels.labels import grade_label
from r2med_core.analysis.explore import shorten
from r2med_core.judging.adjudication import (
    AdjudicationItem,
    Decision,
    StaleDecision,
    adjudication_items,
    decide,
    decisions_csv,
    describe,
    history,
)
from r2med_core.judging.agreement import agreement_report, report_csv
from r2med_core.judging.annotations import GRADES, TAXONOMY, Annotation, AnnotationStoreError, failure_types, grade_code
from r2med_core.judging.hard import SHOWN, hard_items
from r2med_core.judging.identity import PermissionDenied, Person
from r2med_core.judging.team import changes_csv, changes_text
from r2med_core.reporting.review_tables import agreement_table, hard_table

PAGE = 20  # units drawn at once
ALL = "(all)"
KEEP_GRADE = "keep"  # the grade choice "leave the judgements as they are"


def _type_label(code: object) -> str:
    return TAXONOMY[code].label if code in TAXONOMY else str(code)


def _grade_label(choice: object) -> str:
    return "leave the judgement as it is" if choice == KEEP_GRADE else f"grade {choice}"


def _reviewer() -> Person | None:
    """Who may adjudicate now, or None with the reason left in the flash (shown on the page)."""
    return auth.permitted("review", off="Adjudicating is off in this read-only demo.", records="decisions")


def _keys(item: AdjudicationItem) -> dict[str, str]:
    # Keyed by the unit and vocabulary only: when another decision lands meanwhile, what the reviewer chose is kept.
    within = state.scope(*item.unit, item.vocabulary)
    return {name: state.widget_key(f"adj_{name}", within) for name in ("type", "grade", "reason")}


def _record(item: AdjudicationItem) -> None:
    """Save the decision typed in ``item``'s form (a submit callback); on failure the form keeps it all."""
    v, keys = state.view(), _keys(item)
    person = _reviewer()
    if person is None or store is None:
        return
    grade = st.session_state.get(keys["grade"], KEEP_GRADE)
    if item.vocabulary == "grade":  # a disagreement on the grade is settled by one
        code = None if grade in (None, KEEP_GRADE) else grade_code(int(grade))
    else:
        code = st.session_state.get(keys["type"])
    if code is None:
        v.flash_error = f"Not saved: choose the adjudicated {item.vocabulary}."
        return
    try:
        made = decide(
            store,
            item.unit,
            code,
            person.name,
            grade=None if grade in (None, KEEP_GRADE) else int(grade),
            reason=st.session_state.get(keys["reason"], ""),
            replacing=item.decision.id if item.decision else None,
        )
    except (PermissionDenied, StaleDecision, ValueError, AnnotationStoreError) as err:
        v.flash_error = f"Not saved: {md(err)}. Your choice is kept below."
        return
    for key in keys.values():  # saved: the form starts empty again (a choice is never carried over)
        st.session_state.pop(key, None)
    replaced = f", superseding decision #{made.supersedes}" if made.supersedes else ""
    v.flash = (
        f"Decision #{made.id} recorded for {md(describe(item.unit))}: {md(_type_label(code))} "
        f"by {md(made.reviewer)}{replaced}. The labels are kept as they were."
    )


def _label_line(a: Annotation) -> str:
    note = f" — “{shorten(a.note, 160)}”" if a.note.strip() else ""
    blind = " · blind" if a.blind else ""
    who = a.annotator if a.by_model else f"by {a.annotator}"  # a model's reads "proposed by <model>"
    return md(f"{_type_label(a.failure_type)} {who} · {a.system or 'no system'}{blind}{note}")


def _decision_line(d: Decision) -> str:
    grade = "" if d.grade is None else f" · grade {d.grade}"
    reason = f" — “{shorten(d.reason, 200)}”" if d.reason else ""
    return md(f"#{d.id}: {_type_label(d.failure_type)}{grade} by {d.reviewer} at {d.decided_at}{reason}")


def _item(item: AdjudicationItem) -> None:
    _, task, query_id, doc_id = item.unit
    with st.container(border=True):
        target = f"document {doc_id}" if doc_id is not None else "the whole query"
        why = "an annotator is unsure" if item.unsure else f"{item.vocabulary}s differ"
        st.markdown(f"**{md(task)}** · query {md(query_id)} · {md(target)} · {why}")
        if task == dataset.name and query_id in dataset.queries:
            st.caption(md(shorten(dataset.queries[query_id], 200)))
        for label in item.labels:
            st.markdown("- " + _label_line(label))
        for suggestion in item.suggestions:  # a model's proposal: shown to help, never a vote
            st.caption("Suggestion, not a judgement: " + _label_line(suggestion))
        if item.decision is not None:
            st.caption("Standing decision " + _decision_line(item.decision))
            if item.reopened:
                st.warning("New labels arrived after this decision: it needs another look.")
        if sight.labelled(item.labels):
            st.caption("You labelled this unit: another reviewer decides it (nobody adjudicates their own label).")
        keys = _keys(item)
        with st.form(state.widget_key("adj_form", keys["type"].split(".", 1)[1]), clear_on_submit=False):
            c1, c2 = st.columns(2)
            judged = dataset.qrels.get(query_id, {}).get(doc_id) if task == dataset.name and doc_id else None
            now = "not judged" if judged is None else f"grade {judged}"
            if item.vocabulary == "grade":
                c1.selectbox(
                    "Adjudicated grade",
                    GRADES,
                    index=None,
                    placeholder="Choose the grade",
                    format_func=grade_label,
                    key=keys["grade"],
                    help=f"The team's judgement of the pair (judged in the qrels now: {now}).",
                )
            else:
                c1.selectbox(
                    "Adjudicated failure type",
                    failure_types(),
                    index=None,
                    placeholder="Choose the failure type",
                    format_func=_type_label,
                    key=keys["type"],
                )
            if doc_id is not None and item.vocabulary != "grade":
                c2.selectbox(
                    "Judgement",
                    [KEEP_GRADE, *GRADES],
                    format_func=_grade_label,
                    key=keys["grade"],
                    help="The grade the pair deserves; the team's qrels take it as an addition (not judged yet) or "
                    f"a correction (judged). Judged now: {now}.",
                )
            st.text_input("Reason (optional)", key=keys["reason"], max_chars=2000)
            st.form_submit_button(
                "Record decision" if item.decision is None else "Record a new decision (supersedes)",
                on_click=_record,
                args=(item,),
                type="primary",
                disabled=serving.read_only() or not sight.may_review(item.labels),
            )


dataset = datasets.current_dataset()
store = annotation_db.annotation_store()
st.title("Adjudication")
if store is None:
    st.stop()
st.caption(
    "Where annotators give a document different grades, or an annotator is unsure of one, or label a query "
    "or a (query, document) with different failure types, a reviewer records the decision: the grade, or the "
    "failure type (for a document optionally with the judgement grade), and why. Decisions are kept with their "
    "history (a later one supersedes, never overwrites); every label stays as it was saved."
)
state.show_flash()
acting = auth.acting()

auth.reviewer_line(
    acting,
    verb="adjudicate",
    recorded="Decisions are recorded",
    own="adjudicates their own label",
    placeholder="recorded with every decision",
    name_help="Asked once and kept for this session.",
)
sight = acting.sight  # who sees what: r2med_core.judging.visibility's rule
if not sight.reviews:  # disagreements, decisions, agreement figures and their downloads are review work
    st.info(md(sight.notice()), icon=":material/visibility_off:")
    st.stop()

labels = sight.labels(store.list())
decisions = history(store)
tasks = sorted({str(a.task) for a in labels})
task_filter = st.selectbox("Task", [ALL, *tasks], key="w_adj_task")
items = adjudication_items(labels, decisions, task=None if task_filter == ALL else task_filter)
waiting = [item for item in items if item.waiting]
decided = [item for item in items if not item.waiting]

st.subheader(f"Waiting for a decision ({len(waiting)})")
if not waiting:
    st.caption("Nothing to adjudicate: no unit where annotators disagree is undecided.")
for item in waiting[:PAGE]:
    _item(item)
if len(waiting) > PAGE:
    st.caption(f"Showing the oldest {PAGE} of {len(waiting)}; the next appear as these are decided.")

if decided:
    with st.expander(f"Decided ({len(decided)}) — history, and superseding a decision"):
        for item in decided[:PAGE]:
            same = (item.unit, item.vocabulary)
            earlier = [d for d in decisions if d.item == same and d.id != (item.decision and item.decision.id)]
            if earlier:
                st.caption("Superseded: " + "; ".join(_decision_line(d) for d in earlier))
            _item(item)

# ------------------------------------------------------------------ hard items (review work: past the Sight check)
hard = hard_items(labels, task=None if task_filter == ALL else task_filter)
st.subheader(f"Hard items ({len(hard)})")
st.caption(
    "The documents that took annotators longest and on which they disagreed: the median time they spent on "
    "a document times the share of pairs of them who gave different grades (an unsure agrees with nobody). "
    "Worth a second look, and where the guideline may need sharpening. Only documents graded by two or more "
    f"people with a time recorded (the Judging page records it) and not all agreed on; the hardest {SHOWN} first."
)
if hard:  # at most SHOWN rows: shown whole, wrapped in the column (a grid hid its last columns at 1000 px)
    markup.table(hard_table(hard), hide_index=True)

# ------------------------------------------------------------------ agreement before / after
st.subheader("Agreement before and after adjudication")
blind_only = acting.signed_in_mode
report = agreement_report(labels, decisions, blind_only=blind_only)
st.caption(
    "Per task, on grades and on failure types apart, per annotator pair (Cohen's kappa), and for three or more "
    "annotators on the same items (Fleiss' kappa); a grade counts as the grade it is, whichever page gave it. "
    "**Before**: the labels as saved"
    + (" (blind labels only, as with sign-in)" if blind_only else "")
    + ". **After**: on every decided item each of these labels says what the decision says; the same "
    "items and pairs are counted, only the ratings differ. Undefined (one rating only) is left empty."
)
if not report:
    st.caption("Appears when two or more annotators grade the same document, or label the same query or document.")
else:  # one row per pair: shown whole, wrapped in the column ("kappa after" was past the edge at 1000 px)
    markup.table(agreement_table(report), hide_index=True)
    st.download_button("Agreement report (CSV)", report_csv(report), file_name="r2med_agreement.csv", mime="text/csv")

# ------------------------------------------------------------------ exports
st.subheader("Downloads")
judged = team.read(dataset)
if judged is not None:
    st.caption(
        f"On {md(dataset.name)}, the team's qrels (`r2med_core.judging.team`): {md(judged.caption())} "
        "The TREC file lists `qid 0 docid grade` lines to apply after the original qrels (each overrides the pair's "
        "grade); the CSV adds the original grade, where each line comes from and the decision or review behind it."
    )
d = st.columns(4)
if judged is not None:
    d[0].download_button(
        f"Team qrels changes for {dataset.name} (TREC)",
        changes_text(judged.changes),
        file_name=f"{dataset.name}_team_qrels_changes.txt",
        mime="text/plain",
    )
    d[1].download_button(
        "Team qrels changes (CSV)",
        changes_csv(judged.changes),
        file_name=f"{dataset.name}_team_qrels_changes.csv",
        mime="text/csv",
    )
d[2].download_button(
    "Every decision with history (CSV)", decisions_csv(decisions), file_name="r2med_decisions.csv", mime="text/csv"
)
if sight.exports_store:
    d[3].download_button("Raw labels (CSV)", store.csv_text(), file_name="r2med_annotations.csv", mime="text/csv")
else:
    d[3].caption("The raw labels (the whole store) are downloaded by admins.")

# ------------------------------------------------------------------ re-evaluation
if judged is not None:
    team.reevaluation(dataset, judged)
