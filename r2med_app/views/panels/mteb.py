"""The Leaderboard's MTEB part: MTEB's runs of R2MED per task with their source and versions, the gain per
task over a chosen model, and the models both MTEB and the paper ran, with why their numbers differ.
Everything shown comes from ``r2med_core.analysis.mteb`` and ``mteb_protocols``; this file only draws it."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from r2med_app.views.markup import md
from r2med_core.analysis.mteb import MTEB_LABEL, mteb_board, mteb_gains_over, mteb_source
from r2med_core.analysis.mteb_names import METRIC_TO_MTEB
from r2med_core.analysis.mteb_protocols import protocol_comparisons, protocol_table
from r2med_core.analysis.published import PUBLISHED_TASKS, TASK_HEADERS, task_help
from r2med_core.data import DataError
from r2med_core.evaluation import metric_label
from r2med_core.reporting.mteb_files import EXPORT_LABEL, mteb_result_board, read_mteb_result


def _signed(frame: pd.DataFrame, columns: list[str]) -> object:
    """``columns`` as signed points, green up and red down (the post-paper gains' look); the rest as numbers."""

    def colour(value: object) -> str:
        if not isinstance(value, float) or pd.isna(value) or value == 0:
            return ""
        return f"color: {'#1a7f37' if value > 0 else '#cf222e'}"

    numbers = [c for c in frame.columns if frame[c].dtype.kind == "f" and c not in columns]
    styled = frame.style.format("{:+.2f}", na_rep="", subset=columns).map(colour, subset=columns)
    return styled.format("{:.2f}", na_rep="", subset=numbers) if numbers else styled


def mteb_section(metric: str) -> None:
    """Draw the MTEB part for ``metric`` (nDCG@10 when MTEB does not report it)."""
    shown = metric if metric in METRIC_TO_MTEB else "ndcg_at_10"
    source = mteb_source()
    st.subheader("MTEB's runs of R2MED")
    st.caption(
        f"**{MTEB_LABEL}.** {md(source['attribution'])} Read from {md(source['source'])} at commit "
        f"`{source['commit'][:12]}` ({source['commit_date'][:10]}); {metric_label(shown)} × 100"
        + ("" if shown == metric else f" ({metric_label(metric)} has no MTEB counterpart)")
        + "."
    )
    board = mteb_board(shown)
    # The scores alone fit a 1000 px window; each row's source and versions are in words below it.
    st.dataframe(
        board[["Avg", *PUBLISHED_TASKS]],
        width="stretch",
        column_config={
            "Avg": st.column_config.NumberColumn("Avg", format="%.2f", help="The mean over the 8 tasks."),
            **{
                t: st.column_config.NumberColumn(TASK_HEADERS[t], format="%.2f", help=task_help(t))
                for t in PUBLISHED_TASKS
            },
        },
    )
    flagged = board[board["dataset revisions"] != ""]
    with st.expander(
        f"Source and versions of each row ({len(flagged)} ran on a dataset revision that is not this app's)"
    ):
        for model, row in board.iterrows():
            paper = f"; the paper's `{row['in the paper']}`" if row["in the paper"] else ""
            flag = f"  \n⚠ {md(row['dataset revisions'])}" if row["dataset revisions"] else ""
            st.markdown(
                f"**{md(model)}**: model revision `{row['revision']}`, mteb {md(row['mteb_version'])}, "
                f"files {md(row['files'])}{paper}{flag}"
            )
    models = board.index.tolist()
    reference = st.selectbox(
        "MTEB: gain per task over",
        models,
        index=models.index("BAAI/bge-large-en-v1.5"),
        key="w_lb_mteb_reference",
        help="Each MTEB row minus this one, task by task: where a model's gain comes from.",
    )
    st.dataframe(
        _signed(gains := mteb_gains_over(reference, shown), list(gains.columns)),
        width="stretch",
        column_config={t: st.column_config.Column(TASK_HEADERS[t], help=task_help(t)) for t in PUBLISHED_TASKS},
    )
    st.caption(f"{metric_label(shown)} × 100 minus {md(reference)}'s, per task and on the average (MTEB's runs).")

    st.subheader("Same model, two protocols: the paper and MTEB")
    table = protocol_table(shown)
    st.dataframe(
        _signed(table[["gap Avg", *PUBLISHED_TASKS]], ["gap Avg", *PUBLISHED_TASKS]),
        width="stretch",
        column_config={t: st.column_config.Column(TASK_HEADERS[t], help=task_help(t)) for t in PUBLISHED_TASKS},
    )
    st.caption(
        f"{metric_label(shown)} × 100: MTEB's number minus the paper's, per task and on the average. Blank: the "
        "paper did not publish that metric for that model. Why they differ, from the two codebases:"
    )
    for comparison in protocol_comparisons(shown):
        task, gap = comparison.largest_gap
        row = table.loc[comparison.paper_label]
        averages = f"paper {row['paper Avg']:.2f}, MTEB {row['MTEB Avg']:.2f}"
        verdict = "equal on every task" if comparison.equal else f"largest gap {gap:+.2f} on {task}"
        with st.expander(f"{comparison.paper_label} ({comparison.model}): {averages}; {verdict}"):
            for reason in comparison.reasons:
                st.markdown(
                    f"**{md(reason.aspect)}**: paper: {md(reason.paper)}; MTEB: {md(reason.mteb)}  \n"
                    f"Sources: {md('; '.join(reason.sources))}"
                )
            for words in comparison.not_found:
                st.markdown(f"*{md(words)}*")


def your_mteb_results(metric: str) -> None:
    """Result files a visitor made with ``mteb run`` (or this app's ``mteb-export``), read in memory as rows of
    their own: nothing is stored, and a bad file is refused here naming the file and the field."""
    shown = metric if metric in METRIC_TO_MTEB else "ndcg_at_10"
    st.subheader("Your MTEB result files")
    uploads = st.file_uploader(
        "MTEB result files (<TaskName>.json, as `mteb run` writes them)",
        type=["json"],
        accept_multiple_files=True,
        key="w_lb_mteb_files",
        help="Shown here only, for this session. Their predictions files (<TaskName>_predictions.json) are runs: "
        "add them under **Your runs** in the sidebar to browse them per query.",
    )
    files = []
    for upload in uploads or []:
        try:
            files.append(read_mteb_result(upload.getvalue(), upload.name))
        except DataError as err:
            st.error("\n\n".join(md(str(problem)) for problem in err.problems))
    if files:
        board = mteb_result_board(files, shown)
        st.dataframe(board[["task", shown, "mteb_version", "data", "made by"]], width="stretch")
        st.caption(f"{metric_label(shown)} × 100 as each file holds it, not re-scored here: {md(EXPORT_LABEL)}.")
