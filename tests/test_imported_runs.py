"""Imported runs: runs made elsewhere become systems named run:<name> — validated with file:line
messages, stored for good, found by name only (never by a path), and usable on every page and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from r2med_core import DataError, evaluate, load_demo, run_system
from r2med_core.imported_runs import (
    available_runs,
    parse_run,
    read_run_file,
    sanitize_run_name,
    save_upload,
    uploads_root,
)
from r2med_core.runs import Run, format_trec
from r2med_core.settings import Settings
from r2med_core.systems import SpecError, parse_system
from tests.test_app import frame, gold_table, open_app, picker, retrieved_table, significance

TASK = "clinical-evidence"


@pytest.fixture(scope="module")
def dataset():  # type: ignore[no-untyped-def]
    return load_demo(TASK)


def _scores(run: Run) -> dict[str, dict[str, float]]:
    return run.as_score_dict()


def _shuffled_run(dataset) -> Run:  # type: ignore[no-untyped-def]
    """A run unlike BM25's: every query's gold documents first, then the corpus in reverse order."""
    docs = list(dataset.corpus)[::-1]
    rankings = {}
    for qid in dataset.queries:
        order = list(dict.fromkeys([*dataset.positives(qid), *docs]))[:100]
        rankings[qid] = [(doc, float(100 - i)) for i, doc in enumerate(order)]
    return Run("gpu-model", rankings)


def test_trec_upload_reports_unknown_ids_as_warnings_with_lines(dataset) -> None:  # type: ignore[no-untyped-def]
    qid, doc = next(iter(dataset.queries)), next(iter(dataset.corpus))
    text = f"{qid} Q0 {doc} 1 2.0 t\n{qid} Q0 ghost-doc 2 1.0 t\nno-such-q Q0 {doc} 1 1.0 t\n"
    imported = parse_run(text.encode(), "mine.trec", "run:mine", dataset)
    assert [d for d, _ in imported.run.top(qid)] == [doc, "ghost-doc"]  # unknown docs kept, as trec_eval counts
    assert "no-such-q" not in imported.run.rankings
    messages = [str(w) for w in imported.warnings]
    assert any(m.startswith("mine.trec:3: query 'no-such-q'") for m in messages), messages
    assert any(m.startswith("mine.trec:2: document 'ghost-doc'") for m in messages), messages


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"q Q0 a 1 1.0 t\nq Q0 b two 0.5 t\n", "upload.trec:2: rank must be an integer"),
        (b"q Q0 a 1 1.0 t\nq Q0 b 2\n", "upload.trec:2: expected 6 columns"),
        (b'{"q": {"a": 1.0},\n "r": {"b": 2.0,}}', "upload.trec:2: malformed JSON"),
        (b'{"q": {"a": "high"}}', "upload.trec: query 'q', document 'a': score must be a number"),
        (b"\xff\xfe junk\n", "upload.trec:1: not UTF-8"),
        # issue 36: a lone surrogate (or whitespace) in a score-JSON id fails at parse time, by the ids' one rule
        (b'{"q": {"\\ud800": 1.0}}', "upload.trec: \"document id\" '\\ud800' is not valid Unicode"),
        (b'{"\\udfff": {"a": 1.0}}', "upload.trec: \"query id\" '\\udfff' is not valid Unicode"),
        (b'{"q": {"a b": 1.0}}', "upload.trec: \"document id\" 'a b' contains whitespace"),
    ],
)
def test_bad_lines_are_errors_naming_file_and_line(content: bytes, expected: str) -> None:
    with pytest.raises(DataError) as caught:
        parse_run(content, "upload.trec", "run:x")
    assert any(str(p).startswith(expected) for p in caught.value.problems), caught.value.problems


def test_generic_and_mteb_json_convert_to_the_same_run(dataset) -> None:  # type: ignore[no-untyped-def]
    run = run_system(dataset, "bm25")
    generic = parse_run(json.dumps(_scores(run)).encode(), "scores.json", "run:a", dataset)
    wrapped = {"mteb_model_meta": {"name": "x"}, "default": {"test": _scores(run)}}
    mteb = parse_run(json.dumps(wrapped).encode(), "Task_predictions.json", "run:b", dataset)
    assert generic.source_format == mteb.source_format == "json"
    for imported in (generic, mteb):
        assert imported.warnings == ()
        assert imported.run.as_score_dict() == run.as_score_dict()
        for ranking in imported.run.rankings.values():  # best first (JSON has no order: ties by doc id)
            assert [s for _, s in ranking] == sorted((s for _, s in ranking), reverse=True)
    same = evaluate(generic.run, dataset.qrels).means
    assert same["ndcg_at_10"] == pytest.approx(evaluate(run, dataset.qrels).means["ndcg_at_10"])


def test_a_kits_result_folder_loads_its_score_file_not_its_metrics(tmp_path: Path, dataset) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "e5-mistral"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"NDCG@10": 0.31, "MRR": 0.4}))
    expected = _shuffled_run(dataset)
    (folder / "score.json").write_text(json.dumps(_scores(expected)))
    loaded = read_run_file(folder, dataset)
    assert {q: [d for d, _ in r] for q, r in loaded.run.rankings.items()} == {
        q: [d for d, _ in r] for q, r in expected.rankings.items()
    }


def test_run_names_are_ours_and_paths_never_resolve(tmp_path: Path, dataset) -> None:  # type: ignore[no-untyped-def]
    assert sanitize_run_name("../../etc/passwd") == "passwd"
    assert sanitize_run_name("C:\\runs\\My Model (v2).trec") == "My-Model-v2"
    assert sanitize_run_name("..") == "run"
    for name in ("run:../../etc/passwd", "run:/etc/passwd", "run:..", "run:.hidden", "run:a/b"):
        with pytest.raises(SpecError):
            parse_system(name)
    # a run named like a file outside the runs folder (through a symlink) is never offered
    secret = tmp_path / "secret.trec"
    secret.write_text(format_trec(_shuffled_run(dataset)))
    runs_dir = tmp_path / "runs"
    (runs_dir / TASK).mkdir(parents=True)
    (runs_dir / TASK / "escape.trec").symlink_to(secret)
    settings = Settings(runs_dir=runs_dir)
    assert "escape" not in available_runs(dataset, settings)
    with pytest.raises(SpecError, match="no run named"):
        run_system(dataset, "run:escape")


def test_runs_folder_is_discovered_per_task_and_runs_like_a_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dataset
) -> None:  # type: ignore[no-untyped-def]
    runs_dir = tmp_path / "runs"
    (runs_dir / TASK).mkdir(parents=True)
    (runs_dir / "qa-reference").mkdir()
    expected = _shuffled_run(dataset)
    (runs_dir / TASK / "gpu model.trec").write_text(format_trec(expected))
    (runs_dir / TASK / "mteb.json").write_text(json.dumps(_scores(expected)))
    (runs_dir / "qa-reference" / "other.trec").write_text("q1 Q0 d 1 1.0 t\n")
    kit = runs_dir / TASK / "e5-mistral"  # a kit's per-retriever result folder
    kit.mkdir()
    (kit / "results.json").write_text(json.dumps({"NDCG@10": 0.3}))
    (kit / "score.json").write_text(json.dumps(_scores(expected)))
    monkeypatch.setenv("R2MED_RUNS_DIR", str(runs_dir))

    assert set(available_runs(dataset)) == {"gpu-model", "mteb", "e5-mistral"}
    assert run_system(dataset, "run:e5-mistral").as_score_dict() == expected.as_score_dict()
    run = run_system(dataset, "run:gpu-model")
    assert run.name == "run:gpu-model"
    assert run.rankings == expected.rankings
    fused = run_system(dataset, "rrf(bm25,run:gpu-model)")
    assert len(fused) == len(dataset.queries)
    assert not parse_system("rrf(bm25,run:gpu-model)").searches_text
    with pytest.raises(SpecError, match=r"no run named 'nope'.*run:gpu-model"):
        run_system(dataset, "run:nope")


def test_uploads_are_capped_validated_stored_and_survive(tmp_path: Path, dataset) -> None:  # type: ignore[no-untyped-def]
    data = format_trec(_shuffled_run(dataset)).encode()
    with pytest.raises(DataError, match=r"over the 0\.001 MB upload limit"):
        save_upload(dataset, data, "big.trec", Settings(upload_max_mb=0.001))
    with pytest.raises(DataError, match="no row names a query"):
        save_upload(dataset, b"elsewhere Q0 d 1 1.0 t\n", "wrong.trec", Settings())

    entry, imported = save_upload(dataset, data, "/home/someone/My Run.trec", Settings())
    assert entry.name == "My-Run" and entry.label == "My Run.trec"
    assert entry.path.parent.parent == uploads_root() and entry.path.is_file()
    assert not list(entry.path.parent.glob("*.tmp"))  # written atomically
    again, _ = save_upload(dataset, data, "My Run.trec", Settings())
    assert again.name == "My-Run"  # the same bytes are not stored twice
    other, _ = save_upload(dataset, data.replace(b"100.000000", b"101.000000"), "My Run.trec", Settings())
    assert other.name == "My-Run-2"

    # a new process (a restarted server) finds it by name
    code = f"from r2med_core import load_demo, run_system; print(len(run_system(load_demo('{TASK}'), 'run:My-Run')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(len(imported.run))
    assert "My-Run" not in available_runs(load_demo("qa-reference"), Settings())  # kept per dataset


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "r2med_core", *args], capture_output=True, text=True, check=False)


def test_cli_evaluates_run_names_and_score_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dataset) -> None:  # type: ignore[no-untyped-def]
    expected = _shuffled_run(dataset)
    runs_dir = tmp_path / "runs"
    (runs_dir / TASK).mkdir(parents=True)
    (runs_dir / TASK / "gpu.trec").write_text(format_trec(expected))
    monkeypatch.setenv("R2MED_RUNS_DIR", str(runs_dir))
    done = _cli("eval", "--retriever", "run:gpu", "--demo", TASK, "--output-dir", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "out" / "run_gpu.json").read_text())
    assert written["test"]["ndcg_at_10"] == pytest.approx(evaluate(expected, dataset.qrels).means["ndcg_at_10"], 1e-4)

    bad = _cli("eval", "--retriever", "run:../../etc/passwd", "--demo", TASK, "--output-dir", str(tmp_path / "x"))
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr

    scores = tmp_path / "Task_default_predictions.json"
    scores.write_text(json.dumps(_scores(expected)))
    done = _cli("evaluate-run", "--run", str(scores), "--demo", TASK)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["test"]["ndcg_at_10"] == pytest.approx(written["test"]["ndcg_at_10"], 1e-4)


# --------------------------------------------------------------------------- the app


def test_uploaded_run_is_a_system_in_the_explorer_and_compare(dataset) -> None:  # type: ignore[no-untyped-def]
    run = _shuffled_run(dataset)
    at = open_app(task=TASK, systems=["bm25"])
    at.file_uploader(key="w_run_file").set_value(("gpu model.trec", format_trec(run).encode(), "text/plain")).run()
    at.button(key="w_run_add").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("run:gpu-model" in s.value for s in at.success), [e.value for e in at.error]
    at.run()
    assert "Run gpu-model (imported)" in at.multiselect(key="w_systems").options
    assert "run:gpu-model" in at.multiselect(key="w_systems").value

    at.switch_page("views/pages/explorer.py").run()
    at.selectbox(key="w_system").set_value("run:gpu-model").run()
    qid = list(dataset.queries)[3]
    picker(at).set_value(qid).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    gold = gold_table(at)
    assert list(gold["rank"]) == [str(i) for i in range(1, len(dataset.positives(qid)) + 1)]
    assert list(retrieved_table(at)["document"]) == [d for d, _ in run.top(qid, 10)]

    at.switch_page("views/pages/compare.py").run()
    at.multiselect(key="w_compare").set_value(["bm25", "run:gpu-model"]).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("Run gpu-model (imported) vs BM25" in s.value.replace("\\", "") for s in at.subheader)
    assert list(significance(at).index) == ["Run gpu-model (imported)"]

    at.switch_page("views/pages/leaderboard.py").run()
    assert "run:gpu-model" in list(frame(at, "run")["run"])

    at.switch_page("views/pages/whatif.py").run()
    assert "Run gpu-model (imported)" not in at.multiselect(key="w_ask_systems").options
    assert "BM25 (R2MED official)" in at.multiselect(key="w_ask_systems").options


def test_a_bad_upload_shows_file_and_line_and_the_app_lives_on() -> None:
    at = open_app(task=TASK)
    at.file_uploader(key="w_run_file").set_value(("bad.trec", b"q Q0 a 1 1.0 t\nq Q0 b\n", "text/plain")).run()
    at.button(key="w_run_add").click().run()
    assert not at.exception
    assert any("bad.trec:2: expected 6 columns" in e.value.replace("\\", "") for e in at.error), [
        e.value for e in at.error
    ]


def test_a_path_in_the_url_reads_nothing() -> None:
    at = open_app("explorer", task=TASK, systems=["bm25", "run:../../etc/passwd"], system="run:../../etc/passwd")
    assert not at.exception
    assert at.selectbox(key="w_system").value == "bm25"
    assert "run:../../etc/passwd" not in at.multiselect(key="w_systems").value
    assert not any("passwd" in option for option in at.multiselect(key="w_systems").options)


def test_the_r2med_kits_topk_files_load_and_its_gold_rank_files_are_refused(tmp_path: Path, dataset) -> None:  # type: ignore[no-untyped-def]
    """The kit writes JSON lines {"id", "topk_pid": [[doc, score], …]} per retriever and task, and
    {"id", "label_location": [[gold doc, rank], …]} files that hold no ranking."""
    expected = _shuffled_run(dataset)
    rows = [{"id": qid, "topk_pid": [[d, s] for d, s in r]} for qid, r in expected.rankings.items()]
    folder = tmp_path / "hyde-gpt4" / "bm25"
    folder.mkdir(parents=True)
    (folder / "Biology_topk.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gold_ranks = [{"id": qid, "label_location": [[d, 3] for d in dataset.positives(qid)]} for qid in dataset.queries]
    (folder / "Biology_pos_label_location.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gold_ranks))

    imported = read_run_file(folder, dataset, "run:kit")
    assert _scores(imported.run) == _scores(expected)
    assert evaluate(imported.run, dataset.qrels).means == evaluate(expected, dataset.qrels).means

    with pytest.raises(DataError, match="holds only the ranks of gold documents"):
        read_run_file(folder / "Biology_pos_label_location.jsonl", dataset)
    broken = b'{"id": "1", "topk_pid": [["d1", 1.0]]}\n{"id": "2", "topk_pid": "oops"}\n'
    with pytest.raises(DataError, match=r"kit\.jsonl:2: expected"):
        parse_run(broken, "kit.jsonl", "run:kit", dataset)
    with pytest.raises(DataError, match="unreadable JSON"):
        parse_run(b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "deep.json", "run:deep", dataset)


def _beir_ndcg_at_10(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> float:
    """BEIR's EvaluateRetrieval.evaluate with ignore_identical_ids=True, transcribed: documents whose id
    equals the query id are popped from the results, then pytrec_eval scores the rest (mean nDCG@10)."""
    import pytrec_eval

    results = {qid: dict(docs) for qid, docs in run.items()}
    for qid, docs in results.items():
        for pid in list(docs):
            if qid == pid:
                docs.pop(pid)
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(results)
    return sum(s["ndcg_cut_10"] for s in scores.values()) / len(scores)


@pytest.mark.parametrize("form", ["trec", "json"])
def test_a_document_with_the_query_id_is_dropped_before_scoring(form: str, dataset) -> None:  # type: ignore[no-untyped-def]
    shuffled = _shuffled_run(dataset)
    first = next(iter(dataset.queries))
    rankings = {qid: list(r) for qid, r in shuffled.rankings.items()}
    rankings[first] = [(first, 1000.0), *rankings[first]]  # the query's own id ranked first
    with_self = Run("mine", rankings)
    data = format_trec(with_self).encode() if form == "trec" else json.dumps(_scores(with_self)).encode()
    imported = parse_run(data, f"mine.{form}", "run:mine", dataset)
    assert first not in [doc for doc, _ in imported.run.rankings[first]]
    assert any("own id" in p.message and "ignore_identical_ids" in p.message for p in imported.warnings)
    means = evaluate(imported.run, dataset.qrels).means
    assert means["ndcg_at_10"] == pytest.approx(_beir_ndcg_at_10(dataset.qrels, _scores(with_self)))
    assert means["ndcg_at_10"] != pytest.approx(evaluate(with_self, dataset.qrels).means["ndcg_at_10"])


def test_your_runs_are_yours_and_the_others_are_listed_apart() -> None:
    """On a shared server a session's "Your runs" lists its own uploads; another session's uploads are
    listed separately, saying who brought them (another visitor, when sign-in is off)."""
    dataset = load_demo(TASK)
    data = format_trec(_shuffled_run(dataset)).encode()
    alice = open_app(task=TASK, systems=["bm25"])
    alice.file_uploader(key="w_run_file").set_value(("alice run.trec", data, "text/plain")).run()
    alice.button(key="w_run_add").click().run()
    assert not alice.exception
    alice.run()
    assert any(e.label == "Your runs (1)" for e in alice.expander)
    assert any("uploaded by you" in c.value and "alice run.trec" in c.value.replace("\\", "") for c in alice.caption)

    bob = open_app(task=TASK, systems=["bm25"])  # another browser session on the same server
    assert any(e.label == "Your runs (0)" for e in bob.expander)
    assert any("Others' runs on this server (1)" in m.value for m in bob.markdown)
    assert any("uploaded by another visitor" in c.value for c in bob.caption)
    bob.file_uploader(key="w_run_file").set_value(("same bytes.trec", data, "text/plain")).run()
    bob.button(key="w_run_add").click().run()  # the same file: one run, now Bob's too
    bob.run()
    assert any(e.label == "Your runs (1)" for e in bob.expander)
    (entry,) = available_runs(dataset).values()
    assert len(entry.uploaded_by) == 2 and all(u.startswith("session:") for u in entry.uploaded_by)


@pytest.mark.parametrize("damage", ["[" * 100_000, '{"source_file": ' + "9" * 5000 + "}", "{not json"])
def test_a_damaged_meta_file_beside_an_upload_costs_only_its_label(dataset, damage: str) -> None:  # type: ignore[no-untyped-def]
    """Issue 36: deep nesting or a 5000-digit number in an upload's meta file made available_runs raise
    for the whole dataset."""
    data = format_trec(_shuffled_run(dataset)).encode()
    entry, _ = save_upload(dataset, data, "damaged.trec", Settings())
    other, _ = save_upload(dataset, data.replace(b"100.000000", b"102.000000"), "fine.trec", Settings())
    entry.path.with_suffix(".json").write_text(damage, encoding="utf-8")
    runs = available_runs(dataset, Settings())
    assert entry.name in runs and other.name in runs
