"""Your runs: bring a run made elsewhere (a GPU cluster, the official kit, MTEB) into the app as a
system ``run:<name>``. Drawn in the sidebar; the runs themselves are found by r2med_core.imported_runs.
"""

from __future__ import annotations

import streamlit as st
from streamlit.runtime.uploaded_file_manager import UploadedFile

from r2med_app.views.markup import md
from r2med_app.views.panels import auth, saved_reports
from r2med_app.views.state import view
from r2med_core import DataError, Dataset
from r2med_core.imported_runs import (
    JSON_SUFFIXES,
    RUNS_DIR,
    TREC_SUFFIXES,
    RunEntry,
    available_runs,
    save_upload,
)
from r2med_core.settings import load_settings


def offered(dataset: Dataset) -> list[str]:
    """The ``run:<name>`` systems available for this dataset (uploads and the operator's runs folder)."""
    return [entry.system for entry in available_runs(dataset, load_settings()).values()]


def runs_section(dataset: Dataset) -> None:
    """The sidebar's "Your runs" expander: what is available, and an upload for a new run."""
    settings = load_settings()
    entries = list(available_runs(dataset, settings).values())
    me = auth.uploader()
    mine = [e for e in entries if e.uploaded_by_one_of([me])]
    others = [e for e in entries if not e.uploaded_by_one_of([me])]
    with st.expander(f"Your runs ({len(mine)})"):
        st.caption(
            f"A TREC run (`qid Q0 docid rank score tag`) or a `{{query id: {{doc id: score}}}}` JSON (MTEB "
            f"save_predictions, an evaluation kit's score file) for {md(dataset.name)} becomes a system named "
            "`run:<name>` on every page. The top 100 per query is evaluated, as in the benchmark. A report saved "
            "from Compare or Metrics (.html) brings back all of its runs."
        )
        for entry in mine:
            st.caption(f"`{entry.system}` · uploaded by you · {md(entry.label)}")
        if others:
            st.markdown(f"**Others' runs on this server ({len(others)})**")
            for entry in others:
                st.caption(f"`{entry.system}` · {md(_origin(entry))} · {md(entry.label)}")
        if settings.demo_mode:
            st.caption("Uploads are off on this public demo.")
            return
        uploaded = st.file_uploader(
            f"Upload a run (at most {settings.upload_max_mb:g} MB)",
            type=[s.lstrip(".") for s in (*TREC_SUFFIXES, *JSON_SUFFIXES, ".html", ".htm")],
            key="w_run_file",
        )
        if uploaded is not None and st.button("Add this run", key="w_run_add"):
            _add(dataset, uploaded)


def _origin(entry: RunEntry) -> str:
    """Where a run someone else brought comes from, in words."""
    if entry.origin == RUNS_DIR:
        return "the operator's runs folder"
    if not entry.uploaded_by:
        return "uploaded earlier (uploader not recorded)"
    return "uploaded by " + ", ".join(dict.fromkeys(auth.uploader_words(who) for who in entry.uploaded_by))


def _add(dataset: Dataset, uploaded: UploadedFile) -> None:
    """Validate and store the upload, select it, and say what was ignored (file:line)."""
    if uploaded.name.lower().endswith((".html", ".htm")):
        saved_reports.reopen_upload(dataset, uploaded, rerun=False)
        return
    settings = load_settings()
    file_name = uploaded.name
    if uploaded.size > settings.upload_max_bytes:  # before the bytes are parsed
        st.error(f"{md(file_name)} is over the {settings.upload_max_mb:g} MB upload limit.")
        return
    try:
        entry, imported = save_upload(dataset, uploaded.getvalue(), file_name, settings, auth.uploader())
    except DataError as err:
        st.error(
            f"{md(file_name)} cannot be added. Fix these and upload it again:\n\n"
            + "\n".join(f"- {md(p)}" for p in err.problems[:20])
        )
        return
    v = view()
    v.systems = list(dict.fromkeys([*v.systems, entry.system]))
    st.success(f"Added `{entry.system}` ({len(imported.run.rankings)} queries) and selected it.")
    if imported.warnings:
        st.warning("Ignored or not in the corpus:\n\n" + "\n".join(f"- {md(w)}" for w in imported.warnings[:20]))
