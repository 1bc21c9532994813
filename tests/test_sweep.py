"""The sweep: a grid of tasks x retrievers x rewrites written like `eval` writes one run; the Ray path
writes the same files; the Leaderboard shows the grid."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from r2med_core import load_demo, load_dir
from r2med_core.cli import main
from r2med_core.compute.sweep import read_grid, sweep, sweep_table
from r2med_core.runs import read_trec

APP = str(Path(__file__).resolve().parent.parent / "r2med_app" / "streamlit_app.py")


def _outputs(folder: Path) -> dict[str, object]:
    """Every TREC file's text and every results file's metrics (evaluation_time is wall-clock, left out)."""
    found: dict[str, object] = {}
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".trec":
            found[str(path.relative_to(folder))] = path.read_text(encoding="utf-8")
        elif path.name.endswith(".provenance.json"):  # when and where it ran: differs per run by design
            record = json.loads(path.read_text(encoding="utf-8"))
            results = path.with_name(path.name.replace(".provenance.json", ".json"))
            assert results.is_file() and record["dataset"]["name"] == json.loads(results.read_text())["dataset_name"]
        elif path.suffix == ".json" and path.name != "sweep.json":
            payload = json.loads(path.read_text(encoding="utf-8"))
            found[str(path.relative_to(folder))] = (payload["dataset_name"], payload["model_name"], payload["test"])
    return found


def test_the_sweep_command_writes_every_cell_like_eval_does(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "grid"
    grid = ["--retrievers", "bm25,bm25s", "--rewrites", "hyde:demo-writer,hyde:none"]
    code = main(["sweep", "--demo", "--tasks", "All", *grid, "--output-dir", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "no hyde:none rewrite" in printed  # a missing rewrite is a note, the rest runs
    files = _outputs(out)
    assert len([f for f in files if f.endswith(".trec")]) == 3 * 2 * 2
    eval_dir = tmp_path / "eval"
    assert (
        main(
            [
                "eval",
                "--retriever",
                "bm25",
                "--rewrite",
                "hyde:demo-writer",
                "--demo",
                "clinical-case",
                "--output-dir",
                str(eval_dir),
            ]
        )
        == 0
    )
    assert (out / "clinical-case" / "bm25+hyde_demo-writer.trec").read_text() == (
        eval_dir / "bm25+hyde_demo-writer.trec"
    ).read_text()
    rows, notes = read_grid(out)
    assert not notes and len(rows) == 12
    assert {r["task"] for r in rows} == {"clinical-case", "clinical-evidence", "qa-reference"}
    run = read_trec(out / "qa-reference" / "bm25s.trec")
    assert len(run.rankings) == len(load_demo("qa-reference").queries)


def test_sweep_usage_mistakes_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["sweep", "--demo", "--tasks", "nope", "--retrievers", "bm25", "--output-dir", str(tmp_path)]) == 2
    assert main(["sweep", "--demo", "--tasks", "All", "--retrievers", "bm99", "--output-dir", str(tmp_path)]) == 2
    assert (
        main(
            [
                "sweep",
                "--demo",
                "--tasks",
                "All",
                "--retrievers",
                "bm25",
                "--rewrites",
                "hyde",
                "--output-dir",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err.count("error: ") == 3


def test_a_damaged_sweep_summary_is_reported_not_trusted(tmp_path: Path) -> None:
    (tmp_path / "sweep.json").write_text('{"cells": [{"task": "t", "system": "bm25"}, 5]}')
    rows, notes = read_grid(tmp_path)
    assert rows == [] and len(notes) == 2
    (tmp_path / "sweep.json").write_text("[" * 100_000)
    assert read_grid(tmp_path)[0] == []


def test_a_sweep_written_before_a_new_main_metric_still_serves_its_cells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep file holds the metrics the evaluator reported when it ran; a measure registered since and
    shown first (added to MAIN_METRICS) is absent from its cells, which stay on the Leaderboard."""
    from r2med_core import evaluation, measures

    old = {m: 0.5 for m in measures.all_metrics()}  # what a sweep wrote per cell before the addition
    cells = [{"task": task, "system": "bm25", "file": f"{task}/bm25.json", **old} for task in ("Biology", "IIYi")]
    (tmp_path / "sweep.json").write_text(json.dumps({"cells": cells, "notes": []}))
    monkeypatch.setattr(measures, "MEASURES", dict(measures.MEASURES))
    measures.register(measures.Measure("success_at", "success", "Success", "a relevant one in the top {k}", (10,)))
    monkeypatch.setattr(evaluation, "MAIN_METRICS", (*evaluation.MAIN_METRICS, "success_at_10"))
    rows, notes = read_grid(tmp_path)
    assert notes == [] and [r["task"] for r in rows] == ["Biology", "IIYi"]
    assert all(r["ndcg_at_10"] == 0.5 and "success_at_10" not in r for r in rows)
    assert sweep_table(rows, "ndcg_at_10")["bm25"].tolist() == [0.5, 0.5]
    cells[0]["ndcg_at_10"] = "high"  # a metric that is not a number is still a damaged cell
    (tmp_path / "sweep.json").write_text(json.dumps({"cells": cells}))
    rows, notes = read_grid(tmp_path)
    assert [r["task"] for r in rows] == ["IIYi"]
    assert notes == ["sweep.json: cell 1 skipped (could not convert string to float: 'high')"]


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is optional (requirements-scale.txt)")
def test_a_sweep_on_a_local_ray_writes_the_same_files_as_a_local_sweep(
    tiny_r2med: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    import r2med_core.retrieval.encoding as encoding
    from r2med_core.compute.distributed import connect, ray_cells

    monkeypatch.setattr(encoding, "CHUNK_DOCS", 2)  # several chunks, so several Ray Data batches
    datasets = {"tiny": load_dir(tiny_r2med)}
    grid = (["bm25", "minilm", "rrf(bm25,minilm)"], ["hyde:toy-llm"])
    local = sweep(datasets, *grid, tmp_path / "local")

    monkeypatch.setenv("R2MED_CACHE_DIR", str(tmp_path / "ray-cache"))  # nothing reused from the local run
    ray_session = connect(None, num_cpus=2)
    try:
        distributed = sweep(datasets, *grid, tmp_path / "ray", runner=ray_cells(ray_session))
    finally:
        ray.shutdown()
    assert [r["system"] for r in distributed.rows] == [r["system"] for r in local.rows]
    assert len(local.rows) == 6
    ray_files, local_files = _outputs(tmp_path / "ray"), _outputs(tmp_path / "local")
    assert ray_files.keys() == local_files.keys()
    for name, text in local_files.items():
        if not name.endswith(".trec"):
            assert ray_files[name] == text, name
            continue
        # Same documents in the same order; a score may differ in its 6th decimal, because workers
        # encode in other batches (padding changes the last float bits), never enough to reorder.
        ours = [line.split() for line in ray_files[name].splitlines()]
        theirs = [line.split() for line in text.splitlines()]
        assert [row[:4] for row in ours] == [row[:4] for row in theirs], name
        assert [float(row[4]) for row in ours] == pytest.approx([float(row[4]) for row in theirs], abs=1e-5)
    assert list((tmp_path / "ray-cache" / "dense").iterdir())  # the encoding landed in the cache


def test_the_leaderboard_shows_the_operators_sweep_grid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "grid"
    assert main(["sweep", "--demo", "--tasks", "All", "--retrievers", "bm25,bm25s", "--output-dir", str(out)]) == 0
    monkeypatch.setenv("R2MED_SWEEP_DIR", str(out))
    at = AppTest.from_file(APP, default_timeout=300)
    at.run()
    at.switch_page("views/pages/leaderboard.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(h.value.startswith("Sweep") for h in at.subheader)
    grid = next(df.value for df in at.dataframe if list(df.value.columns[:1]) == ["task"])
    assert list(grid["task"]) == ["clinical-case", "clinical-evidence", "qa-reference"]
    assert {"BM25 (R2MED official)", "BM25 (bm25s default tokenizer)"} <= set(grid.columns)
