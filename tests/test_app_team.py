"""One store state, one team score: Metrics' "with", the Annotations and Adjudication pages' re-evaluation
and downloads, and the command line's ``qrels`` and ``pool --store`` all show ``r2med_core.judging.team``'s qrels;
and a grade given on the Judging page agrees with the same grade given on Judge a list."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
from streamlit.testing.v1 import AppTest

from r2med_app.views.markup import md
from r2med_core import load_demo, run_system
from r2med_core.cli import main
from r2med_core.evaluation import evaluate
from r2med_core.judging.adjudication import adjudication_items, decide, history
from r2med_core.judging.annotations import Annotation, AnnotationStore, default_store_path
from r2med_core.judging.list_judging import GradeEvent, SaveOnce, now_ms, save_grades
from r2med_core.judging.pooling import pool, pool_csv
from r2med_core.judging.queue import JudgingQueue
from r2med_core.judging.team import TeamQrels, changes_text, qrels_text, read_team_qrels, review_queue
from r2med_core.runs import write_trec

from .test_app import by_label, open_app, save_label
from .test_app_pooling import SHOWN, pool_table

TASK = "clinical-evidence"
SYSTEMS = ["bm25", "bm25s"]


@pytest.fixture(autouse=True)
def _compute_without_a_click(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> Callable[[AppTest], dict[str, str]]:
    """What each download button of a page hands out, by its label (AppTest keeps only the file's URL)."""
    served: dict[str, bytes] = {}
    load = MemoryMediaFileStorage.load_and_get_id

    def keep(self, path_or_data, mimetype, kind, filename=None):  # type: ignore[no-untyped-def]
        file_id = load(self, path_or_data, mimetype, kind, filename)
        served[file_id] = path_or_data if isinstance(path_or_data, bytes) else b""
        return file_id

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", keep)

    def read(at: AppTest) -> dict[str, str]:
        return {
            b.proto.label: served[b.proto.url.rsplit("/", 1)[1].split(".")[0]].decode()
            for b in at.get("download_button")
        }

    return read


def _seed() -> tuple[TeamQrels, dict[str, dict[str, int]]]:
    """Two annotators agree on one unjudged document and disagree on a gold one (adjudicated: a correction),
    a third proposes a document nobody reviewed, a fourth's proposal was accepted. Returns the team's
    qrels as the core reads them, and as they must be."""
    dataset = load_demo(TASK)
    run = run_system(dataset, "bm25")
    qid = next(q for q in dataset.queries if dataset.positives(q) and len(run.top(q, 10)) == 10)
    gold = next(iter(dataset.positives(qid)))
    agreed, proposed, accepted = [d for d, _ in run.top(qid, 10) if d not in dataset.qrels[qid]][:3]
    store = AnnotationStore()

    def add(who: str, doc: str, code: str) -> Annotation:
        return store.add(
            Annotation(dataset=dataset.source, task=TASK, query_id=qid, doc_id=doc, failure_type=code, annotator=who)
        )

    add("alice", agreed, "relevant_unjudged")  # the Judging page, as older versions stored it
    add("bob", agreed, "grade_1")  # Judge a list
    add("carol", proposed, "grade_2")
    store.review(add("dan", accepted, "grade_1").id, True, "Rev")
    add("alice", gold, "grade_0")
    add("bob", gold, "grade_2")
    decide(store, (dataset.source, TASK, qid, gold), "grade_0", "Rev", reason="does not answer it")
    expected = {**dataset.qrels, qid: {**dataset.qrels[qid], agreed: 1, accepted: 1, gold: 0}}
    return read_team_qrels(store, dataset), expected


def _scores(team: TeamQrels) -> list[float]:
    dataset = load_demo(TASK)
    return [evaluate(run_system(dataset, name), team.qrels).means["ndcg_at_10"] for name in SYSTEMS]


def _reevaluated(at: AppTest) -> list[float]:
    """The page's re-evaluation: each system's nDCG@10 with the team's qrels."""
    rows = next(df.value for df in at.dataframe if "qrels" in df.value.columns)
    return list(rows[rows["qrels"] == "team qrels"]["nDCG@10"])


def test_every_page_scores_and_downloads_the_one_definition_of_the_teams_judgements(downloads) -> None:  # type: ignore[no-untyped-def]
    team, expected = _seed()
    assert team.qrels == expected  # the one function: original, agreed and accepted, then adjudicated
    assert (team.proposed, team.count("agreed"), team.count("accepted"), team.count("adjudicated")) == (1, 1, 1, 1)
    scores = _scores(team)

    metrics = open_app("metrics", task=TASK, systems=SYSTEMS)
    table = pool_table(metrics)
    assert list(table["with"]) == pytest.approx(scores, abs=SHOWN)
    assert any(md(team.caption()) in c.value for c in metrics.caption)

    adjudication = open_app("adjudication", task=TASK, systems=SYSTEMS)
    assert _reevaluated(adjudication) == pytest.approx(scores)
    assert _reevaluated(adjudication) == pytest.approx(list(table["with"]), abs=SHOWN)  # Metrics and Adjudication agree
    served = downloads(adjudication)
    assert served[f"Team qrels changes for {TASK} (TREC)"] == changes_text(team.changes)
    assert any(md(team.caption()) in c.value for c in adjudication.caption)

    annotations = open_app("annotations", task=TASK, systems=SYSTEMS)
    assert _reevaluated(annotations) == pytest.approx(scores)
    assert downloads(annotations)[f"Team qrels for {TASK} (TREC)"] == qrels_text(team.qrels)


def test_the_command_line_writes_and_scores_the_same_team_qrels(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    team, _ = _seed()
    store = str(default_store_path())
    out = tmp_path / "team.qrels"
    assert main(["qrels", "--demo", TASK, "--store", store, "--output", str(out)]) == 0
    assert out.read_text() == qrels_text(team.qrels)
    assert team.caption() in capsys.readouterr().out

    dataset = load_demo(TASK)
    runs = {name: run_system(dataset, name) for name in SYSTEMS}
    for name, run in runs.items():
        write_trec(run, tmp_path / f"{name}.trec")
    args = ["pool", "--demo", TASK, "--store", store, "--output", str(tmp_path / "pool.csv")]
    assert main([*args, *(a for name in SYSTEMS for a in ("--run", str(tmp_path / f"{name}.trec")))]) == 0
    printed = capsys.readouterr().out
    assert (tmp_path / "pool.csv").read_text() == pool_csv(pool(runs, team.qrels, 10))
    assert team.caption() in printed
    shown = {cells[0]: float(cells[2]) for cells in map(str.split, printed.splitlines()) if "→" in "".join(cells)}
    assert [shown[name] for name in SYSTEMS] == pytest.approx([round(s, 4) for s in _scores(team)], abs=1e-4)


def test_a_grade_on_the_judging_page_agrees_with_the_same_grade_on_judge_a_list() -> None:
    """Ann grades a pooled document on the Judging page, Bob gives it the same grade on Judge a list: no
    disagreement to adjudicate, nothing to review, and the grade is the team's."""
    dataset = load_demo(TASK)
    runs = {name: run_system(dataset, name) for name in SYSTEMS}
    JudgingQueue(AnnotationStore()).send(dataset.source, TASK, pool(runs, dataset.qrels, 10), "Rev")
    first = JudgingQueue(AnnotationStore()).items(dataset.source, TASK)[0]
    judging = open_app("judging", task=TASK, systems=SYSTEMS)
    judging.text_input(key="w_annotator").input("Ann")
    by_label(judging.selectbox, "Relevance grade").set_value(2)
    save_label(judging)
    assert not judging.exception
    save_grades(
        AnnotationStore(),
        SaveOnce(),
        [GradeEvent("k1", first.doc_id, 2, now_ms())],
        dataset=dataset.source,
        task=TASK,
        query_id=first.query_id,
        ranking=runs["bm25"],
        annotator="Bob",
    )  # what Judge a list stores for Bob's keypress
    store = AnnotationStore()
    assert sorted((a.annotator, a.doc_id, a.failure_type) for a in store.list()) == [
        ("Ann", first.doc_id, "grade_2"),
        ("Bob", first.doc_id, "grade_2"),
    ]
    assert adjudication_items(store.list(), history(store)) == [] and review_queue(store.list(), []) == []
    team = read_team_qrels(store, dataset)
    assert [(c.doc_id, c.grade, c.source) for c in team.changes] == [(first.doc_id, 2, "agreed")]
    adjudication = open_app("adjudication", task=TASK, systems=SYSTEMS)
    assert any(s.value.startswith("Waiting for a decision (0)") for s in adjudication.subheader)
    table = next(t.value for t in adjudication.table if "kappa before" in t.value.columns)
    assert (list(table["ratings"]), list(table["same rating before"])) == (["grades"], [1])
