"""``bm25s-mteb``: BM25 as MTEB's baseline runs it (issue 39 item 3), checked against mteb's own
``BM25Search`` on the demo, beside the benchmark's BM25, from the CLI and in the app."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from r2med_core import load_demo, run_system
from r2med_core.analysis.fidelity import fidelity
from r2med_core.evaluation import evaluate
from r2med_core.kinds.base import search_text
from r2med_core.runs import read_trec
from r2med_core.systems import parse_system


def _mteb_bm25s(task: str, k: int) -> dict[str, list[tuple[str, float]]]:
    """mteb's ``mteb/baseline-bm25s`` (its BM25Search, as ``mteb.get_model`` loads it) on a demo task,
    given the demo's corpus and queries in mteb's dataset layout and an R2MED task's metadata."""
    mteb = pytest.importorskip("mteb")
    from datasets import Dataset as HFDataset

    dataset = load_demo(task)
    model = mteb.get_model("mteb/baseline-bm25s")
    metadata = mteb.get_task("R2MEDBiologyRetrieval").metadata  # English, as every R2MED task
    corpus = HFDataset.from_dict(
        {"id": list(dataset.corpus), "title": [""] * len(dataset.corpus), "text": list(dataset.corpus.values())}
    )
    queries = HFDataset.from_dict({"id": list(dataset.queries), "text": list(dataset.queries.values())})
    where = {"task_metadata": metadata, "hf_split": "test", "hf_subset": "default", "encode_kwargs": {}}
    model.index(corpus, **where)
    found = model.search(queries, top_k=k, **where)
    return {qid: sorted(docs.items(), key=lambda item: -item[1]) for qid, docs in found.items()}


@pytest.mark.parametrize("task", ["qa-reference", "clinical-case"])
def test_it_ranks_and_scores_as_mtebs_own_baseline(task: str) -> None:
    expected = _mteb_bm25s(task, 100)
    run = run_system(load_demo(task), "bm25s-mteb")
    assert set(run.rankings) == set(expected)
    for qid, ranking in run.rankings.items():
        assert [d for d, s in ranking if s > 0] == [d for d, s in expected[qid] if s > 0]  # same documents, same order
        np.testing.assert_allclose([s for _, s in ranking], [s for _, s in expected[qid]], rtol=1e-6)
    assert any(s > 0 for r in run.rankings.values() for _, s in r)


def test_it_is_a_named_labelled_system_that_is_not_the_benchmarks() -> None:
    spec = parse_system("bm25s-mteb")
    assert spec.kind == "bm25s-mteb" and str(spec) == "bm25s-mteb"
    assert "not the benchmark's setting" in spec.label
    verdict = fidelity("bm25s-mteb")
    assert not verdict.is_benchmark and "k1 1.5, b 0.75" in verdict.differences[0]
    assert parse_system("bm25s").kind == "bm25"  # the other bm25s engine keeps its own name


def test_on_the_demo_it_reproduces_a_gap_to_the_benchmarks_bm25() -> None:
    """The numbers the README states (nDCG@10 × 100 on the demo: MTEB's pipeline, then the benchmark's)."""

    def ndcg(task: str, system: str) -> float:
        dataset = load_demo(task)
        return round(100 * evaluate(run_system(dataset, system), dataset.qrels).means["ndcg_at_10"], 2)

    stated = {"clinical-case": (4.47, 5.95), "qa-reference": (21.83, 20.96), "clinical-evidence": (20.99, 21.21)}
    assert {task: (ndcg(task, "bm25s-mteb"), ndcg(task, "bm25")) for task in stated} == stated
    dataset = load_demo("clinical-case")
    typed = next(iter(dataset.queries.values()))
    assert (
        search_text(dataset, "bm25s-mteb", typed, k=5)
        == run_system(dataset, "bm25s-mteb").rankings[next(iter(dataset.queries))][:5]
    )


def test_eval_runs_it_on_the_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from r2med_core.cli import main

    assert main(["eval", "--retriever", "bm25s-mteb", "--demo", "qa-reference", "--output-dir", str(tmp_path)]) == 0
    assert "BM25 as MTEB's baseline-bm25s runs it" in capsys.readouterr().out
    written = read_trec(tmp_path / "bm25s-mteb.trec")
    computed = run_system(load_demo("qa-reference"), "bm25s-mteb")
    assert {q: [d for d, _ in r] for q, r in written.rankings.items()} == {
        q: [d for d, _ in r] for q, r in computed.rankings.items()
    }


def test_the_app_offers_it_and_badges_it_as_not_the_benchmarks() -> None:
    from .test_app import open_app, your_runs

    offered = open_app("leaderboard", task="qa-reference", systems=["bm25"]).multiselect(key="w_systems").options
    assert parse_system("bm25s-mteb").label in offered
    for page in ("compare", "explorer"):  # its per-query differences from the benchmark's BM25, browsed
        assert not open_app(page, task="qa-reference", systems=["bm25", "bm25s-mteb"]).exception
    at = open_app("leaderboard", task="qa-reference", systems=["bm25", "bm25s-mteb"])
    settings = your_runs(at)["setting"].to_dict()
    assert settings[parse_system("bm25s-mteb").label].startswith("≠ benchmark: bm25s as MTEB's baseline calls it")
