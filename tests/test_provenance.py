"""Every number can be traced to its data, models, rewrites, code and machine."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from r2med_core import load_demo
from r2med_core.reporting.provenance import (
    Provenance,
    ProvenanceError,
    collect,
    differences,
    read_provenance,
    run_provenance,
    sidecar_path,
)
from r2med_core.settings import load_settings, parse_prices

from .test_cli import cli


def test_a_run_records_dataset_models_rewrites_code_and_machine() -> None:
    demo = load_demo("qa-reference")
    record = run_provenance(demo, "rrf(bm25+hyde:demo-writer,minilm)", wall_seconds=1.5)
    assert record.dataset["name"] == "qa-reference" and record.dataset["source"] == "demo:qa-reference"
    assert record.dataset["fingerprint"].startswith(demo.fingerprint)
    assert [m["id"] for m in record.models] and all(m["revision"] for m in record.models)  # MiniLM, local folder
    assert record.rewrites[0]["rewrite"] == "hyde:demo-writer" and len(record.rewrites[0]["fingerprint"]) == 16
    assert {"numpy", "pytrec-eval-terrier", "bm25s"} <= set(record.packages)
    assert record.project["version"] and record.hardware["device"] == "cpu" and record.wall_seconds == 1.5
    assert Provenance.from_json(json.loads(json.dumps(record.to_json()))) == record  # round-trips through JSON


def test_differences_name_what_makes_numbers_incomparable() -> None:
    demo = load_demo("clinical-evidence")
    here = collect(demo, "bm25", models=[], rewrites=[])
    assert differences(here, replace(here, created="later", wall_seconds=99.0)) == []  # time is not a difference
    other = replace(
        here,
        dataset={**here.dataset, "revision": "b" * 40, "fingerprint": "x"},
        packages={**here.packages, "numpy": "0.0.1"},
        hardware={**here.hardware, "device": "cuda:0"},
    )
    found = " | ".join(differences(replace(here, dataset={**here.dataset, "revision": "a" * 40}), other))
    assert "dataset revision differs" in found and "dataset content differs" in found
    assert "numpy" in found and "0.0.1" in found and "cuda:0" in found
    model_a = replace(here, models=({"id": "m", "revision": "r1"},))
    model_b = replace(here, models=({"id": "m", "revision": "r2"},))
    assert differences(model_a, model_b) == ["model m at revision r1 vs r2"]


def test_eval_writes_a_provenance_record_next_to_the_official_results(tmp_path: Path) -> None:
    done = cli("eval", "--retriever", "bm25", "--demo", "clinical-evidence", "--output-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    results = tmp_path / "bm25.json"
    assert set(json.loads(results.read_text())) == {"dataset_name", "model_name", "evaluation_time", "test"}
    record = read_provenance(sidecar_path(results))
    assert record.system == "bm25" and record.dataset["name"] == "clinical-evidence"
    assert record.wall_seconds is not None and record.packages["pytrec-eval-terrier"]
    assert "provenance" in done.stdout


def test_a_malformed_record_is_refused_with_the_file_name(tmp_path: Path) -> None:
    bad = tmp_path / "x.provenance.json"
    bad.write_text("{not json")
    with pytest.raises(ProvenanceError, match=r"x\.provenance\.json"):
        read_provenance(bad)
    bad.write_text(json.dumps({"system": "bm25", "tokens": {"prompt": "many"}}))
    with pytest.raises(ProvenanceError, match="malformed"):
        read_provenance(bad)
    # issue 36: a lone surrogate was read, then compare-results failed mid-table ("unexpected UnicodeEncodeError")
    bad.write_text('{"system": "bm25\\ud800"}')
    with pytest.raises(ProvenanceError, match=r"x\.provenance\.json: .*not valid Unicode"):
        read_provenance(bad)


def test_compare_results_flags_a_file_from_a_machine_whose_provenance_differs(tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    for out in (here, there):
        done = cli("eval", "--retriever", "bm25", "--demo", "qa-reference", "--output-dir", str(out))
        assert done.returncode == 0, done.stderr
    same = cli("compare-results", str(here / "bm25.json"), str(there / "bm25.json"))
    assert same.returncode == 0 and "warning" not in same.stdout and "ndcg_at_10" in same.stdout
    side = sidecar_path(there / "bm25.json")
    record = json.loads(side.read_text())
    record["packages"]["pytrec-eval-terrier"] = "0.0.1"
    record["hardware"]["device"] = "cuda:0"
    side.write_text(json.dumps(record))
    flagged = cli("compare-results", str(here / "bm25.json"), str(there / "bm25.json"))
    assert flagged.returncode == 0
    assert "not directly comparable" in flagged.stdout and "pytrec-eval-terrier" in flagged.stdout
    assert "cuda:0" in flagged.stdout
    side.unlink()
    unknown = cli("compare-results", str(here / "bm25.json"), str(there / "bm25.json"))
    assert "has no provenance record" in unknown.stdout
    (tmp_path / "bad.json").write_text('{"dataset_name": "x"}')
    bad = cli("compare-results", str(tmp_path / "bad.json"))
    assert bad.returncode == 1 and "bad.json: not a results file" in bad.stderr and "Traceback" not in bad.stderr


# --------------------------------------------------------------------------- what API LLMs cost


def test_cost_shows_tokens_and_money_only_at_a_configured_price() -> None:
    demo = load_demo("qa-reference")
    uses = [
        {"model": "gpt-4o", "use": "listwise rerank", "prompt": 1_200_000, "completion": 30_000},
        {"model": "llama-8b", "use": "hyde rewriting (live)", "prompt": 800_000, "completion": 70_000},
    ]
    record = collect(demo, "bm25", llm_usage=uses)
    assert record.tokens == {"prompt": 2_000_000, "completion": 100_000} and record.uses_api
    assert record.cost() == "2,000,000 prompt tokens, 100,000 completion tokens"  # no price: tokens only
    one_priced = parse_prices("gpt-4o=2.5/10 USD")
    assert record.cost(one_priced) == record.cost()  # a model without a price: no money guessed
    both = parse_prices("gpt-4o=2.5/10 USD, llama-8b=0.2/0.2 USD")
    # 1.2 × 2.5 + 0.03 × 10 + 0.8 × 0.2 + 0.07 × 0.2 = 3.474
    assert record.cost(both) == (
        "2,000,000 prompt tokens, 100,000 completion tokens (≈ 3.474 USD at the configured price per 1M tokens)"
    )
    assert record.cost(parse_prices("gpt-4o=2.5/10 USD, llama-8b=0.2/0.2 EUR")) == record.cost()  # no mixing
    rows = dict(record.summary_rows(both))
    assert rows["LLM use"].startswith("hyde rewriting (live) · llama-8b: 800,000 prompt")
    assert Provenance.from_json(json.loads(json.dumps(record.to_json()))) == record
    silent = collect(demo, "bm25", llm_usage=[{"model": "m", "use": "listwise rerank", "prompt": 0, "completion": 0}])
    assert silent.cost() == "API calls (the server reported no token usage)"


@pytest.mark.parametrize("text", ["gpt-4o=2.5", "gpt-4o=a/b", "=1/2", "gpt-4o=-1/2", "gpt-4o=1/2 USD extra"])
def test_a_price_that_cannot_be_read_names_the_setting(text: str) -> None:
    with pytest.raises(ValueError, match="R2MED_LLM_PRICES: cannot read"):
        load_settings({"R2MED_LLM_PRICES": text})


def test_a_run_on_live_rewrites_and_an_llm_rerank_reports_what_both_cost() -> None:
    from r2med_core.llm.client import Endpoint
    from r2med_core.llm.generation import attach_live_rewrites, generate_rewrites
    from r2med_core.llm.llm_rerank import listwise_rerank
    from r2med_core.systems import run_system

    from .test_generation import KEY, FakeLLM, demo_replies

    demo = load_demo("qa-reference")
    with FakeLLM(demo_replies("qa-reference")) as llm:
        made = generate_rewrites(demo, "hyde", Endpoint(llm.url, "writer-model", api_key=KEY), llm_name="live")
        dataset, _ = attach_live_rewrites(demo, [("hyde", "live")])
        run = run_system(dataset, "bm25+hyde:live")
        assert run.usage == ()  # retrieval itself spends no tokens; the rewrite's cost comes with the record
        llm.responder = lambda messages: "```json\n[2, 1]\n```"
        reranked = listwise_rerank(run, dataset, Endpoint(llm.url, "ranker-model", api_key=KEY), k=3)
    record = run_provenance(dataset, "bm25+hyde:live", usage=reranked.usage)
    by_use = {u["use"]: u for u in record.llm_usage}
    assert set(by_use) == {"listwise rerank", "hyde rewriting (live)"}
    assert by_use["hyde rewriting (live)"]["model"] == "writer-model"
    assert (by_use["hyde rewriting (live)"]["prompt"], by_use["hyde rewriting (live)"]["completion"]) == (
        made.spent.prompt_tokens,
        made.spent.completion_tokens,
    )
    assert record.tokens == {
        "prompt": sum(u["prompt"] for u in record.llm_usage),
        "completion": sum(u["completion"] for u in record.llm_usage),
    }
    again = run_provenance(dataset, "bm25+hyde:live")  # all from the cache now: it still cost what it cost
    assert again.llm_usage == (by_use["hyde rewriting (live)"],)
    precomputed = run_provenance(demo, "bm25+hyde:demo-writer")  # a rewrite file: its cost is unknown
    assert precomputed.llm_usage == () and precomputed.tokens is None


def test_the_machine_is_named_without_starting_a_process() -> None:
    """A run's provenance names the CPU without forking (``platform.processor()`` runs ``uname -p``: a
    copy of a process that may hold a whole corpus, on every run), in a fresh interpreter so no cached
    answer hides a fork."""
    import subprocess
    import sys

    code = (
        "import os, subprocess\n"
        "def refuse(*a, **k):\n"
        "    raise AssertionError('a process was started')\n"
        "subprocess.Popen = os.fork = refuse\n"
        "from r2med_core.reporting.provenance import hardware_info\n"
        "print(hardware_info('cpu')['cpu'])\n"
    )
    root = Path(__file__).parent.parent
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() and done.stdout.strip() != "unknown"
