"""``python -m r2med_core``: the command-line contract other tools rely on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from r2med_core import evaluate, load_demo, read_trec

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "r2med_core", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_eval_writes_trec_and_official_results(tmp_path: Path) -> None:
    done = cli(
        "eval",
        "--retriever",
        "bm25",
        "--demo",
        "clinical-evidence",
        "--output-dir",
        str(tmp_path),
        "--run-name",
        "bm25-demo",
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads((tmp_path / "bm25-demo.json").read_text())
    assert set(payload) == {"dataset_name", "model_name", "evaluation_time", "test"}
    assert payload["dataset_name"] == "clinical-evidence" and payload["model_name"] == "bm25-demo"
    run = read_trec(tmp_path / "bm25-demo.trec")
    expected = evaluate(run, load_demo("clinical-evidence").qrels).means
    assert payload["test"]["ndcg_at_10"] == round(expected["ndcg_at_10"], 5)
    assert f"ndcg_at_10       {expected['ndcg_at_10']:.4f}" in done.stdout
    assert all(len(ranking) <= 100 for ranking in run.rankings.values())

    again = cli("evaluate-run", "--run", str(tmp_path / "bm25-demo.trec"), "--demo", "clinical-evidence")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["test"] == payload["test"]


def test_eval_with_a_precomputed_rewrite_and_top_k(tmp_path: Path) -> None:
    done = cli(
        "eval",
        "--retriever",
        "bm25",
        "--rewrite",
        "hyde:demo-writer",
        "--demo",
        "qa-reference",
        "--top-k",
        "10",
        "--output-dir",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    name = "bm25+hyde_demo-writer"
    run = read_trec(tmp_path / f"{name}.trec")
    assert max(len(r) for r in run.rankings.values()) == 10
    plain = cli("eval", "--retriever", "bm25", "--demo", "qa-reference", "--output-dir", str(tmp_path))
    hyde_score = json.loads((tmp_path / f"{name}.json").read_text())["test"]["ndcg_at_10"]
    plain_score = json.loads((tmp_path / "bm25.json").read_text())["test"]["ndcg_at_10"]
    assert plain.returncode == 0 and hyde_score > plain_score


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["eval", "--retriever", "tf-idf", "--demo", "qa-reference", "--output-dir", "x"], "unknown system 'tf-idf'"),
        (
            ["eval", "--retriever", "bm25+hyde:gpt4", "--demo", "qa-reference", "--output-dir", "x"],
            "no precomputed hyde:gpt4 rewrite (available: hyde:demo-writer)",
        ),
        (["eval", "--retriever", "bm25", "--task", "Biology", "--output-dir", "x"], "add --hf"),
        (["eval", "--retriever", "bm25", "--task", "Chemistry", "--output-dir", "x"], "unknown R2MED task"),
    ],
)
def test_usage_errors_are_one_clear_line(args: list[str], message: str) -> None:
    done = cli(*args, env={"R2MED_DATA_DIR": ""})
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_validate(tmp_path: Path) -> None:
    ok = cli("validate", "--data-dir", str(ROOT / "r2med_core" / "demo" / "clinical-case"))
    assert ok.returncode == 0 and ok.stdout.strip().endswith(": OK")
    (tmp_path / "corpus.jsonl").write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n')
    (tmp_path / "query.jsonl").write_text('{"id": "1", "text": "q"}\n[1, 2]\n')
    (tmp_path / "qrels.jsonl").write_text('{"q_id": "1", "p_id": "a"}\n')
    bad = cli("validate", "--data-dir", str(tmp_path))
    assert bad.returncode == 1
    assert f"{tmp_path / 'corpus.jsonl'}:2: duplicate id 'a'" in bad.stderr
    assert f"{tmp_path / 'query.jsonl'}:2: expected a JSON object per line" in bad.stderr
    assert f'{tmp_path / "qrels.jsonl"}:1: missing field(s) "score"' in bad.stderr
    assert "Traceback" not in bad.stderr


def test_bad_run_file_is_reported_by_line(tmp_path: Path) -> None:
    run = tmp_path / "run.trec"
    run.write_text("0 Q0 doc 1 2.5 tag\n0 Q0 doc2 two 1.0 tag\n")
    done = cli("evaluate-run", "--run", str(run), "--demo", "qa-reference")
    assert done.returncode == 1
    assert f"{run}:2: rank must be an integer" in done.stderr and "Traceback" not in done.stderr


def test_local_task_copy_via_environment(tmp_path: Path) -> None:
    """--task without --hf reads $R2MED_DATA_DIR/<task> (a local copy of the benchmark)."""
    copy = tmp_path / "Biology"
    copy.mkdir()
    source = ROOT / "r2med_core" / "demo" / "qa-reference"
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
        (copy / name).write_bytes((source / name).read_bytes())
    done = cli(
        "eval",
        "--retriever",
        "bm25",
        "--task",
        "Biology",
        "--output-dir",
        str(tmp_path / "out"),
        env={"R2MED_DATA_DIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out" / "bm25.json").read_text())["dataset_name"] == "Biology"
