"""The demo's two HyDE sets, told apart: ``demo-writer`` is written by hand (an illustration), and
``smollm2-135m`` is what a real model (SmolLM2-135M-Instruct on llama.cpp's server) wrote through the
product's own ``generate`` path, shipped with its raw replies and provenance. Every place a rewrite is
named says which is which, and views start from the real model's set."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from r2med_core import load_demo
from r2med_core.analysis.fidelity import fidelity
from r2med_core.data import DEMO_TASKS, HAND_WRITTEN, PROVENANCE_FILE, demo_path, load_r2med_dir
from r2med_core.llm.provenance import REPLIES_FILE
from r2med_core.systems import default_rewrite, rewrite_origin, rewrite_words, system_words

HAND = ("hyde", "demo-writer")
MODEL = ("hyde", "smollm2-135m")


@pytest.mark.parametrize("task", DEMO_TASKS)
def test_each_demo_task_ships_a_hand_written_set_and_a_real_models_set(task: str) -> None:
    dataset = load_demo(task)
    assert dataset.rewrite_options() == [HAND, MODEL]
    assert dataset.hand_written(HAND) and not dataset.hand_written(MODEL)
    assert set(dataset.rewrites[MODEL]) == set(dataset.queries)  # all 12 generated
    made = dataset.rewrite_provenance[MODEL]
    assert made["made_by"] == "llm" and made["model_file"]["name"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert re.fullmatch(r"[0-9a-f]{64}", made["model_file"]["sha256"])
    assert made["sampling"]["temperature"] == 0.0 and made["sampling"]["seed"] == 42
    assert made["prompt_set"] == "official" and "llama-cpp-python 0.3.36" in made["server"]
    # The raw replies, with the exact messages sent, are kept beside the rewrite file.
    rows = [json.loads(line) for line in (demo_path(task) / "hyde" / "smollm2-135m" / REPLIES_FILE).open()]
    assert [r["id"] for r in rows] == list(dataset.queries)
    for row in rows:
        assert row["reply"] == dataset.rewrites[MODEL][row["id"]]
        assert dataset.queries[row["id"]] in row["messages"][-1]["content"]
        assert row["usage"]["completion"] > 0


def test_views_start_from_the_real_models_rewrite() -> None:
    for task in DEMO_TASKS:
        assert default_rewrite(load_demo(task)) == "hyde:smollm2-135m"
    dataset = load_demo("clinical-case")
    only_hand = replace(dataset, rewrites={HAND: dataset.rewrites[HAND]})
    assert default_rewrite(only_hand) == "hyde:demo-writer"  # the only HyDE there is
    assert default_rewrite(replace(dataset, rewrites={})) == ""


def test_a_hand_written_rewrite_is_named_so_and_is_never_the_benchmarks_setting() -> None:
    dataset = load_demo("clinical-case")
    assert rewrite_words("hyde:demo-writer", dataset) == f"HyDE (demo-writer: {HAND_WRITTEN})"
    assert rewrite_words("hyde:smollm2-135m", dataset) == "HyDE (smollm2-135m)"
    assert system_words("bm25+hyde:demo-writer", dataset).endswith(f"· rewrite {HAND_WRITTEN}")
    assert HAND_WRITTEN not in system_words("rrf(bm25,minilm)+hyde:smollm2-135m", dataset)
    assert HAND_WRITTEN in system_words("rrf(bm25+hyde:demo-writer,minilm)", dataset)  # a fused member too
    assert rewrite_origin(dataset, HAND).startswith(HAND_WRITTEN)
    assert rewrite_origin(dataset, MODEL) == "written by SmolLM2-135M-Instruct.Q4_1.gguf (temperature 0.0, seed 42)"
    told = fidelity("bm25+hyde:demo-writer", dataset_name=dataset.name, provenance=dataset.rewrite_provenance)
    assert not told.is_benchmark
    assert told.differences == ("the hyde rewrite (demo-writer) was written by hand, not by an LLM",)
    # The real model's set is judged by what it records: temperature 0 and a 768-token cut, a same-family prompt;
    # it was precomputed by that model (provenance made_by: llm), not generated live here, and says so.
    real = fidelity("bm25+hyde:smollm2-135m", dataset_name=dataset.name, provenance=dataset.rewrite_provenance)
    assert real.differences == (
        "rewrites precomputed by SmolLM2-135M-Instruct with the official prompts of a same-family task (not an R2MED "
        "task)",
        "rewrites precomputed by SmolLM2-135M-Instruct sampled with temperature 0.0, seed 42, not the benchmark's "
        "sampling",
        "rewrites precomputed by SmolLM2-135M-Instruct cut at 768 tokens, not the benchmark's 10240",
    )


def test_run_provenance_records_what_made_each_rewrite() -> None:
    from r2med_core.reporting.provenance import run_provenance

    dataset = load_demo("clinical-case")
    record = run_provenance(dataset, "rrf(bm25+hyde:demo-writer,bm25+hyde:smollm2-135m)")
    assert [(r["rewrite"], r["made_by"]) for r in record.rewrites] == [
        ("hyde:demo-writer", "hand"),
        ("hyde:smollm2-135m", "llm"),
    ]
    rows = [value for what, value in record.summary_rows() if what == "rewrite"]
    assert rows[0].endswith(f"· {HAND_WRITTEN}") and rows[1].endswith("· made by an LLM")


def test_a_broken_provenance_file_is_a_warning_not_a_refusal(tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "task"
    shutil.copytree(demo_path("clinical-case"), folder)
    (folder / "hyde" / "demo-writer" / PROVENANCE_FILE).write_text("{not json", encoding="utf-8")
    dataset = load_r2med_dir(folder)
    assert HAND not in dataset.rewrite_provenance and not dataset.hand_written(HAND)
    assert any("unreadable provenance" in w and "demo-writer" in w for w in dataset.report.warnings)
    assert rewrite_origin(dataset, HAND) == "precomputed (its origin is not recorded)"


def test_generate_records_the_model_file_its_digest_the_sampling_and_each_raw_reply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import hashlib

    from r2med_core.cli import main

    from .test_generation import KEY, FakeLLM, demo_replies

    monkeypatch.setenv("R2MED_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    weights = tmp_path / "tiny.gguf"
    weights.write_bytes(b"GGUF weights")
    base = ["generate", "--method", "hyde", "--demo", "clinical-case", "--model", "tiny", "--llm-name", "tiny"]
    base += ["--output", str(tmp_path / "out"), "--limit", "2", "--temperature", "0", "--seed", "7"]
    with FakeLLM(demo_replies("clinical-case")) as llm:
        code = main([*base, "--base-url", llm.url, "--model-file", str(weights), "--note", "server=fake 1.0"])
        assert code == 0, capsys.readouterr().err
        assert llm.requests[0]["body"]["seed"] == 7 and llm.requests[0]["body"]["temperature"] == 0
        assert main([*base, "--base-url", llm.url, "--note", "no-equals-sign"]) == 2
        assert "error: --note 'no-equals-sign' must be KEY=VALUE" in capsys.readouterr().err
        assert main([*base, "--base-url", llm.url, "--model-file", str(tmp_path / "absent.gguf")]) == 2
        assert "absent.gguf: model file not found" in capsys.readouterr().err
    folder = tmp_path / "out" / "hyde" / "tiny"
    made = json.loads((folder / PROVENANCE_FILE).read_text())
    assert made["made_by"] == "llm" and made["model"] == "tiny" and made["server"] == "fake 1.0"
    assert made["model_file"] == {
        "name": "tiny.gguf",
        "bytes": 12,
        "sha256": hashlib.sha256(b"GGUF weights").hexdigest(),
    }
    assert made["sampling"] == {"temperature": 0.0, "seed": 7, "max_tokens": 10240} and made["queries"] == 2
    rows = [json.loads(line) for line in (folder / REPLIES_FILE).open()]
    texts = {json.loads(line)["id"]: json.loads(line)["hy_doc"] for line in (folder / "query_with_hydoc.jsonl").open()}
    assert [r["id"] for r in rows] == ["0", "1"] and all(r["reply"] == texts[r["id"]] for r in rows)
    assert rows[0]["messages"] == llm.requests[0]["body"]["messages"]
    assert KEY not in (folder / PROVENANCE_FILE).read_text() + (folder / REPLIES_FILE).read_text()
    # The folder loads as a rewrite set made by an LLM.
    loaded = load_r2med_dir(_with_set(tmp_path, folder))
    assert loaded.rewrite_provenance["hyde", "tiny"] == made and not loaded.hand_written(("hyde", "tiny"))


def _with_set(tmp_path: Path, folder: Path) -> Path:
    import shutil

    task = tmp_path / "task"
    shutil.copytree(demo_path("clinical-case"), task)
    shutil.copytree(folder, task / "hyde" / "tiny")
    return task


# --------------------------------------------------------------------------- every surface names it


def test_the_sidebar_starts_on_the_real_models_set_and_names_the_hand_written_one() -> None:
    from tests.test_app import open_app

    at = open_app("explorer", task="clinical-case", systems=["bm25"], system="bm25", q="11")
    at.toggle(key="w_rewrite_on").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    picker = at.selectbox(key="w_rewrite")
    assert picker.value == "hyde:smollm2-135m" and at.session_state["view"].rewrite == "hyde:smollm2-135m"
    assert picker.options == [f"HyDE (demo-writer: {HAND_WRITTEN})", "HyDE (smollm2-135m)"]
    assert "A set marked 'written by hand' is an illustration" in (at.toggle(key="w_rewrite_on").help or "")
    heading = [m.value.replace("\\", "") for m in at.markdown if m.value.startswith("**Hypothetical document**")]
    assert heading and "written by SmolLM2-135M-Instruct.Q4_1.gguf (temperature 0.0, seed 42)" in heading[0]
    picker.set_value("hyde:demo-writer").run()
    heading = [m.value.replace("\\", "") for m in at.markdown if m.value.startswith("**Hypothetical document**")]
    assert heading and HAND_WRITTEN in heading[0] and "not the benchmark" in heading[0]


def test_compare_leaderboard_and_rewriting_name_the_hand_written_set() -> None:
    from tests.test_app import open_app, your_runs

    at = open_app("leaderboard", task="clinical-case", systems=["bm25"], rewrite="hyde:demo-writer")
    local = your_runs(at)
    row = next(label for label in local.index if "demo-writer" in label)
    assert row.endswith(f"· rewrite {HAND_WRITTEN}")
    assert local.loc[row, "setting"] == (
        "≠ benchmark: the hyde rewrite (demo-writer) was written by hand, not by an LLM"
    )
    at.switch_page("views/pages/compare.py").run()
    assert not at.exception, [e.value for e in at.exception]
    options = at.multiselect(key="w_compare").options
    assert f"BM25 (R2MED official) + hyde (demo-writer) · rewrite {HAND_WRITTEN}" in options
    at.switch_page("views/pages/rewriting.py").run()
    assert not at.exception, [e.value for e in at.exception]
    rewrite = at.selectbox(key="w_rw_rewrite")
    assert rewrite.value == "hyde:demo-writer" and f"HyDE (demo-writer: {HAND_WRITTEN})" in rewrite.options
    assert any(c.value.replace("\\", "").startswith("HyDE (demo-writer): written by hand") for c in at.caption)
    assert not any("available LLMs" in s.value for s in at.subheader)


def test_the_landing_line_on_clinical_evidence_counts_its_one_failure_in_words() -> None:
    from r2med_core import evaluate, run_system
    from r2med_core.analysis.diagnosis import diagnose, oracle_run
    from r2med_core.analysis.verdicts import rewrite_summary

    dataset = load_demo("clinical-evidence")
    run, rewritten = run_system(dataset, "bm25"), run_system(dataset, "bm25+hyde:smollm2-135m")
    found = diagnose(dataset, run, oracle_run(dataset))
    told = rewrite_summary(
        dataset, found, evaluate(run, dataset.qrels), evaluate(rewritten, dataset.qrels), rewritten, MODEL,
        "HyDE (smollm2-135m)",
    )  # fmt: skip
    assert told == (
        "HyDE (smollm2-135m) takes nDCG@10 from 0.212 to 0.226: 7 questions helped, 5 hurt, 0 unchanged. "
        "It rescues the one failed question. "
        "It loses 4 of the 11 questions found without it (no relevant document left in the top 10)."
    )


def test_the_cli_names_a_hand_written_rewrite_and_its_provenance_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from r2med_core.cli import main

    monkeypatch.setenv("R2MED_CACHE_DIR", str(tmp_path / "cache"))
    base = ["eval", "--demo", "clinical-case", "--output-dir", str(tmp_path)]
    assert main([*base, "--retriever", "bm25", "--rewrite", "hyde:demo-writer"]) == 0
    out = capsys.readouterr().out
    assert f"clinical-case · BM25 (R2MED official) + hyde (demo-writer) · rewrite {HAND_WRITTEN} · 12 queries" in out
    record = json.loads((tmp_path / "bm25+hyde_demo-writer.provenance.json").read_text())
    assert [r["made_by"] for r in record["rewrites"]] == ["hand"]
    assert main([*base, "--retriever", "bm25+hyde:smollm2-135m"]) == 0
    assert HAND_WRITTEN not in capsys.readouterr().out


def test_the_saved_report_names_the_hand_written_rewrite_and_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_app import open_app
    from tests.test_saved_report import _record_reports

    made = _record_reports(monkeypatch)
    at = open_app("compare", task="clinical-case", systems=["bm25"], rewrite="hyde:demo-writer")
    assert not at.exception, [e.value for e in at.exception]
    assert made, "the page built no report"
    hand = next(s for s in made[-1].systems if s.name == "bm25+hyde:demo-writer")
    assert hand.label.endswith(f"· rewrite {HAND_WRITTEN}")
    assert hand.note == "≠ benchmark: the hyde rewrite (demo-writer) was written by hand, not by an LLM"
    html = made[-1].html()
    assert f"rewrite {HAND_WRITTEN}" in html and "the hyde rewrite (demo-writer) was written by hand" in html


def test_the_local_servers_model_has_one_name_and_a_new_generation_is_not_hidden_by_the_shipped_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One canonical name for SmolLM2-135M: the local server serves it as ``smollm2-135m``, the name of
    the shipped set it wrote; a new live generation of it is saved as ``smollm2-135m-live`` by default,
    since the shipped file of the same name would win over it (a name typed by hand is kept)."""
    from r2med_core.llm import local_server
    from r2med_core.llm.client import Endpoint
    from r2med_core.llm.generation import attach_live_rewrites, generate_rewrites, new_set_name

    from .test_generation import FakeLLM

    monkeypatch.setenv("R2MED_CACHE_DIR", str(tmp_path))
    dataset = load_demo("clinical-case")
    assert local_server.model_alias() == dataset.rewrite_provenance[MODEL]["llm_name"] == "smollm2-135m"
    with FakeLLM() as server:
        live = Endpoint(server.url, local_server.model_alias(), api_key="k", temperature=0.0, max_tokens=64)
        assert live.default_llm_name() == "smollm2-135m"
        assert new_set_name(dataset, "hyde", live) == "smollm2-135m-live"
        assert new_set_name(dataset, "query2doc", live) == "smollm2-135m"  # no shipped query2doc set
        one = next(iter(dataset.queries))
        report = generate_rewrites(dataset, "hyde", live, query_ids=[one])
        assert report.complete and report.label == "hyde · smollm2-135m-live"
    found, notes = attach_live_rewrites(dataset, [("hyde", "smollm2-135m-live")])
    assert found.rewrites[("hyde", "smollm2-135m-live")] == report.results and notes
    assert found.rewrites[MODEL] == dataset.rewrites[MODEL]  # the shipped set is untouched
