"""``python -m r2med_core``: the command-line contract other tools rely on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from r2med_core import evaluate, load_demo, read_trec, run_system
from r2med_core.cli import main
from r2med_core.retrieval.rerank import rerank
from r2med_core.runs import safe_name

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


def test_eval_at_1000_retrieves_and_scores_the_top_1000(tmp_path: Path) -> None:
    done = cli("eval", "--retriever", "bm25", "--demo", "qa-reference", "--at-1000", "--output-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    scores = json.loads((tmp_path / "bm25.json").read_text())["test"]
    assert scores["recall_at_1000"] >= scores["recall_at_100"] and "ndcg_at_1000" in scores
    assert "recall_at_1000" in done.stdout and "for dense models only" in done.stdout  # bm25 is labelled
    run = read_trec(tmp_path / "bm25.trec")
    corpus = len(load_demo("qa-reference").corpus)
    assert max(len(r) for r in run.rankings.values()) == min(corpus, 1000)


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
            "no precomputed hyde:gpt4 rewrite (available: hyde:demo-writer, hyde:smollm2-135m)",
        ),
        (["eval", "--retriever", "bm25", "--task", "Biology", "--output-dir", "x"], "add --hf"),
        (["eval", "--retriever", "bm25", "--task", "Chemistry", "--output-dir", "x"], "unknown R2MED task"),
    ],
)
def test_usage_errors_are_one_clear_line(args: list[str], message: str) -> None:
    done = cli(*args, env={"R2MED_DATA_DIR": ""})
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


HEAVY_MODULES = ("scipy", "pandas", "nltk", "sklearn", "torch", "sentence_transformers", "plotly", "openai")


@pytest.mark.parametrize(
    "code",
    [
        "import r2med_core.cli",
        "import r2med_core, r2med_core.tasks, r2med_core.data",
        "import runpy, sys; sys.argv = ['r2med_core', '--help']\n"
        "try:\n    runpy.run_module('r2med_core', run_name='__main__')\nexcept SystemExit:\n    pass",
    ],
)
def test_help_and_the_command_line_start_without_heavy_libraries(code: str) -> None:
    """``--help`` or a typo answers at once: the libraries a command needs load when it runs."""
    probe = f"{code}\nimport sys\nprint('loaded:', sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "loaded: []"


def test_bm25_eval_does_not_import_torch(tmp_path: Path) -> None:
    """``eval --retriever bm25`` pays only for what BM25 needs (issue 17: whole-process speed vs bm25s).
    NLTK — and the scikit-learn, scipy and pandas its package imports — is what BM25 needs once a word
    reaches NLTK's own Porter stemmer (issue 37: no copy of it in the project; tests/test_tokenize.py
    says which words); docs/reference/speed.md gives what that import costs."""
    out = str(tmp_path / "out")
    argv = ["r2med_core", "eval", "--retriever", "bm25", "--demo", "qa-reference", "--output-dir", out]
    heavy = ("torch", "sentence_transformers", "faiss")
    code = (
        f"import runpy, sys\nsys.argv = {argv!r}\n"
        "try:\n    runpy.run_module('r2med_core', run_name='__main__')\nexcept SystemExit as stop:\n"
        "    assert not stop.code, stop.code\n"
        f"print('loaded:', sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    env = {**os.environ, "R2MED_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "bm25.json").is_file()
    assert done.stdout.strip().splitlines()[-1] == "loaded: []"


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


# --------------------------------------------------------------------------- generate, live rewrites, rerank


def _fake_llm(task: str):  # imported here so the tests above never depend on the generation tests
    from .test_generation import FakeLLM, demo_replies

    return FakeLLM(demo_replies(task))


def test_generate_writes_the_rewrite_file_and_eval_uses_live_generations(tmp_path: Path) -> None:
    from .test_generation import KEY

    with _fake_llm("qa-reference") as llm:
        args = ["generate", "--method", "hyde", "--demo", "qa-reference", "--model", "fake-model"]
        args += ["--base-url", llm.url, "--llm-name", "live", "--output", str(tmp_path / "out")]
        done = cli(*args, env={"OPENAI_API_KEY": KEY})
        assert done.returncode == 0, done.stderr
        assert "12 generated, 0 from cache" in done.stdout and "Traceback" not in done.stderr
        assert len(llm.requests) == 12 and llm.requests[0]["auth"] == f"Bearer {KEY}"
        again = cli(*args, env={"OPENAI_API_KEY": KEY})
        assert again.returncode == 0 and "0 generated, 12 from cache" in again.stdout and len(llm.requests) == 12
        limited = cli(*args[:-1], str(tmp_path / "first3.jsonl"), "--limit", "3", env={"OPENAI_API_KEY": KEY})
        assert limited.returncode == 0 and len((tmp_path / "first3.jsonl").read_text().splitlines()) == 3
    path = tmp_path / "out" / "hyde" / "live" / "query_with_hydoc.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["id"]: r["hy_doc"] for r in rows} == load_demo("qa-reference").rewrites["hyde", "demo-writer"]
    assert KEY not in done.stdout + done.stderr + path.read_text()

    live = cli(
        "eval", "--retriever", "bm25", "--rewrite", "hyde:live", "--demo", "qa-reference", "--output-dir", str(tmp_path)
    )
    assert live.returncode == 0, live.stderr
    assert "note: using live hyde:live generations from the cache (12 of 12 queries)" in live.stdout
    writer = cli(
        "eval", "--retriever", "bm25+hyde:demo-writer", "--demo", "qa-reference", "--output-dir", str(tmp_path)
    )
    assert writer.returncode == 0
    live_scores = json.loads((tmp_path / "bm25+hyde_live.json").read_text())["test"]
    assert live_scores == json.loads((tmp_path / "bm25+hyde_demo-writer.json").read_text())["test"]


def test_generate_failures_are_one_clear_line(tmp_path: Path, monkeypatch, capsys) -> None:
    from .test_generation import KEY, closed_port

    base = ["generate", "--method", "hyde", "--demo", "qa-reference", "--model", "m", "--output", str(tmp_path)]
    with _fake_llm("qa-reference") as llm:
        llm.script = [(401, {}, {"error": {"message": f"Incorrect API key {KEY}"}})]
        wrong = cli(*base, "--base-url", llm.url, env={"OPENAI_API_KEY": KEY})
    unreachable = f"http://127.0.0.1:{closed_port()}/v1"
    down = cli(*base, "--base-url", unreachable, env={"OPENAI_API_KEY": KEY})
    outcomes = [
        (wrong, 3, "rejected the API key (401 Unauthorized): check the API key"),
        (down, 3, f"error: could not reach {unreachable}"),
    ]
    # Usage errors fail before any request: checked in-process (same main(), no interpreter start-up).
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    for args, message in [
        (base, "error: no API key: set OPENAI_API_KEY"),
        ([*base, "--base-url", unreachable, "--llm-name", "a+b"], "error: LLM name 'a+b' must start with a letter"),
    ]:
        code = main(args)
        out, err = capsys.readouterr()
        outcomes.append((subprocess.CompletedProcess(args, code, out, err), 2, message))
    for done, code, message in outcomes:
        assert done.returncode == code, done.stderr
        assert message in done.stderr and "Traceback" not in done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert errors == [done.stderr.strip().splitlines()[-1]]
        assert KEY not in done.stdout + done.stderr
    assert not list(tmp_path.rglob("query_with_hydoc.jsonl"))  # nothing written for an incomplete batch


def test_eval_with_a_cross_encoder_rerank(tmp_path: Path) -> None:
    from .test_rerank import build_cross_encoder

    model = build_cross_encoder(tmp_path / "ce", num_labels=1, seed=0)
    done = cli(
        "eval",
        "--retriever",
        "bm25",
        "--demo",
        "qa-reference",
        "--top-k",
        "10",
        "--rerank",
        str(model),
        "--rerank-k",
        "2",
        "--output-dir",
        str(tmp_path / "out"),
    )
    assert done.returncode == 0, done.stderr
    name = safe_name(f"bm25>rerank:{model}@2")
    assert f"→ reranked by {model} (top 2)" in done.stdout and (tmp_path / "out" / f"{name}.trec").is_file()
    assert "not the benchmark" not in done.stdout
    reranked, plain = read_trec(tmp_path / "out" / f"{name}.trec"), run_system(load_demo("qa-reference"), "bm25", k=10)
    for qid, ranking in plain.rankings.items():
        docs = [d for d, _ in reranked.rankings[qid]]
        assert sorted(docs) == sorted(d for d, _ in ranking[:2])  # only the k reranked, as the benchmark
    tail = cli(*done.args[3:], "--rerank-keep-tail")
    assert tail.returncode == 0, tail.stderr
    assert "+ first-stage tail (not the benchmark's)" in tail.stdout
    kept = read_trec(tmp_path / "out" / f"{safe_name(f'bm25>rerank:{model}@2+tail')}.trec")
    for qid, ranking in plain.rankings.items():
        docs = [d for d, _ in kept.rankings[qid]]
        assert sorted(docs[:2]) == sorted(d for d, _ in ranking[:2]) and docs[2:] == [d for d, _ in ranking[2:]]
    in_process = rerank(plain, load_demo("qa-reference"), str(model), k=2)  # the CLI's scores, from the disk cache
    assert {q: [d for d, _ in r] for q, r in reranked.rankings.items()} == {
        q: [d for d, _ in r] for q, r in in_process.rankings.items()
    }
    assert json.loads((tmp_path / "out" / f"{name}.json").read_text())["model_name"] == name


def test_eval_with_an_unavailable_reranker_is_one_clear_line(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = ["eval", "--retriever", "bm25", "--demo", "qa-reference", "--rerank", "no-such-org/no-such-reranker"]
    assert main([*args, "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "error: could not load the reranker 'no-such-org/no-such-reranker'" in err
    assert "must be downloaded first" in err and "Traceback" not in err


def test_eval_says_how_many_queries_a_rewrite_leaves_out(tiny_r2med: Path, tmp_path: Path, capsys) -> None:
    args = ["eval", "--retriever", "bm25", "--rewrite", "hyde:toy-llm", "--data-dir", str(tiny_r2med)]
    assert main([*args, "--output-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "note: 1 of 3 queries are not in the hyde:toy-llm rewrite file: not retrieved" in out
    assert len(read_trec(next((tmp_path / "out").glob("*.trec"))).rankings) == 2


def test_generate_prompt_sets_and_query2doc_examples(tmp_path: Path, monkeypatch, capsys) -> None:
    """--prompts official (default) with --examples FILE; --prompts explorer; bad examples are usage errors."""
    from .test_generation import KEY

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    examples = tmp_path / "examples.txt"
    examples.write_text("Post: what is ATP?\nPassage: ATP is the energy currency of the cell.\n", encoding="utf-8")
    with _fake_llm("qa-reference") as llm:
        base = ["generate", "--method", "query2doc", "--demo", "qa-reference", "--model", "fake-model"]
        base += ["--base-url", llm.url, "--limit", "1", "--output", str(tmp_path / "out")]
        assert main([*base, "--examples", str(examples)]) == 0
        out = capsys.readouterr().out
        assert "prompts: the benchmark's prompts of Medical-Sciences (not an R2MED task" in out
        assert "few-shot examples from your file" in out and "sampling: temperature=0.7, seed=42" in out
        user = llm.requests[-1]["body"]["messages"][1]["content"]
        assert "###Examples:###\nPost: what is ATP?\nPassage: ATP is the energy currency of the cell." in user
        assert main(base) == 0
        assert "zero-shot (no examples file)" in capsys.readouterr().out
        assert "###Examples:###" not in llm.requests[-1]["body"]["messages"][1]["content"]
        assert main([*base, "--prompts", "explorer"]) == 0
        assert "R2MED Explorer's own prompts (not the benchmark's)" in capsys.readouterr().out
        assert llm.requests[-1]["body"]["messages"][0]["content"].startswith("You are a careful medical expert")
        assert len(llm.requests) == 3
        assert main([*base, "--prompts", "explorer", "--examples", str(examples)]) == 2
        assert main([*base, "--examples", str(tmp_path / "none.txt")]) == 2
        (tmp_path / "bad.json").write_text('{"Chemistry": "x"}', encoding="utf-8")
        assert main([*base, "--examples", str(tmp_path / "bad.json")]) == 2
        err = capsys.readouterr().err
        assert "goes with the official prompts" in err and "examples file not found" in err
        assert "unknown task 'Chemistry'" in err and "Traceback" not in err
        assert len(llm.requests) == 3


def test_app_hands_every_further_argument_to_streamlit_run_on_the_router() -> None:
    """``app`` becomes ``python -m streamlit run <r2med_app/streamlit_app.py> …`` in the same process (so
    Ctrl-C and the exit status are Streamlit's), without importing Streamlit or the app itself."""
    code = (
        "import os, sys\n"
        "def execv(path, argv):\n"
        "    loaded = sorted(m for m in ('streamlit', 'r2med_app') if m in sys.modules)\n"
        "    print(repr([path, argv, loaded]))\n"
        "    sys.exit(0)\n"
        "os.execv = execv\n"
        "from r2med_core.cli import main\n"
        "main(['app', '--server.port', '8600', '--server.headless', 'true', 'x', '--', '-y'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    router = str(ROOT / "r2med_app" / "streamlit_app.py")
    streamlit_args = ["--server.port", "8600", "--server.headless", "true", "x", "--", "-y"]
    expected = [sys.executable, [sys.executable, "-m", "streamlit", "run", router, *streamlit_args], []]
    assert done.stdout.strip() == repr(expected)


def test_app_without_the_app_package_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "r2med_app", None)  # as when only the library is on the path
    monkeypatch.setattr(os, "execv", lambda *args: pytest.fail(f"started {args}"))
    assert main(["app", "--server.port", "8600"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the app is not installed") and "Traceback" not in err


def test_app_help_says_where_its_arguments_go(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["app", "--help"])
    assert stop.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "app [-h] [STREAMLIT OPTION ...]" in out and "goes to `streamlit run` unchanged" in out


def test_other_commands_still_reject_what_they_do_not_know(capsys) -> None:
    """Only ``app`` takes arguments it does not parse; anywhere else an unknown one is argparse's usage error."""
    with pytest.raises(SystemExit) as stop:
        main(["validate", "--data-dir", "x", "--server.port", "8600"])
    assert stop.value.code == 2
    assert "error: unrecognized arguments: --server.port 8600" in capsys.readouterr().err
