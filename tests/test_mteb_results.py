"""MTEB's R2MED results in the package (issue 39 item 1): the 26 models × 8 tasks with source and
versions, the dataset revision flags, and the transcription script on a small git history."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from r2med_core.analysis.mteb import MTEB_LABEL, mteb_board, mteb_gains_over, mteb_models, mteb_source
from r2med_core.analysis.mteb_names import MTEB_TASK_NAMES, task_from_mteb
from r2med_core.analysis.published import PUBLISHED_TASKS, published_score
from r2med_core.tasks import TASKS

ROOT = Path(__file__).resolve().parent.parent


def test_the_package_holds_26_models_on_8_tasks_with_their_source() -> None:
    models = mteb_models()
    assert len(models) == 26 and all(list(m.tasks) == list(PUBLISHED_TASKS) for m in models)
    source = mteb_source()
    assert source["source"] == "https://github.com/embeddings-benchmark/results" and len(source["commit"]) == 40
    assert source["label"] == MTEB_LABEL == "MTEB's run, not the benchmark's evaluation"
    board = mteb_board()
    assert board.index[0] == "Alibaba-NLP/gte-Qwen2-7B-instruct" and round(board["Avg"].iloc[0], 2) == 32.34
    assert round(board.loc["mteb/baseline-bm25s", "Avg"], 2) == 13.46
    assert round(board.loc["mteb/baseline-bm25s", "Biology"], 2) == 8.03
    assert board.loc["mteb/baseline-bm25s", "in the paper"] == "bm25"
    assert board.loc["BAAI/bge-large-en-v1.5", "revision"] == "d4aa6901d3a41ba39fb536a557fa166f842b0e09"
    assert board.loc["BAAI/bge-large-en-v1.5", "mteb_version"] == "1.38.20"
    assert {k for k in board["in the paper"] if k} == {"bm25", "bge", "e5", "grit", "sfr"}


def test_bge_large_equals_the_paper_on_every_value_both_published() -> None:
    """The one model both ran the same way: MTEB's numbers are the paper's, so data and scoring agree."""
    bge = next(m for m in mteb_models() if m.model == "BAAI/bge-large-en-v1.5")
    compared = 0
    for task, result in bge.tasks.items():
        for metric, value in result.metrics.items():
            paper = published_score("bge", task, metric)
            if paper is not None:
                assert value == pytest.approx(paper, abs=1e-9), (task, metric)
                compared += 1
    assert compared == 8 * 20


def test_the_hand_edited_medical_sciences_revision_is_flagged() -> None:
    flags = {m.model: m.tasks["Medical-Sciences"].revision_flag for m in mteb_models()}
    e5 = flags["intfloat/e5-mistral-7b-instruct"]
    assert e5 is not None and "edited by hand" in e5 and "7f11654e9a" in e5 and "1b48911514" in e5
    bekko = next(m for m in mteb_models() if m.model == "hotchpotch/bekko-embedding-v1-a8m")
    assert all(r.revision_flag is None for r in bekko.tasks.values())  # the 2026 runs load the app's data
    assert bekko.tasks["Biology"].ran_revision == TASKS["Biology"].revision
    assert "Medical-Sciences" in mteb_board().loc["GritLM/GritLM-7B", "dataset revisions"]


def test_gains_per_task_and_unknown_names_are_refused() -> None:
    gains = mteb_gains_over("BAAI/bge-large-en-v1.5")
    board = mteb_board()
    top = "Alibaba-NLP/gte-Qwen2-7B-instruct"
    assert gains.loc[top, "Biology"] == pytest.approx(
        board.loc[top, "Biology"] - board.loc["BAAI/bge-large-en-v1.5", "Biology"]
    )
    assert "BAAI/bge-large-en-v1.5" not in gains.index
    with pytest.raises(ValueError, match="unknown MTEB model"):
        mteb_gains_over("nobody/nothing")
    with pytest.raises(ValueError, match="MTEB reports no"):
        mteb_board("ndcg_at_25")
    assert not math.isnan(mteb_board("mrr").loc[top, "Avg"])


def test_task_names_map_both_ways() -> None:
    assert MTEB_TASK_NAMES["PMC-Treatment"] == "R2MEDPMCTreatmentRetrieval"
    assert all(task_from_mteb(v) == k for k, v in MTEB_TASK_NAMES.items())
    assert task_from_mteb("NFCorpus") is None


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True, capture_output=True
    )


def test_the_script_reads_a_git_copy_and_records_an_edited_revision(tmp_path: Path) -> None:
    """A result file whose dataset_revision a later commit edited: the script keeps the old one."""
    repo = tmp_path / "results"
    folder = repo / "results" / "org__model" / "abc123"
    folder.mkdir(parents=True)
    _git(repo, "init", "-q")
    metrics = {
        key: 0.5
        for key in ("ndcg", "map", "recall", "precision")
        for key in [f"{key}_at_{k}" for k in (1, 3, 5, 10, 100)]
    }
    body = {
        "dataset_revision": "old",
        "task_name": "R2MEDBiologyRetrieval",
        "mteb_version": "1.38.20",
        "scores": {
            "test": [
                {**metrics, "mrr_at_100": 0.25, "main_score": 0.5, "hf_subset": "default", "languages": ["eng-Latn"]}
            ]
        },
        "evaluation_time": 1.5,
    }
    path = folder / "R2MEDBiologyRetrieval.json"
    path.write_text(json.dumps(body, indent=2))
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "add")
    path.write_text(json.dumps({**body, "dataset_revision": "new"}, indent=2))
    _git(repo, "commit", "-qam", "edit")
    out = tmp_path / "out.json"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "transcribe_mteb.py"), "--repo", str(repo), "--output", str(out)],
        check=True,
    )
    data = json.loads(out.read_text())
    [model] = data["models"]
    record = model["tasks"]["Biology"]
    assert model["model"] == "org/model" and model["revision"] == "abc123"
    assert record["dataset_revision"] == "new" and record["earlier_dataset_revisions"][0]["revision"] == "old"
    assert record["metrics"]["mrr"] == 0.25 and record["evaluation_time"] == 1.5 and len(data["commit"]) == 40


# ---------------------------------------------------------------- same model, two protocols (item 2)


def test_the_five_shared_models_have_their_gaps_and_a_sourced_reason_for_each() -> None:
    from r2med_core.analysis.mteb_protocols import protocol_comparisons, protocol_table

    table = protocol_table()
    largest = table["largest gap"].abs().round(1).to_dict()
    assert largest == {
        "BM25": 11.2,
        "SFR-Embedding-Mistral": 10.6,
        "GritLM-7B": 9.4,
        "e5-mistral-7b-instruct": 6.0,
        "bge-large-en-v1.5": 0.0,
    }
    assert round(table.loc["BM25", "paper Avg"], 2) == 15.13 and round(table.loc["GritLM-7B", "MTEB Avg"], 2) == 28.03
    by_name = {c.paper_label: c for c in protocol_comparisons()}
    assert by_name["bge-large-en-v1.5"].equal and not by_name["bge-large-en-v1.5"].not_found
    for comparison in by_name.values():
        assert comparison.reasons and all(r.sources and r.paper and r.mteb for r in comparison.reasons)
        assert comparison.equal or comparison.not_found  # an unexplained gap is said to be unexplained
    aspects = {c.paper_label: {r.aspect for r in c.reasons} for c in by_name.values()}
    assert {"query instruction", "document instruction", "max length", "precision"} <= aspects["e5-mistral-7b-instruct"]
    assert {"BM25 parameters", "BM25 tokens"} <= aspects["BM25"]
    assert all(
        s.startswith(("R2MED/R2MED@45cbac5", "embeddings-benchmark/", "ContextualAI/gritlm"))
        for c in by_name.values()
        for r in c.reasons
        for s in r.sources
    )


def test_a_metric_the_paper_did_not_publish_for_a_model_is_not_called_equal() -> None:
    from r2med_core.analysis.mteb_protocols import protocol_comparisons

    e5 = next(c for c in protocol_comparisons("mrr") if c.paper_key == "e5")  # dense rows publish no mrr
    assert not e5.equal and "did not publish" in e5.not_found[0]
