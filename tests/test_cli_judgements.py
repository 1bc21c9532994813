"""``python -m r2med_core diagnose | pool | qrels``: the app's failure diagnosis, pooling and team qrels
from the command line, each output exactly what the core function returns."""

from __future__ import annotations

from pathlib import Path

import pytest

from r2med_core import load_demo, read_trec, run_system
from r2med_core.analysis.diagnosis import classed_queries, diagnose, judge_proposals, oracle_run
from r2med_core.analysis.explore import QUERY_TABLE_COLUMNS
from r2med_core.cli import main
from r2med_core.judging.adjudication import decide
from r2med_core.judging.annotations import Annotation, AnnotationStore
from r2med_core.judging.pooling import compare_with_team, pool, pool_csv, pool_text
from r2med_core.judging.team import qrels_text, read_team_qrels
from r2med_core.runs import write_trec

from .test_cli import cli

TASK = "clinical-evidence"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bm25 as ``eval`` writes it (NAME.trec + NAME.json) and minilm as a bare TREC file."""
    folder = tmp_path_factory.mktemp("runs")
    assert main(["eval", "--retriever", "bm25", "--demo", TASK, "--output-dir", str(folder)]) == 0
    write_trec(run_system(load_demo(TASK), "minilm"), folder / "minilm.trec")
    return folder


def _failed_query(runs: Path) -> tuple[str, str]:
    """A query bm25 fails on, and a non-gold document in its top 10."""
    dataset, run = load_demo(TASK), read_trec(runs / "bm25.trec")
    found = diagnose(dataset, run, oracle_run(dataset))
    qid = next(q.query_id for q in found.queries if q.failed)
    doc = next(d for d, _ in run.top(qid, 10) if d not in dataset.qrels[qid])
    return qid, doc


def _label(**fields: object) -> Annotation:
    base = {"dataset": f"demo:{TASK}", "task": TASK, "failure_type": "relevant_unjudged", "annotator": "ann"}
    return Annotation(**{**base, **fields})


def test_diagnose_writes_the_explorers_table_with_classes_and_prints_counts(runs: Path, tmp_path: Path, capsys) -> None:
    qid, doc = _failed_query(runs)
    store = AnnotationStore(tmp_path / "labels.sqlite")
    store.add(_label(query_id=qid, doc_id=doc, annotator="proposed by judge-llm"))  # the LLM judge's proposal
    out = tmp_path / "diag"
    args = ["diagnose", "--run", str(runs / "bm25.json"), "--run", str(runs / "minilm.trec"), "--demo", TASK]
    assert main([*args, "--store", str(tmp_path / "labels.sqlite"), "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out

    dataset = load_demo(TASK)
    oracle = oracle_run(dataset, "oracle:bm25")
    for name in ("bm25", "minilm"):
        run = read_trec(runs / f"{name}.trec")
        expected = diagnose(dataset, run, oracle, proposals=judge_proposals(store, dataset))
        written = (out / f"{TASK}_{name}_queries.csv").read_text()
        assert written == classed_queries(dataset, run, expected).to_csv(index=False)
        assert f"{name}: {expected.n_failed} of {len(expected.queries)} judged queries failed" in printed
    assert written.splitlines()[0] == ",".join([*QUERY_TABLE_COLUMNS, "failure_class"])  # the explorer's columns
    bm25 = diagnose(dataset, read_trec(runs / "bm25.trec"), oracle, proposals=judge_proposals(store, dataset))
    assert bm25.class_of()[qid] == "possibly unjudged"
    assert f"  possibly unjudged    {bm25.counts()['possibly unjudged']}" in printed


def test_diagnose_bad_input_is_one_line_naming_file_and_line(runs: Path, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.trec"
    bad.write_text("0 Q0 d1 1 2.0 x\n0 Q0 d2 two 1.0 x\n")
    assert main(["diagnose", "--run", str(bad), "--demo", TASK, "--output-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2" in err and err.startswith("error: ")
    args = ["diagnose", "--run", str(runs / "bm25.trec"), "--demo", TASK, "--output-dir", str(tmp_path)]
    assert main([*args, "--oracle", "bm25"]) == 2
    assert "--oracle must be oracle:RETRIEVER" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.csv"))  # nothing half-written


def test_pool_writes_the_core_pool_as_trec_or_csv(runs: Path, tmp_path: Path, capsys) -> None:
    args = ["pool", "--run", str(runs / "bm25.trec"), "--run", str(runs / "minilm.trec"), "--demo", TASK]
    assert main([*args, "--depth", "5", "--output", str(tmp_path / "pool.txt")]) == 0
    assert main([*args, "--depth", "5", "--output", str(tmp_path / "pool.csv")]) == 0
    dataset = load_demo(TASK)
    expected = pool({n: read_trec(runs / f"{n}.trec") for n in ("bm25", "minilm")}, dataset.qrels, 5)
    assert (tmp_path / "pool.txt").read_text() == pool_text(expected)
    assert (tmp_path / "pool.csv").read_text() == pool_csv(expected)
    assert f"{len(expected)} unjudged document(s) in the top 5 of 2 system(s)" in capsys.readouterr().out


def test_pool_with_a_store_skips_the_teams_judgements_and_prints_without_with_and_judged(
    runs: Path, tmp_path: Path, capsys
) -> None:
    qid, doc = _failed_query(runs)
    target = tmp_path / "labels.sqlite"
    store = AnnotationStore(target)
    store.review(store.add(_label(query_id=qid, doc_id=doc)).id, True, "rev")  # an accepted addition
    args = ["pool", "--run", str(runs / "bm25.trec"), "--run", str(runs / "minilm.trec"), "--demo", TASK]
    assert main([*args, "--store", str(target), "--output", str(tmp_path / "pool.csv")]) == 0
    printed = capsys.readouterr().out

    dataset = load_demo(TASK)
    named = {n: read_trec(runs / f"{n}.trec") for n in ("bm25", "minilm")}
    team = read_team_qrels(store, dataset)
    assert [(c.query_id, c.doc_id, c.grade, c.source) for c in team.changes] == [(qid, doc, 1, "accepted")]
    expected = pool(named, team.qrels, 10)
    assert (tmp_path / "pool.csv").read_text() == pool_csv(expected)
    assert f"{qid},{doc}," not in pool_csv(expected)
    table = compare_with_team(named, dataset.qrels, team.qrels, dataset_name=TASK)
    shown = {cells[0]: cells[1:] for cells in map(str.split, printed.splitlines()) if "→" in "".join(cells)}
    for row in table.to_dict("records"):
        without, with_, rank, judged, judged_with = shown[row["system"]]
        assert (float(without), float(with_)) == (round(row["without"], 4), round(row["with"], 4))
        assert rank == f"{row['rank_without']}→{row['rank_with']}"
        assert (float(judged), float(judged_with)) == (round(row["judged_without"], 4), round(row["judged_with"], 4))
    assert table["with"].max() > table["without"].max() or table["judged_with"].gt(table["judged_without"]).any()
    assert team.caption() in printed and "0 agreed grade(s), 1 accepted proposal(s)" in printed


def test_pool_bad_input(runs: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.sqlite"
    done = cli("pool", "--run", str(runs / "bm25.trec"), "--demo", TASK, "--output", str(tmp_path / "p.txt"),
                "--store", str(missing))
    assert done.returncode == 1 and f"error: {missing}: no annotation store" in done.stderr
    assert "Traceback" not in done.stderr and not missing.exists() and not (tmp_path / "p.txt").exists()
    twice = cli("pool", "--run", str(runs / "bm25.trec"), "--run", str(runs / "bm25.json"), "--demo", TASK,
                 "--output", str(tmp_path / "p.txt"))
    assert twice.returncode == 2 and "two runs are named 'bm25'" in twice.stderr


def test_qrels_applies_accepted_additions_and_adjudicated_corrections(runs: Path, tmp_path: Path, capsys) -> None:
    qid, doc = _failed_query(runs)
    dataset = load_demo(TASK)
    gold = next(d for d, grade in dataset.qrels[qid].items() if grade > 0)
    target = tmp_path / "labels.sqlite"
    store = AnnotationStore(target)
    store.review(store.add(_label(query_id=qid, doc_id=doc)).id, True, "rev")
    store.add(_label(query_id=qid, doc_id=gold, failure_type="gold_questionable"))
    decide(store, (f"demo:{TASK}", TASK, qid, gold), "gold_questionable", "rev", grade=0)  # a correction
    out = tmp_path / "team.qrels"
    env = {"R2MED_ANNOTATIONS_URL": str(target)}  # found as the app finds it
    done = cli("qrels", "--demo", TASK, "--output", str(out), env=env)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == qrels_text(read_team_qrels(store, dataset).qrels)
    lines = set(out.read_text().splitlines())
    assert f"{qid} 0 {doc} 1" in lines and f"{qid} 0 {gold} 0" in lines
    assert "2 added or changed by the team" in done.stdout
    assert main(["qrels", "--demo", TASK, "--store", str(target), "--output", str(tmp_path / "again.qrels")]) == 0
    assert (tmp_path / "again.qrels").read_text() == out.read_text()


def test_qrels_bad_input(tmp_path: Path) -> None:
    env = {"R2MED_ANNOTATIONS_URL": "", "R2MED_DATA_HOME": str(tmp_path)}
    done = cli("qrels", "--demo", TASK, "--output", str(tmp_path / "q.txt"), env=env)
    assert done.returncode == 1 and "no annotation store" in done.stderr and str(tmp_path) in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "q.txt").exists()
    usage = cli("qrels", "--demo", TASK, env=env)
    assert usage.returncode == 2 and "--output" in usage.stderr


def test_a_results_file_without_its_run_is_named_not_read_as_scores(runs: Path, tmp_path: Path, capsys) -> None:
    alone = tmp_path / "bm25.json"
    alone.write_text((runs / "bm25.json").read_text())
    assert main(["pool", "--run", str(alone), "--demo", TASK, "--output", str(tmp_path / "p.txt")]) == 1
    assert f"error: {alone}: a results file holds no ranking, and its run bm25.trec is not beside it" in (
        capsys.readouterr().err
    )
