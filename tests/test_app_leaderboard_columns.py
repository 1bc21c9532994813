"""The Leaderboard's paper table fits a 1440 px window: a column that says the same on every row
(where the files were found) is left out, and where it differs it comes first, so the last column on
screen is a task's score, not a cut-off note (AppTest; the widths were checked in Chromium)."""

from __future__ import annotations

from r2med_core.analysis.published import PUBLISHED_TASKS

from .test_app import open_app


def test_the_paper_table_ends_with_a_task_and_shows_origin_first_only_where_it_differs() -> None:
    at = open_app("leaderboard")
    retrievers = next(df.value for df in at.dataframe if "NV-Embed-v2" in df.value.index)
    assert list(retrievers.columns) == ["Avg", *PUBLISHED_TASKS]  # every retriever's files are in the repository
    at.selectbox(key="w_lb_kind").set_value("rewrite").run()
    rewrites = next(df.value for df in at.dataframe if "HyDE (o3-mini) + NV-Embed-v2" in df.value.index)
    assert list(rewrites.columns) == ["origin", "Avg", *PUBLISHED_TASKS]
    assert rewrites.loc["HyDE (o3-mini) + NV-Embed-v2", "origin"] == "first commit"
