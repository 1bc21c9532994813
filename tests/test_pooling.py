"""Pooling: unjudged documents of the systems' top k, Judged@k, and metrics with/without the team's judgements."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import ir_measures
import pytest

from r2med_core.adjudication import Decision
from r2med_core.annotations import Annotation, AnnotationStore
from r2med_core.data import DataError
from r2med_core.evaluation import evaluate
from r2med_core.pooling import JudgingQueue, Pool, compare_with_team, judged_at_k, pool
from r2med_core.runs import Run
from r2med_core.team import team_qrels


def _run(name: str, rankings: dict[str, list[str]]) -> Run:
    return Run(
        name, {qid: [(doc, float(len(docs) - i)) for i, doc in enumerate(docs)] for qid, docs in rankings.items()}
    )


QRELS = {"q1": {"g1": 2, "n1": 0}, "q2": {"g2": 1}, "q3": {}}
A = _run("A", {"q1": ["g1", "u1", "n1", "u2", "u3"], "q2": ["u4", "g2"], "q3": ["x"], "q9": ["y"]})
B = _run("B", {"q1": ["u2", "u5", "g1", "u1"], "q2": ["g2", "u6"]})


def test_pool_keeps_only_unjudged_top_depth_documents_deduplicated_with_contributors() -> None:
    pooled = pool({"A": A, "B": B}, QRELS, depth=3)
    assert isinstance(pooled, Pool) and pooled.depth == 3 and pooled.systems == ("A", "B")
    # q1: A's top 3 = g1, u1, n1 (n1 is judged, grade 0) → u1; B's top 3 = u2, u5, g1 → u2, u5.
    # Order: best rank anywhere (u2 rank 1 in B; u1, u5 rank 2, A before B), u3 and B's u1 at rank 4 are cut.
    assert [(d.doc_id, d.systems) for d in pooled.docs["q1"]] == [("u2", ("B",)), ("u1", ("A",)), ("u5", ("B",))]
    assert [(d.doc_id, d.systems) for d in pooled.docs["q2"]] == [("u4", ("A",)), ("u6", ("B",))]
    # q3 has no judgements and q9 is not in the qrels: never evaluated, so never pooled.
    assert set(pooled.docs) == {"q1", "q2"} and len(pooled) == 5
    deeper = pool({"A": A, "B": B}, QRELS, depth=4)
    u1 = next(d for d in deeper.docs["q1"] if d.doc_id == "u1")
    assert u1.systems == ("A", "B")  # retrieved by both within depth 4: listed once, both credited
    assert deeper.contributed() == {"A": 3, "B": 4} and deeper.unique() == {"A": 1, "B": 2}
    with pytest.raises(ValueError, match="positive integer"):
        pool({"A": A}, QRELS, depth=0)


def _team(store: AnnotationStore, decisions: list[Decision] | None = None) -> dict[str, dict[str, int]]:
    return team_qrels(QRELS, store.list(), decisions or [], dataset="R2MED", task="T").qrels


def test_pool_skips_documents_the_team_judged() -> None:
    pooled = pool({"A": A}, {**QRELS, "q1": {**QRELS["q1"], "u1": 1}}, depth=5)
    assert [d.doc_id for d in pooled.docs["q1"]] == ["u2", "u3"]


def test_judged_at_k_is_ir_measures_judged() -> None:
    mean, per_query = judged_at_k(A, QRELS, k=10)
    expected = ir_measures.calc_aggregate(
        [ir_measures.Judged @ 10], {q: g for q, g in QRELS.items() if g}, A.as_score_dict()
    )[ir_measures.Judged @ 10]
    assert mean == pytest.approx(expected)
    assert per_query == pytest.approx({"q1": 2 / 5, "q2": 1 / 2})  # n1 (grade 0) counts as judged
    assert judged_at_k(A, QRELS, k=1)[1] == pytest.approx({"q1": 1.0, "q2": 0.0})
    assert judged_at_k(Run("empty"), QRELS) == (0.0, {})


def test_accepted_addition_changes_metric_rank_and_judged(tmp_path: Path) -> None:
    store = AnnotationStore(tmp_path / "a.sqlite")
    label = store.add(
        Annotation(
            dataset="R2MED", task="T", query_id="q2", doc_id="u4", failure_type="relevant_unjudged", annotator="ann"
        )
    )
    runs = {"A": A, "B": B, "C": _run("C", {"q1": ["g1"], "q2": ["g2"]})}  # C: perfect on the old judgements
    before = compare_with_team(runs, QRELS, _team(store))
    assert (before["without"] == before["with"]).all()  # a proposal is not a judgement
    store.review(label.id, True, "rev")
    table = compare_with_team(runs, QRELS, _team(store)).set_index("system")
    assert table.loc["A", "without"] == pytest.approx(evaluate(A, QRELS).means["ndcg_at_10"])
    extended = {**QRELS, "q2": {"g2": 1, "u4": 1}}
    assert table.loc["A", "with"] == pytest.approx(evaluate(A, extended).means["ndcg_at_10"])
    assert table.loc["A", "with"] > table.loc["A", "without"]
    assert table.loc["B", "with"] < table.loc["B", "without"]  # B misses the new relevant document
    # Without the addition C leads; with it A does (C never retrieved u4).
    assert (table.loc["A", "rank_without"], table.loc["A", "rank_with"], table.loc["A", "rank_change"]) == (2, 1, 1)
    assert (table.loc["C", "rank_without"], table.loc["C", "rank_with"], table.loc["C", "rank_change"]) == (1, 2, -1)
    assert table.loc["B", "rank_change"] == 0
    assert table.loc["A", "judged_without"] == pytest.approx((2 / 5 + 1 / 2) / 2)
    assert table.loc["A", "judged_with"] == pytest.approx((2 / 5 + 1) / 2)


def test_queue_send_merges_and_pending_follows_each_annotators_labels(tmp_path: Path) -> None:
    queue = JudgingQueue(tmp_path / "data" / "queue.json")
    assert queue.items("R2MED", "T") == []
    pooled = pool({"A": A, "B": B}, QRELS, depth=3)
    assert queue.send("R2MED", "T", pooled, "rev") == 5
    assert queue.send("R2MED", "T", pool({"A": A, "B": B}, QRELS, depth=5), "rev") == 1  # only u3 is new
    entries = queue.items("R2MED", "T")
    assert [(e.query_id, e.doc_id) for e in entries][:2] == [("q1", "u2"), ("q1", "u1")]
    assert entries[1].systems == ("A",) and entries[1].depth == 3 and entries[-1].doc_id == "u3"
    assert queue.items("R2MED", "other task") == []
    labels = [
        Annotation(dataset="R2MED", task="T", query_id="q1", doc_id="u2", failure_type="wrong_aspect", annotator="Ann"),
        Annotation(dataset="R2MED", task="X", query_id="q1", doc_id="u1", failure_type="wrong_aspect", annotator="ann"),
    ]
    left = queue.pending("R2MED", "T", labels, " ann ")
    assert [(e.query_id, e.doc_id) for e in left] == [
        ("q1", "u1"),
        ("q1", "u5"),
        ("q2", "u4"),
        ("q2", "u6"),
        ("q1", "u3"),
    ]
    assert len(queue.pending("R2MED", "T", labels, "bob")) == 6
    with pytest.raises(ValueError, match="sender"):
        queue.send("R2MED", "T", pooled, " ")


def test_concurrent_sends_lose_nothing(tmp_path: Path) -> None:
    queue = JudgingQueue(tmp_path / "queue.json")
    pools = [pool({"A": A}, QRELS, depth=5), pool({"B": B}, QRELS, depth=5)]
    threads = [threading.Thread(target=queue.send, args=("R2MED", "T", p, "rev")) for p in pools * 3]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    union = {(d.query_id, d.doc_id) for p in pools for d in p.items()}
    assert {(e.query_id, e.doc_id) for e in queue.items("R2MED", "T")} == union
    assert len(queue.items("R2MED", "T")) == len(union)


def _kept_aside(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.damaged-*"))


def test_a_file_that_is_not_a_queue_is_an_empty_queue_and_kept_aside_before_the_next_send(tmp_path: Path) -> None:
    path = tmp_path / "queue.json"
    path.write_text("my notes\n")
    queue = JudgingQueue(path)
    assert queue.items("R2MED", "T") == [] and queue.pending("R2MED", "T", [], "ann") == []
    assert str(queue.problems()[0]) == "queue.json:1: not JSON (Expecting value): read as an empty queue"
    assert path.read_text() == "my notes\n"  # reading never rewrites it
    assert queue.send("R2MED", "T", pool({"A": A}, QRELS), "rev") == 4
    (kept,) = _kept_aside(path)
    assert kept.read_text() == "my notes\n"  # nothing the user made is lost
    assert len(queue.items("R2MED", "T")) == 4
    (note,) = queue.problems()  # the file is sound again; the copy is still pointed at
    assert note.path == kept.name and "kept aside" in note.message


GOOD = {"query_id": "q1", "doc_id": "u1", "systems": ["A"], "depth": 3, "sent_by": "rev", "sent_at": "t"}


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        pytest.param(["q1", "u9"], "entry 2: not an object", id="list"),
        pytest.param({**GOOD, "doc_id": 9}, 'entry 2: "doc_id" must be a non-empty string', id="number-id"),
        pytest.param({**GOOD, "doc_id": {"a": 1}}, 'entry 2: "doc_id" must be', id="object-id"),
        pytest.param({**GOOD, "systems": "A"}, 'entry 2: "systems" must be a list', id="systems-text"),
        pytest.param({**GOOD, "depth": True}, 'entry 2: "depth" must be a whole number', id="depth-bool"),
        pytest.param({**GOOD, "depth": 1e999}, 'entry 2: "depth" must be a whole number', id="depth-infinite"),
        pytest.param({**GOOD, "sent_by": None}, 'entry 2: "sent_by" and "sent_at" must be', id="sender-null"),
    ],
)
def test_a_wrong_entry_is_skipped_and_named_and_the_rest_kept(tmp_path: Path, bad: object, expected: str) -> None:
    path = tmp_path / "queue.json"
    path.write_text(json.dumps({"version": 1, "tasks": {"R2MED\tT": [GOOD, bad, {**GOOD, "doc_id": "u2"}]}}))
    queue = JudgingQueue(path)
    assert [e.doc_id for e in queue.items("R2MED", "T")] == ["u1", "u2"]
    assert [(d, t, e.doc_id) for d, t, e in queue.every_task()] == [("R2MED", "T", "u1"), ("R2MED", "T", "u2")]
    first = str(queue.problems()[0])
    assert first.startswith(f"queue.json: task R2MED/T, {expected}") and first.endswith("; skipped")
    _sends_and_merges_keeping_what_was_there(queue, path, ["u1", "u2"])


def _sends_and_merges_keeping_what_was_there(queue: JudgingQueue, path: Path, before: list[str]) -> None:
    """A send and a restore's merge work on a damaged file: the damaged file is kept aside first, and the
    queue then holds what could be read of it plus the new entries."""
    damaged = path.read_bytes()
    assert queue.send("R2MED", "T", pool({"B": B}, QRELS, depth=2), "rev") > 0
    (kept,) = _kept_aside(path)
    assert kept.read_bytes() == damaged
    assert [e.doc_id for e in queue.items("R2MED", "T")] == before + [d for d in ["u2", "u5", "u6"] if d not in before]
    restored = [("R2MED", "other", queue.items("R2MED", "T")[0])]
    assert queue.merge(restored) == 1 and queue.every_task()[-1] == restored[0]
    assert [p.path for p in queue.problems()] == [kept.name]  # sound again: only the kept copy is pointed at


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("[" * 100_000 + "]" * 100_000, "queue.json: nested too deeply to read", id="deep"),
        pytest.param('{"version": 1' + "0" * 5000 + ', "tasks": {}}', "not a version-1", id="long-version"),
        pytest.param('{"version": 1, "tasks": []}', "not a version-1 judging queue", id="tasks-list"),
        pytest.param('{"version": 1}', "not a version-1 judging queue", id="no-tasks"),
        pytest.param(b'{"version": 1,\n\xff}', "queue.json:2: not UTF-8 text", id="not-utf8"),
    ],
)
def test_an_unreadable_file_is_an_empty_queue_and_kept(tmp_path: Path, text: str | bytes, expected: str) -> None:
    path = tmp_path / "queue.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    queue = JudgingQueue(path)
    assert queue.items("R2MED", "T") == [] and queue.every_task() == []
    assert expected in str(queue.problems()[0]) and "read as an empty queue" in str(queue.problems()[0])
    _sends_and_merges_keeping_what_was_there(queue, path, [])


def test_hostile_task_lists_and_a_huge_depth_skip_only_their_entries(tmp_path: Path) -> None:
    path = tmp_path / "queue.json"
    huge = json.dumps({**GOOD, "doc_id": "u9"}).replace('"depth": 3', '"depth": ' + "9" * 5000)
    path.write_text(
        '{"version": 1, "tasks": {"R2MED\\tT": [' + json.dumps(GOOD) + ", " + huge + "], "
        '"no tab": [], "R2MED\\tX": {"not": "a list"}}}'
    )
    queue = JudgingQueue(path)
    assert [e.doc_id for e in queue.items("R2MED", "T")] == ["u1"]
    messages = [str(p) for p in queue.problems()]
    assert messages[:3] == [
        'queue.json: task R2MED/T, entry 2: "depth" must be a whole number of 0 or more; skipped',
        "queue.json: 'no tab': not a task's list of entries; skipped",
        "queue.json: 'R2MED\\tX': not a task's list of entries; skipped",
    ]
    _sends_and_merges_keeping_what_was_there(queue, path, ["u1"])


def test_many_bad_entries_are_counted_not_listed(tmp_path: Path) -> None:
    path = tmp_path / "queue.json"
    path.write_text(json.dumps({"version": 1, "tasks": {"R2MED\tT": [1] * 500}}))
    problems = JudgingQueue(path).problems()
    assert len(problems) == 22 and problems[20].message == "… and 480 more skipped"


def test_a_killed_writers_temporary_files_are_removed_by_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "queue.json"
    queue = JudgingQueue(path)
    queue.send("R2MED", "T", pool({"A": A}, QRELS), "rev")
    stale = [tmp_path / ".queue.json.k1ll3d.tmp", tmp_path / ".queue.json.0ther.tmp"]  # as atomic_write leaves them
    for file in stale:
        file.write_text('{"version": 1, "tasks": {}}')
    other = tmp_path / ".other.json.x.tmp"
    other.write_text("not ours")
    assert queue.send("R2MED", "T", pool({"A": A}, QRELS), "rev") == 0  # even a send that adds nothing
    assert not any(file.exists() for file in stale) and other.exists()
    assert len(queue.items("R2MED", "T")) == 4


def test_documents_judged_not_relevant_count_as_judged_but_change_no_metric(tmp_path: Path) -> None:
    store = AnnotationStore(tmp_path / "a.sqlite")
    common = {"dataset": "R2MED", "task": "T", "failure_type": "not_relevant"}
    store.add(Annotation(**common, query_id="q1", doc_id="u1", annotator="ann"))
    store.add(Annotation(**common, query_id="q3", doc_id="x", annotator="ann"))  # q3 has no judgements
    rejected = store.add(Annotation(**common, query_id="q2", doc_id="u4", annotator="bob"))
    store.review(rejected.id, False, "rev")
    store.add(Annotation(**{**common, "task": "other"}, query_id="q1", doc_id="u2", annotator="ann"))
    store.add(Annotation(**{**common, "failure_type": "grade_0"}, query_id="q2", doc_id="u5", annotator="ann"))
    store.add(Annotation(**{**common, "failure_type": "grade_2"}, query_id="q2", doc_id="u6", annotator="ann"))
    store.add(Annotation(**common, query_id="q1", doc_id="g1", annotator="ann"))  # a gold document: not lowered
    team = _team(store)
    # One person's grade 0 (either page's) fills a hole without a review; q3 stays out of the means.
    assert team == {"q1": {"g1": 2, "n1": 0, "u1": 0}, "q2": {"g2": 1, "u5": 0}, "q3": {}}
    row = compare_with_team({"A": A}, QRELS, team).iloc[0]
    assert row["with"] == pytest.approx(row["without"])
    assert row["judged_with"] == pytest.approx((3 / 5 + 1 / 2) / 2)  # u1 now judged in A's q1 top 5
    assert [d.doc_id for d in pool({"A": A}, team, 5).docs["q1"]] == ["u2", "u3"]


def test_a_reviewers_decision_replaces_what_the_labels_said_about_a_pair(tmp_path: Path) -> None:
    store = AnnotationStore(tmp_path / "a.sqlite")
    common = {"dataset": "R2MED", "task": "T", "query_id": "q1"}
    for doc in ("u1", "u2"):
        accepted = store.add(Annotation(**common, doc_id=doc, failure_type="grade_1", annotator="ann"))
        store.review(accepted.id, True, "rev")
    store.add(Annotation(**common, doc_id="u3", failure_type="grade_0", annotator="ann"))
    store.add(Annotation(**{**common, "query_id": "q2"}, doc_id="u4", failure_type="grade_0", annotator="ann"))

    def decision(query: str, doc: str, grade: int, id: int) -> Decision:
        return Decision(
            id=id, dataset="R2MED", task="T", query_id=query, doc_id=doc, failure_type=f"grade_{grade}", reviewer="r"
        )

    decisions = [decision("q1", "u1", 0, 1), decision("q2", "u4", 2, 2), decision("q3", "x", 1, 3)]
    assert _team(store, decisions) == {
        "q1": {"g1": 2, "n1": 0, "u1": 0, "u2": 1, "u3": 0},
        "q2": {"g2": 1, "u4": 2},
        "q3": {"x": 1},
    }


def test_pool_downloads_trec_like_and_csv_in_the_pools_order() -> None:
    from r2med_core.pooling import pool_csv, pool_text

    pooled = pool({"A": A, "B": B}, QRELS, depth=4)
    assert pool_text(pooled) == "q1 0 u2\nq1 0 u1\nq1 0 u5\nq2 0 u4\nq2 0 u6\n"
    rows = pool_csv(pooled).splitlines()
    assert rows[0] == "query_id,doc_id,systems" and rows[2] == "q1,u1,A B" and rows[-1] == "q2,u6,B"
    spaced = pool({"A": _run("A", {"q1": ["a doc"]})}, QRELS, depth=1)
    with pytest.raises(DataError, match="an id a TREC line cannot hold"):
        pool_text(spaced)
    assert pool_csv(spaced).splitlines()[1] == "q1,a doc,A"  # CSV quotes what TREC cannot hold
