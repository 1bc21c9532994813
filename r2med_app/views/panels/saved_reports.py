"""Saved reports on the Compare and Metrics pages: the HTML / LaTeX download buttons, and the upload
that reopens a saved report's runs. Everything is built by r2med_core.reporting.saved_report; this only renders.
"""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st
from streamlit.runtime.uploaded_file_manager import UploadedFile

from r2med_app.views import naming, notices, serving, state, work
from r2med_app.views.markup import md
from r2med_app.views.panels import auth
from r2med_core import DataError, Dataset, PairedTest, Results, Run
from r2med_core.evaluation import metric_label
from r2med_core.reporting.saved_report import TESTS, Report, ReportSystem, reopen_report
from r2med_core.runs import safe_name
from r2med_core.settings import load_settings

_SOURCES = {"demo": "embedded demo data", "local": "a local dataset folder", "hf": "R2MED on the Hugging Face hub"}
ALPHAS = (0.01, 0.05, 0.1)


def _settings(dataset: Dataset, extra: dict[str, str]) -> dict[str, str]:
    """What the numbers depend on, as the report lists it (never a server path)."""
    v = state.view()
    out = {"data source": _SOURCES.get(v.source, v.source), "task": dataset.name}
    if dataset.is_demo:
        out["note"] = "illustrative demo data, not R2MED's"
    out["query rewrite"] = v.rewrite or "off"
    return out | extra


def download_buttons(
    dataset: Dataset,
    computed: Sequence[tuple[Run, Results]],
    *,
    chosen: Sequence[str],
    metrics: Sequence[str],
    title: str,
    baseline_tests: Sequence[PairedTest] = (),
    extra_settings: dict[str, str] | None = None,
) -> None:
    """A test and alpha picker and the two downloads. The report (all-pairs tests, a 5 MB file) is
    built only when a button is clicked, once for both, and the page does not rerun for it.

    ``chosen``: every system the page shows; those not computed yet are named on the page and in the
    report, never left out silently."""
    if not computed:
        return
    done = {r.run_name for _, r in computed}
    left_out = [naming.system_label(name) for name in chosen if name not in done]
    if left_out:
        st.warning("Not in the report until computed (click **Compute** above): " + ", ".join(md(n) for n in left_out))
    metrics = list(dict.fromkeys(metrics))
    c = st.columns([1, 1, 1, 1], vertical_alignment="bottom")
    test = c[0].selectbox(
        "Report's test", list(TESTS), format_func=lambda t: TESTS[t].removeprefix("two-sided "), key="w_report_test"
    )
    alpha = c[1].selectbox("alpha", ALPHAS, index=ALPHAS.index(0.05), key="w_report_alpha")
    systems = [
        ReportSystem(
            r.run_name,
            naming.system_label(r.run_name),
            run,
            r,
            notices.fidelity_badge(dataset, r.run_name),
            work.get_provenance(dataset, r.run_name, run),
        )
        for run, r in computed
    ]
    report = Report(
        dataset,
        systems,
        metrics=metrics,
        test=test,
        alpha=alpha,
        settings=_settings(dataset, extra_settings or {}),
        baseline_tests=baseline_tests,
        title=title,
        prices=serving.settings().prices,
        left_out=left_out,
    )
    stem = f"{safe_name(dataset.name)}_{safe_name(title.lower())}"
    c[2].download_button(
        "Download report (HTML)",
        report.html,
        file_name=f"{stem}.html",
        mime="text/html",
        on_click="ignore",
        key=f"w_report_html_{title}",
        help="One file with the charts, tables and settings that opens offline; upload it on the Compare "
        "page to reopen its runs.",
    )
    c[3].download_button(
        "Download LaTeX table",
        report.latex,
        file_name=f"{stem}.tex",
        mime="text/x-tex",
        on_click="ignore",
        key=f"w_report_tex_{title}",
        help="A booktabs table: best in bold, superscript letters for significant wins over the lettered systems.",
    )
    st.caption(
        f"Both files test every pair of systems on {', '.join(metric_label(m) for m in metrics)} "
        f"({TESTS[test]}, alpha = {alpha:g}{', Holm correction over the pairs' if len(computed) > 2 else ''}), "
        "computed when you click (seconds per pair on a large task)."
    )


def reopen_section(dataset: Dataset) -> None:
    """Upload a saved HTML report: its runs come back as imported runs and are compared again."""
    state.show_flash()
    with st.expander("Reopen a saved report"):
        if serving.read_only():
            st.caption("Uploads are off on this public demo.")
            return
        uploaded = st.file_uploader(
            f"A report saved from the Compare or Metrics page (at most {load_settings().upload_max_mb:g} MB)",
            type=["html", "htm"],
            key="w_report_file",
        )
        if uploaded is not None and st.button("Reopen its runs", key="w_report_open"):
            reopen_upload(dataset, uploaded, rerun=True)


def reopen_upload(dataset: Dataset, uploaded: UploadedFile, *, rerun: bool) -> None:
    """Reopen an uploaded report's runs and select them (also for a report dropped on "Your runs").

    With ``rerun`` the page starts again so every widget shows the new runs, and the confirmation is
    shown once by :func:`state.show_flash`; otherwise it is shown here."""
    settings = load_settings()
    if uploaded.size > settings.upload_max_bytes:  # before the bytes are read
        st.error(f"{md(uploaded.name)} is over the {settings.upload_max_mb:g} MB upload limit.")
        return
    try:
        reopened = reopen_report(dataset, uploaded.getvalue(), uploaded.name, settings, auth.uploader())
    except DataError as err:
        st.error(f"{md(uploaded.name)} cannot be reopened:\n\n" + "\n".join(f"- {md(p)}" for p in err.problems[:20]))
        return
    v = state.view()
    v.systems = list(dict.fromkeys([*v.systems, *reopened.systems]))
    v.compare = reopened.systems
    message = (
        f"Reopened {len(reopened.systems)} runs from {md(uploaded.name)} as "
        + ", ".join(f"`{s}`" for s in reopened.systems)
        + " and selected them."
    )
    if reopened.warnings:
        message += "\n\nIgnored or not in the corpus:\n\n" + "\n".join(f"- {md(w)}" for w in reopened.warnings[:20])
    if not rerun:
        st.success(message)
        return
    v.flash = message
    st.rerun()
