"""Issue 9 item 8: input that used to give plausible but wrong numbers without a word is now
refused with file:line, or the numbers come with a note that says what happened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from r2med_core import evaluate, load_dir, read_trec, run_system
from r2med_core.data import DataError, validate_dir
from r2med_core.imported_runs import available_runs, parse_run, read_run_file, save_upload
from r2med_core.runs import Run, write_trec
from r2med_core.settings import Settings

from ..conftest import TINY_CORPUS, TINY_QRELS, TINY_QUERIES, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
BOM = "\ufeff"


def _dataset(root: Path, corpus=TINY_CORPUS, queries=TINY_QUERIES, qrels=TINY_QRELS) -> Path:
    write_jsonl(root / "corpus.jsonl", corpus)
    write_jsonl(root / "query.jsonl", queries)
    write_jsonl(root / "qrels.jsonl", qrels)
    return root


def _errors(root: Path) -> list[str]:
    errors, _ = validate_dir(root)
    return [str(problem) for problem in errors]


@pytest.mark.parametrize("bad_id", ["q 1", "q\t1", "q\n1", "q\u00a01"])
def test_ids_with_whitespace_are_refused_with_file_and_line(bad_id: str, tmp_path: Path) -> None:
    queries = [*TINY_QUERIES[:2], {"id": bad_id, "text": "a query"}]
    root = _dataset(tmp_path / "q", queries=queries)
    assert _errors(root) == [
        f'{root / "query.jsonl"}:3: "id" {bad_id!r} contains whitespace, which TREC run and qrels files cannot hold'
    ]
    corpus = [*TINY_CORPUS, {"id": bad_id, "text": "a document"}]
    root = _dataset(tmp_path / "c", corpus=corpus)
    assert _errors(root)[0].startswith(f'{root / "corpus.jsonl"}:6: "id" {bad_id!r} contains whitespace')
    qrels = [*TINY_QRELS, {"q_id": "q2", "p_id": bad_id, "score": 1}]
    root = _dataset(tmp_path / "r", qrels=qrels)
    assert _errors(root)[0].startswith(f'{root / "qrels.jsonl"}:4: "p_id" {bad_id!r} contains whitespace')


def test_the_trec_writer_refuses_what_it_cannot_write(tmp_path: Path) -> None:
    run = Run("r", {"q1": [("doc 1", 1.0)], "q 2": [("d", 0.5)], "q3": [("d", float("nan"))]})
    with pytest.raises(DataError) as refused:
        write_trec(run, tmp_path / "r.trec")
    messages = [str(p) for p in refused.value.problems]
    assert any("'doc 1'" in m and "whitespace" in m for m in messages)
    assert any("'q 2'" in m for m in messages) and any("nan" in m for m in messages)
    assert not (tmp_path / "r.trec").exists()


@pytest.mark.parametrize("grade", [99999999999, -1, 101])
def test_grades_outside_0_to_100_are_refused(grade: int, tmp_path: Path) -> None:
    root = _dataset(tmp_path / "j", qrels=[*TINY_QRELS, {"q_id": "q2", "p_id": "gout_0", "score": grade}])
    assert _errors(root) == [f"{root / 'qrels.jsonl'}:4: relevance grade {grade} is outside 0-100"]
    trec = _dataset(tmp_path / "t")
    (trec / "qrels.jsonl").unlink()
    (trec / "qrels.txt").write_text(f"q1 0 dka_0 2\nq2 0 mi_0 {grade}\n")
    assert _errors(trec) == [f"{trec / 'qrels.txt'}:2: relevance grade {grade} is outside 0-100"]


@pytest.mark.parametrize("score", ["nan", "NaN", "inf", "-inf", "1e999"])
def test_non_finite_run_scores_are_refused_with_file_and_line(score: str, tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_text(f"q1 Q0 dka_0 1 2.5 t\nq1 Q0 dka_1 2 {score} t\n")
    with pytest.raises(DataError) as refused:
        read_trec(path)
    assert [str(p) for p in refused.value.problems] == [f"{path}:2: score must be a finite number, got {score!r}"]


def test_a_byte_order_mark_never_renames_the_first_id(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "bom")
    for name in ("corpus.jsonl", "query.jsonl"):
        path = root / name
        path.write_text(BOM + path.read_text(encoding="utf-8"), encoding="utf-8")
    (root / "qrels.jsonl").unlink()
    (root / "qrels.tsv").write_text(BOM + "q1\t0\tdka_0\t2\nq1\t0\tdka_1\t1\nq2\t0\tmi_0\t1\n", encoding="utf-8")
    (root / "metadata.json").write_text(BOM + json.dumps({"family": "clinical-case"}), encoding="utf-8")
    dataset = load_dir(root)
    assert next(iter(dataset.queries)) == "q1" and next(iter(dataset.corpus)) == "dka_0"
    assert dataset.qrels["q1"] == {"dka_0": 2, "dka_1": 1}
    assert dataset.meta == {"family": "clinical-case"}
    run_file = tmp_path / "run.trec"
    run_file.write_text(BOM + "q1 Q0 dka_0 1 2.0 t\nq2 Q0 mi_0 1 1.0 t\n", encoding="utf-8")
    run = read_trec(run_file)
    assert set(run.rankings) == {"q1", "q2"}
    assert evaluate(run, dataset.qrels).means["ndcg_at_1"] == pytest.approx(1.0)


def test_a_run_of_another_dataset_says_so(tiny_r2med: Path, tmp_path: Path, _isolated_cache: Path) -> None:
    dataset = load_dir(tiny_r2med)
    stranger = Run("other", {"x1": [("dka_0", 1.0)], "x2": [("mi_0", 1.0)]})
    results = evaluate(stranger, dataset.qrels)
    assert results.means["ndcg_at_10"] == 0.0
    assert any("none of the run's 2 query ids matches a judged query" in note for note in results.notes)
    assert not evaluate(run_system(dataset, "bm25"), dataset.qrels).notes  # a normal run has no such note

    path = tmp_path / "other.trec"
    path.write_text("x1 Q0 dka_0 1 1.0 t\nx2 Q0 mi_0 1 1.0 t\n")
    done = subprocess.run(
        [sys.executable, "-m", "r2med_core", "evaluate-run", "--run", str(path), "--data-dir", str(tiny_r2med)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, "R2MED_CACHE_DIR": str(_isolated_cache)},
    )
    assert done.returncode == 0, done.stderr
    # The importer names every row whose query the dataset lacks (the core note covers runs made in code).
    assert "query 'x1' is not in tiny" in done.stderr and "query 'x2' is not in tiny" in done.stderr


# A dense model still reads stop words, so for it only a blank text has nothing to search.
EMPTIED = [(s, t) for s in ("bm25", "bm25s", "bm25-okapi", "minilm") for t in ("", "   ", "the of and is")]


@pytest.mark.parametrize(("system", "text"), [(s, t) for s, t in EMPTIED if s != "minilm" or not t.strip()])
def test_an_emptied_query_scores_zero_and_stays_in_the_averages(system: str, text: str, tmp_path: Path) -> None:
    queries = [{"id": "q1", "text": text}, *TINY_QUERIES[1:]]
    dataset = load_dir(_dataset(tmp_path / "emptied", queries=queries))
    results = evaluate(run_system(dataset, system), dataset.qrels)
    emptied = results.per_query.loc["q1"]
    assert (emptied == 0).all(), emptied[emptied != 0]  # was recall@100 = 1.0: five zero-score documents
    assert results.n_evaluated == 2  # q1 and q2 (q3 has no judgements)
    assert results.means["recall_at_100"] == pytest.approx(results.per_query.loc["q2", "recall_at_100"] / 2)
    assert "1 judged query had no searchable terms and retrieved nothing" in " ".join(results.notes)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "r2med_core", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


@pytest.mark.parametrize(
    ("token", "shown"), [("NaN", "nan"), ("Infinity", "inf"), ("-Infinity", "-inf"), ("1e999", "inf")]
)
def test_non_finite_score_json_is_refused_as_trec_runs_are(token: str, shown: str, tiny_r2med: Path) -> None:
    """Issue 29 item 7: score JSON (and the kit's top-k lines) with NaN or infinite scores gave arbitrary
    metrics with exit 0, and the sidebar upload stored them."""
    refused = f"score must be a finite number, got {shown!r}"
    scores = tiny_r2med.parent / "scores.json"
    scores.write_text(f'{{"q1": {{"dka_0": 2.5, "dka_1": {token}}}, "q2": {{"mi_0": 1}}}}')
    done = _cli("evaluate-run", "--run", str(scores), "--data-dir", str(tiny_r2med))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"error: {scores}: query 'q1', document 'dka_1': {refused}\n"

    topk = f'{{"id": "q1", "topk_pid": [["dka_0", 2.5]]}}\n{{"id": "q2", "topk_pid": [["mi_0", {token}]]}}\n'
    with pytest.raises(DataError) as caught:
        parse_run(topk.encode(), "Tiny_topk.jsonl", "run:x")
    assert [str(p) for p in caught.value.problems] == [f"Tiny_topk.jsonl:2: query 'q2', document 'mi_0': {refused}"]

    dataset = load_dir(tiny_r2med)
    with pytest.raises(DataError) as caught:
        save_upload(dataset, scores.read_bytes(), "scores.json", Settings())
    assert [str(p) for p in caught.value.problems] == [f"scores.json: query 'q1', document 'dka_1': {refused}"]
    assert not available_runs(dataset, Settings())  # nothing was stored


@pytest.mark.parametrize("published", [True, False])
def test_a_results_file_without_its_run_names_the_missing_run(published: bool, tiny_r2med: Path) -> None:
    """Issue 29 item 7: a results file (metric means) given without the NAME.trec beside it was read as
    score JSON for a query called "test": every query failed, exit 0."""
    means = {"ndcg_at_10": 0.3, "recall_at_100": 0.5}
    fields = {"dataset_name": "tiny", "evaluation_time": "0.01 minutes", "model_name": "bm25"} if published else {}
    results = tiny_r2med.parent / "bm25.json"
    results.write_text(json.dumps({**fields, "test": means}))
    missing = f"error: {results}: a results file holds no ranking, and its run bm25.trec is not beside it\n"
    diagnose = ("diagnose", "--oracle", "oracle:bm25", "--output-dir", str(results.parent / "out"))
    for command in (("evaluate-run",), diagnose):
        done = _cli(*command, "--run", str(results), "--data-dir", str(tiny_r2med))
        assert (done.returncode, done.stderr) == (1, missing), command
    assert not (results.parent / "out").exists()

    with pytest.raises(DataError, match="a results file holds metric means, not a ranking"):
        save_upload(load_dir(tiny_r2med), results.read_bytes(), "bm25.json", Settings())
    kit_folder = tiny_r2med.parent / "kit-bm25"
    kit_folder.mkdir()
    (kit_folder / "scores.json").write_text(results.read_text())
    with pytest.raises(DataError, match="no TREC run or"):
        read_run_file(kit_folder)
