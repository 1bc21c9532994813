"""Results that travel both ways (issue 39 item 4): a local run exported as an MTEB result file and
predictions file re-imports to the same numbers, mteb's own loader reads the result file, a real MTEB
result file becomes a leaderboard row (and is recognised, not refused as a bad run), and hostile files
fail naming file and field."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from r2med_core import load_demo, run_system
from r2med_core.analysis.mteb import mteb_models
from r2med_core.data import DataError
from r2med_core.evaluation import evaluate
from r2med_core.imported_runs import parse_run, read_run_file
from r2med_core.reporting.mteb_files import mteb_result, mteb_result_board, read_mteb_result, write_mteb_files
from r2med_core.tasks import TASKS

FIXTURE = Path(__file__).parent / "fixtures" / "mteb" / "R2MEDBiologyRetrieval.json"  # MTEB's results repo, CC0


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, float]]:
    dataset = load_demo("clinical-case")
    run = run_system(dataset, "bm25")
    results = evaluate(run, dataset.qrels, dataset_name=dataset.name)
    result, predictions = write_mteb_files(run, results, dataset, "bm25", tmp_path_factory.mktemp("mteb"))
    return result, predictions, results.means


def test_the_result_file_has_mtebs_shape_and_true_metric_names(exported: tuple[Path, Path, dict[str, float]]) -> None:
    result, predictions, means = exported
    assert (result.name, predictions.name) == ("clinical-case.json", "clinical-case_predictions.json")
    data = json.loads(result.read_text())
    [scores] = data["scores"]["test"]
    assert scores["hf_subset"] == "default" and scores["languages"] == ["eng-Latn"]
    assert scores["main_score"] == scores["ndcg_at_10"] == means["ndcg_at_10"]
    assert scores["mrr_at_100"] == means["mrr"] and "mrr_at_10" not in scores and "mrr" not in scores
    assert data["mteb_version"] is None and data["r2med_explorer"]["system"] == "bm25"
    assert data["dataset_revision"].startswith("fingerprint:")  # a demo has no hub revision


def test_export_then_import_gives_the_same_numbers(exported: tuple[Path, Path, dict[str, float]]) -> None:
    result, predictions, means = exported
    back = read_mteb_result(result.read_bytes(), result.name)
    assert back.metrics and all(back.metrics[m] == means[m] for m in back.metrics)
    assert back.made_here and back.task is None and back.task_name == "clinical-case"
    dataset = load_demo("clinical-case")
    imported = read_run_file(predictions, dataset)
    again = evaluate(imported.run, dataset.qrels, dataset_name=dataset.name).means
    assert again == pytest.approx(means, abs=1e-12)


def test_mtebs_own_loader_reads_the_exported_result_file(tmp_path: Path) -> None:
    mteb = pytest.importorskip("mteb")
    demo = load_demo("clinical-case")
    dataset = replace(demo, name="PMC-Clinical")  # an R2MED task name, as a real task's export has
    results = evaluate(run_system(demo, "bm25"), demo.qrels, dataset_name=demo.name)
    path = tmp_path / "R2MEDPMCClinicalRetrieval.json"
    path.write_text(json.dumps(mteb_result(results, dataset, "bm25")), encoding="utf-8")
    loaded = mteb.TaskResult.from_disk(path)
    assert loaded.task_name == "R2MEDPMCClinicalRetrieval" and loaded.task.metadata.main_score == "ndcg_at_10"
    assert loaded.get_score() == pytest.approx(results.means["ndcg_at_10"])
    assert loaded.scores["test"][0]["mrr_at_100"] == results.means["mrr"]


def test_a_real_mteb_result_file_is_a_leaderboard_row_not_a_bad_run() -> None:
    data = FIXTURE.read_bytes()
    row = read_mteb_result(data, FIXTURE.name)
    bm25s = next(m for m in mteb_models() if m.model == "mteb/baseline-bm25s").tasks["Biology"]
    assert row.task == "Biology" and row.mteb_version == "2.18.1" and row.metrics == bm25s.metrics
    assert row.dataset_revision == TASKS["Biology"].revision and not row.made_here
    board = mteb_result_board([row])
    assert board.loc[FIXTURE.name, "ndcg_at_10"] == pytest.approx(100 * bm25s.metrics["ndcg_at_10"])
    assert board.loc[FIXTURE.name, "data"] == "the revision this app loads"
    with pytest.raises(DataError) as err:
        parse_run(data, FIXTURE.name, "x")
    [problem] = err.value.problems
    assert "an MTEB result file" in str(problem) and "predictions" in str(problem)
    assert "expected an object" not in str(problem)


def _body(**changes: object) -> dict:
    body = json.loads(FIXTURE.read_text())
    for path, value in changes.items():
        target = body
        *parents, last = path.split("__")
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        target[int(last) if last.isdigit() else last] = value
    return body


def _text(**changes: object) -> str:
    return json.dumps(_body(**{k.replace("S__", "scores__test__0__"): v for k, v in changes.items()}))


_MAP = _text(S__map_at_10=1)
HOSTILE = {
    "wrong type for the main score": (_text(S__main_score="0.5"), "main_score: expected a number"),
    "a boolean score": (_text(S__ndcg_at_10=True), "ndcg_at_10: expected a number"),
    "a score out of range": (_text(S__ndcg_at_10=7.5), "ndcg_at_10: 7.5 is not a score"),
    "a huge float": (_MAP.replace('"map_at_10": 1', '"map_at_10": 1e999'), "map_at_10: inf is not a score"),
    "a huge integer": (_MAP.replace('"map_at_10": 1', '"map_at_10": 1' + "0" * 5000), "unreadable JSON"),
    "a lone surrogate": (_text(task_name="\ud800"), "task_name: not valid Unicode"),
    "scores not a list": (_text(scores={"test": {"ndcg_at_10": 0.1}}), "scores.test: expected a list"),
    "no default subset": (_text(S__hf_subset="en"), "expected exactly one 'default' subset"),
    "a revision that is a number": (_text(dataset_revision=5), "dataset_revision: expected a non-empty string"),
    "deep nesting": ('{"task_name": ' + "[" * 100_000 + "]" * 100_000 + "}", "unreadable JSON"),
    "not an object": ("[1, 2]", "expected a JSON object"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_result_files_fail_naming_file_and_field(case: str) -> None:
    text, expected = HOSTILE[case]
    with pytest.raises(DataError) as err:
        read_mteb_result(text.encode("utf-8", "surrogatepass"), "evil.json")
    assert any(p.path == "evil.json" and expected in str(p) for p in err.value.problems), err.value.problems


def test_the_cli_exports_and_reads_back_and_refuses_a_bad_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from r2med_core.cli import main

    assert (
        main(["mteb-export", "--retriever", "bm25s-mteb", "--demo", "qa-reference", "--output-dir", str(tmp_path)]) == 0
    )
    result = tmp_path / "qa-reference.json"
    assert result.is_file() and (tmp_path / "qa-reference_predictions.json").is_file()
    capsys.readouterr()
    assert main(["mteb-results", str(result), str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "Biology\tndcg_at_10 8.03\tmteb 2.18.1\tthe revision this app loads" in out
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_body(scores__test__0__main_score=None)))
    assert main(["mteb-results", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"error: {bad}: scores.test[0].main_score: expected a number" in err and "Traceback" not in err
