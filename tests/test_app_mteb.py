"""The Leaderboard's MTEB part (issue 39 items 1-2): MTEB's 26 models per task with source and versions,
the gain per task, and the paper-vs-MTEB view with a reason per difference (AppTest)."""

from __future__ import annotations

import pytest

from r2med_core.analysis.mteb import mteb_source
from r2med_core.analysis.published import PUBLISHED_TASKS, published_score

from .test_app import open_app


def test_the_leaderboard_shows_mteb_runs_with_source_versions_and_the_two_protocols() -> None:
    at = open_app("leaderboard")
    board = next(df.value for df in at.dataframe if "mteb/baseline-bm25s" in df.value.index and "Avg" in df.value)
    assert len(board) == 26 and board.index[0] == "Alibaba-NLP/gte-Qwen2-7B-instruct"
    assert board.loc["mteb/baseline-bm25s", "Biology"] == pytest.approx(8.034)
    sources = next(e for e in at.expander if e.label.startswith("Source and versions of each row"))
    assert "(20 ran on a dataset revision that is not this app's)" in sources.label
    grit = next(m.value for m in sources.markdown if m.value.startswith("**GritLM/GritLM\\-7B**")).replace("\\", "")
    assert "mteb 1.38.20" in grit and "13f00a0e36500c80ce12870ea513846a066004af" in grit and "edited by hand" in grit
    captions = " ".join(c.value for c in at.caption)
    assert "MTEB's run, not the benchmark's evaluation" in captions and mteb_source()["commit"][:12] in captions
    mteb_frames = [df.value for df in at.dataframe if "BAAI/bge-small-en-v1.5" in df.value.index]
    gains = next(f for f in mteb_frames if "BAAI/bge-large-en-v1.5" not in f.index)  # each row minus bge-large
    assert gains.loc["BAAI/bge-small-en-v1.5", "Avg"] == pytest.approx(
        board.loc["BAAI/bge-small-en-v1.5", "Avg"] - board.loc["BAAI/bge-large-en-v1.5", "Avg"]
    )
    protocols = next(df.value for df in at.dataframe if "gap Avg" in df.value)
    assert set(protocols.index) == {
        "BM25",
        "SFR-Embedding-Mistral",
        "GritLM-7B",
        "e5-mistral-7b-instruct",
        "bge-large-en-v1.5",
    }
    assert protocols.loc["BM25", "Biology"] == pytest.approx(
        8.034 - 100 * published_score("bm25", "Biology", "ndcg_at_10"), abs=1e-6
    )
    assert list(protocols.columns) == ["gap Avg", *PUBLISHED_TASKS]
    labels = [e.label for e in at.expander]
    assert "bge-large-en-v1.5 (BAAI/bge-large-en-v1.5): paper 17.02, MTEB 17.02; equal on every task" in labels
    assert "GritLM-7B (GritLM/GritLM-7B): paper 31.12, MTEB 28.03; largest gap -9.36 on PMC-Clinical" in labels
    grit = next(e for e in at.expander if e.label.startswith("GritLM-7B"))
    text = " ".join(m.value for m in grit.markdown).replace("\\", "")  # as shown, without the escapes
    assert "document instruction" in text and "338af3394" in text and "src/instrcution.py" in text
    assert "Not found in the code" in text


def test_a_metric_mteb_does_not_report_falls_back_to_ndcg_and_says_so() -> None:
    at = open_app("leaderboard")
    at.selectbox(key="w_lb_metric").set_value("ndcg_at_25").run()
    assert not at.exception
    assert any("has no MTEB counterpart" in c.value for c in at.caption)
