"""The team's judgements on the pages: read from the store through ``r2med_core.judging.team`` (its one
definition), and the re-evaluation original → team qrels that the Annotations and Adjudication pages
share, so every page shows the same team score for the same store."""

from __future__ import annotations

import streamlit as st

from r2med_app.views import annotation_db, naming, state, work
from r2med_app.views.markup import md
from r2med_core import Dataset
from r2med_core.evaluation import MAIN_METRICS, metric_label
from r2med_core.judging.annotations import AnnotationStoreError
from r2med_core.judging.pooling import ORIGINAL, TEAM, scores_with_team
from r2med_core.judging.team import TeamQrels, read_team_qrels


def read(dataset: Dataset) -> TeamQrels | None:
    """This task's team qrels; None (the reason shown) when the store is unavailable or unreadable."""
    store = annotation_db.annotation_store()
    if store is None:
        return None
    try:
        return read_team_qrels(store, dataset)
    except AnnotationStoreError as err:
        st.error(f"The team's judgements could not be read: {md(err)}")
        return None


def reevaluation(dataset: Dataset, team: TeamQrels) -> None:
    """Each system in play scored with the original qrels → the team's (``pooling.scores_with_team``, as
    the Metrics page's "with"), nDCG@10 as cards and the main metrics as a table."""
    st.subheader(f"Re-evaluation on {md(dataset.name)}")
    st.caption(f"With the team's judgements (not the benchmark's): {md(team.caption())}")
    if not team.changes:
        st.caption("The team's qrels equal the original ones on this task so far.")
        return
    runs = {name: c[0] for name in state.systems_in_play() if (c := work.results(dataset, name)) is not None}
    if not runs:
        st.caption("Choose systems in the sidebar to re-evaluate them.")
        return
    scores = scores_with_team(runs, dataset.qrels, team.qrels, metrics=MAIN_METRICS, dataset_name=dataset.name)
    ndcg = scores.set_index(["system", "qrels"])["ndcg_at_10"]
    cards = st.columns(4)
    for position, name in enumerate(runs):
        before, after = ndcg[(name, ORIGINAL)], ndcg[(name, TEAM)]
        cards[position % 4].metric(
            f"{naming.system_label(name)} · nDCG@10",
            f"{before:.3f} → {after:.3f}",
            delta=f"{after - before:+.3f}",
            help="Mean nDCG@10 with the original judgements → with the team's.",
        )
    shown = scores.assign(system=scores["system"].map(naming.system_label))
    st.dataframe(shown.rename(columns={m: metric_label(m) for m in MAIN_METRICS}), hide_index=True, width="stretch")
