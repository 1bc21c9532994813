"""Loading every supported layout, and the validation messages a user acts on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from r2med_core.data import DataError, load_dir, load_r2med_dir, validate_dir
from r2med_core.tasks import TASKS, Family, get_task

from .conftest import TINY_CORPUS, TINY_QRELS, TINY_QUERIES, write_jsonl


def test_tasks_cover_the_benchmark() -> None:
    assert len(TASKS) == 8
    assert sum(t.n_queries for t in TASKS.values()) == 876
    assert get_task("biology").hf_id == "R2MED/Biology"
    assert get_task("IIYi-Clinical").family is Family.CLINICAL_CASE
    with pytest.raises(KeyError, match="choose one of"):
        get_task("Chemistry")


def test_r2med_layout_keeps_order_metadata_grades_and_rewrites(tiny_r2med: Path) -> None:
    ds = load_r2med_dir(tiny_r2med)
    assert list(ds.corpus) == [d["id"] for d in TINY_CORPUS]
    assert ds.queries["q1"] == TINY_QUERIES[0]["text"]
    assert ds.query_meta["q1"] == {"answer": "fluids and insulin"}
    assert ds.qrels == {"q1": {"dka_0": 2, "dka_1": 1}, "q2": {"mi_0": 1}}
    assert ds.positives("q1") == {"dka_0": 2, "dka_1": 1}
    assert ds.rewrite_options() == [("hyde", "toy-llm")]
    assert ds.rewrites["hyde", "toy-llm"]["q2"].startswith("Myocardial")
    assert ds.report.queries_without_qrels == ("q3",)
    assert any("left out of averages" in line for line in ds.report.lines())


@pytest.mark.parametrize(
    "content",
    ["q1 0 dka_0 2\nq1 0 dka_1 1\nq2 0 mi_0 1\n", "q1\tdka_0\t2\nq1\tdka_1\t1\nq2\tmi_0\t1\n"],
    ids=["trec-4-columns", "3-columns"],
)
@pytest.mark.parametrize("filename", ["qrels.txt", "qrels.tsv"])
def test_trec_qrels_variants(tiny_r2med: Path, content: str, filename: str) -> None:
    (tiny_r2med / "qrels.jsonl").unlink()
    (tiny_r2med / filename).write_text(content, encoding="utf-8")
    assert load_r2med_dir(tiny_r2med).qrels == {"q1": {"dka_0": 2, "dka_1": 1}, "q2": {"mi_0": 1}}


def test_qrels_files_that_disagree_are_an_error_naming_both(tiny_r2med: Path) -> None:
    """Issue 29 item 12: with qrels.jsonl and qrels.txt both present, the .txt was ignored without a word,
    so which file a folder's numbers came from was a guess; files that agree are fine."""
    jsonl, txt = tiny_r2med / "qrels.jsonl", tiny_r2med / "qrels.txt"
    txt.write_text("q1 0 dka_0 2\nq2 0 mi_0 1\nq1 0 dka_1 1\n", encoding="utf-8")  # the same judgements
    assert validate_dir(tiny_r2med) == ([], load_r2med_dir(tiny_r2med).report.lines())
    assert load_r2med_dir(tiny_r2med).qrels == {"q1": {"dka_0": 2, "dka_1": 1}, "q2": {"mi_0": 1}}

    txt.write_text("q1 0 dka_0 2\nq1 0 dka_1 2\nq2 0 mi_0 1\nq2 0 gout_0 1\n", encoding="utf-8")
    errors, _ = validate_dir(tiny_r2med)
    assert [str(e) for e in errors] == [
        f"{txt}:2: disagrees with {jsonl}:2 on 2 (query, document) pair(s), first query 'q1', document "
        "'dka_1': grade 2 here, grade 1 there; keep one qrels file (qrels.jsonl is read first)"
    ]
    txt.write_text("q1 0 dka_0 2\nq1 0 dka_1 1\n", encoding="utf-8")  # a pair missing from one of them
    with pytest.raises(DataError, match=r"qrels.txt: disagrees with .*qrels.jsonl:3 .*'mi_0': absent here, grade 1"):
        load_r2med_dir(tiny_r2med)
    txt.write_text("q1 0 dka_0 2\nq1 0 dka_1 one\n", encoding="utf-8")  # the other file is checked too
    assert [str(e) for e in validate_dir(tiny_r2med)[0]] == [f"{txt}:2: relevance must be an integer, got 'one'"]


def test_both_qrels_readers_apply_one_grade_rule_and_show_a_long_bad_value_cut(tiny_r2med: Path) -> None:
    """A grade that is not an integer is named with file and line in each format's words, and a huge
    value (a pasted passage in the grade column) is shown by its first 40 characters in both."""
    long = "x" * 5000
    write_jsonl(tiny_r2med / "qrels.jsonl", [{"q_id": "q1", "p_id": "dka_0", "score": long}])
    jsonl = tiny_r2med / "qrels.jsonl"
    assert _problems(tiny_r2med) == [f"{jsonl}:1: \"score\" must be an integer grade, got {'x' * 40!r}"]
    jsonl.unlink()
    txt = tiny_r2med / "qrels.txt"
    txt.write_text(f"q1 0 dka_0 2\nq1 0 dka_1 {long}\nq2 0 mi_0 101\n", encoding="utf-8")
    assert _problems(tiny_r2med) == [
        f"{txt}:2: relevance must be an integer, got {'x' * 40!r}",
        f"{txt}:3: relevance grade 101 is outside 0-100",
    ]


def test_beir_layout_joins_title_and_text(tmp_path: Path) -> None:
    root = tmp_path / "beir"
    write_jsonl(
        root / "corpus.jsonl",
        [{"_id": "d1", "title": "Gout", "text": "Urate crystals."}, {"_id": "d2", "title": "", "text": "Asthma."}],
    )
    write_jsonl(root / "queries.jsonl", [{"_id": "1", "text": "joint crystals"}])
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\td1\t1\n", encoding="utf-8")
    ds = load_dir(root)
    assert ds.source.startswith("beir:")
    assert ds.corpus == {"d1": "Gout\nUrate crystals.", "d2": "Asthma."}
    assert ds.qrels == {"1": {"d1": 1}}


def test_qrels_are_kept_as_given_unknown_documents_duplicates_and_grade_zero(tiny_r2med: Path) -> None:
    """As the benchmark: lines naming unknown documents stay (warned), the last duplicate wins (warned)."""
    write_jsonl(
        tiny_r2med / "qrels.jsonl",
        [
            *TINY_QRELS,
            {"q_id": "q9", "p_id": "dka_0", "score": 1},
            {"q_id": "q1", "p_id": "missing_doc", "score": 1},
            {"q_id": "q1", "p_id": "missing_doc_2", "score": 1},
            {"q_id": "q1", "p_id": "dka_1", "score": 0},  # a duplicate: this later line wins
            {"q_id": "q3", "p_id": "gout_0", "score": 0},  # q3: only grade 0
        ],
    )
    ds = load_r2med_dir(tiny_r2med)
    assert ds.report.unknown_qrels_queries == 1
    assert ds.report.unknown_qrels_documents == 2
    assert ds.report.duplicate_qrels == 1
    assert "q9" not in ds.qrels
    assert ds.qrels["q1"] == {"dka_0": 2, "dka_1": 0, "missing_doc": 1, "missing_doc_2": 1}
    assert ds.qrels["q3"] == {"gout_0": 0}
    assert ds.report.queries_without_qrels == ()  # q3 is judged (grade 0 only): it is averaged
    assert ds.report.queries_without_positives == ("q3",)
    lines = ds.report.lines()
    assert any("absent from the corpus: kept" in line for line in lines)
    assert any("last line" in line and "wins" in line for line in lines)
    assert any("only grade-0 judgements: averaged" in line for line in lines)
    assert not any("left out of averages" in line for line in lines)
    _errors, warnings = validate_dir(tiny_r2med)
    assert _errors == [] and any("duplicate" in w for w in warnings)


def test_a_query_judged_only_on_unknown_documents_is_reported(tiny_r2med: Path) -> None:
    write_jsonl(tiny_r2med / "qrels.jsonl", [*TINY_QRELS, {"q_id": "q3", "p_id": "ghost", "score": 1}])
    ds = load_r2med_dir(tiny_r2med)
    assert ds.qrels["q3"] == {"ghost": 1} and ds.positives("q3") == {"ghost": 1}
    assert ds.report.queries_only_unknown_documents == ("q3",)
    assert any("judged only on documents absent from the corpus" in line for line in ds.report.lines())


def _problems(root: Path) -> list[str]:
    errors, _ = validate_dir(root)
    return [str(p) for p in errors]


def test_malformed_json_names_file_and_line(tiny_r2med: Path) -> None:
    lines = (tiny_r2med / "corpus.jsonl").read_text().splitlines()
    lines[2] = '{"id": "asthma_0", "text": "unterminated'
    (tiny_r2med / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    [problem] = _problems(tiny_r2med)
    assert problem.startswith(f"{tiny_r2med / 'corpus.jsonl'}:3: malformed JSON")


def test_missing_fields_and_duplicate_ids(tiny_r2med: Path) -> None:
    write_jsonl(tiny_r2med / "corpus.jsonl", [*TINY_CORPUS, {"id": "dka_0", "text": "again"}, {"text": "no id"}])
    write_jsonl(tiny_r2med / "query.jsonl", [{"id": "q1"}, *TINY_QUERIES[1:]])
    problems = _problems(tiny_r2med)
    assert f"{tiny_r2med / 'corpus.jsonl'}:6: duplicate id 'dka_0' (first seen on line 1)" in problems
    assert f'{tiny_r2med / "corpus.jsonl"}:7: missing field "id"' in problems
    assert f'{tiny_r2med / "query.jsonl"}:1: missing field "text"' in problems


def test_empty_file_and_non_utf8(tiny_r2med: Path) -> None:
    (tiny_r2med / "query.jsonl").write_text("")
    (tiny_r2med / "corpus.jsonl").write_bytes(b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "caf\xe9"}\n')
    problems = _problems(tiny_r2med)
    assert f"{tiny_r2med / 'query.jsonl'}: file is empty" in problems
    assert any(p.startswith(f"{tiny_r2med / 'corpus.jsonl'}:2: not UTF-8") for p in problems)


def test_bad_qrels_score_and_missing_folder(tiny_r2med: Path, tmp_path: Path) -> None:
    write_jsonl(tiny_r2med / "qrels.jsonl", [{"q_id": "q1", "p_id": "dka_0", "score": "high"}])
    assert _problems(tiny_r2med) == [f"{tiny_r2med / 'qrels.jsonl'}:1: \"score\" must be an integer grade, got 'high'"]
    with pytest.raises(DataError, match="folder not found"):
        load_dir(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"neither query\.jsonl"):
        load_dir(tmp_path / "empty")


def test_fingerprint_changes_with_any_document_text(tiny_r2med: Path) -> None:
    before = load_r2med_dir(tiny_r2med).fingerprint
    assert load_r2med_dir(tiny_r2med).fingerprint == before
    changed = [dict(d) for d in TINY_CORPUS]
    changed[4]["text"] += " Colchicine helps."
    write_jsonl(tiny_r2med / "corpus.jsonl", changed)
    assert load_r2med_dir(tiny_r2med).fingerprint != before


def fill_hf_cache(cache: Path, task: str, source: Path, commit: str | None = None) -> None:
    """Lay out a dataset repo exactly as huggingface_hub stores it: refs/main → snapshots/<commit>,
    by default at the commit the task is pinned to (as a download of the pinned revision leaves it)."""
    repo = cache / f"datasets--R2MED--{task}"
    commit = commit or get_task(task).revision
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    for path in source.rglob("*"):
        if path.is_file():
            target = snapshot / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())


def test_hub_loader_offline_from_prefilled_cache(tiny_r2med: Path, tmp_path: Path) -> None:
    """The same snapshot_download call a user makes online, served from the HF cache offline."""
    cache = tmp_path / "hf-cache"
    fill_hf_cache(cache, "Biology", tiny_r2med)
    script = (
        "import json; from r2med_core.hub import load_hf; ds = load_hf('biology'); "
        "print(json.dumps([ds.name, ds.source, len(ds.corpus), ds.rewrite_options(), ds.family.name]))"
    )
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).parent.parent,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [
        "Biology",
        "hf:R2MED/Biology",
        5,
        [["hyde", "toy-llm"]],
        "QA_REFERENCE",
    ]
    # A task that is not in the cache gives an actionable message, not a traceback.
    missing = subprocess.run(
        [sys.executable, "-m", "r2med_core", "download", "--task", "MedQA-Diag"],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).parent.parent,
        timeout=120,
    )
    assert missing.returncode == 2
    assert "could not get R2MED/MedQA-Diag" in missing.stderr and "Traceback" not in missing.stderr


def test_hub_tasks_load_their_pinned_revision_and_record_it(tiny_r2med: Path, tmp_path: Path, monkeypatch) -> None:
    """By default a task loads the commit MTEB pins for it (so its numbers do not drift with the hub);
    ``R2MED_HF_REVISION`` overrides it, and the dataset records the exact commit it read."""
    from r2med_core.hub import cached_task, load_snapshot, task_revision

    cache = tmp_path / "hf-cache"
    newer = "f" * 40
    fill_hf_cache(cache, "Biology", tiny_r2med, commit=newer)  # only a newer main is cached
    assert task_revision("Biology") == get_task("Biology").revision == "8b9fec2db9eda4b5742d03732213fbaee8169556"
    assert cached_task("Biology", cache_dir=cache) is None  # the pin is not there: not silently the newer files
    monkeypatch.setenv("R2MED_HF_REVISION", "main")
    folder = cached_task("Biology", cache_dir=cache)
    assert folder is not None and load_snapshot("Biology", folder).revision == newer
    monkeypatch.setenv("R2MED_HF_REVISION", f"PMC-Clinical={'a' * 40}, biology={newer}")
    assert task_revision("Biology") == newer and task_revision("PMC-Clinical") == "a" * 40
    assert task_revision("MedQA-Diag") == get_task("MedQA-Diag").revision
    monkeypatch.delenv("R2MED_HF_REVISION")
    fill_hf_cache(cache, "Biology", tiny_r2med)  # the pinned commit
    pinned = load_snapshot("Biology", cached_task("Biology", cache_dir=cache))
    assert pinned.revision == get_task("Biology").revision


def test_cached_task_looks_only_at_the_local_cache(tiny_r2med: Path, tmp_path: Path) -> None:
    from r2med_core.hub import cached_task

    cache = tmp_path / "hf-cache"
    assert cached_task("Biology", cache_dir=cache) is None
    fill_hf_cache(cache, "Biology", tiny_r2med)
    found = cached_task("Biology", cache_dir=cache)
    assert found is not None and (found / "corpus.jsonl").is_file()
    assert cached_task("PMC-Clinical", cache_dir=cache) is None
