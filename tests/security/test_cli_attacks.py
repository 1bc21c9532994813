"""Issue 9 item 7: input that used to crash the command line with a traceback now gives
``error: …`` and exit 1 (bad data) or 2 (bad usage). Every test runs a real ``python -m r2med_core``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from r2med_core.systems import SpecError, parse_system

from ..conftest import TINY_CORPUS, TINY_QRELS, TINY_QUERIES, write_jsonl
from ..test_cli import cli


def eval_bm25(data_dir: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return cli("eval", "--retriever", "bm25", "--data-dir", str(data_dir), "--output-dir", str(out))


def assert_clean_error(done: subprocess.CompletedProcess[str], code: int, *expected: str) -> None:
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: ") or "\nerror: " in done.stderr or ": error: " in done.stderr
    for text in expected:
        assert text in done.stderr, done.stderr


@pytest.mark.parametrize("model", ["dense:r2med-tests/no-such-model", "dense:/etc"])
def test_a_dense_model_that_cannot_be_had_is_one_error_line(model: str, tmp_path: Path):
    done = cli(
        "eval", "--retriever", model, "--demo", "clinical-case", "--output-dir", str(tmp_path),
        env={"HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    name = model.removeprefix("dense:")
    assert_clean_error(done, 2, f"error: {name} ")
    assert len([line for line in done.stderr.splitlines() if line.startswith("error:")]) == 1


def test_hostile_data_files_are_reported_with_file_and_line(tmp_path: Path) -> None:
    """Deep nesting, an integer of 5000 digits and a lone surrogate, each on its own line of its own file."""
    root = tmp_path / "hostile"
    write_jsonl(root / "corpus.jsonl", TINY_CORPUS)
    write_jsonl(root / "query.jsonl", TINY_QUERIES)
    write_jsonl(root / "qrels.jsonl", TINY_QRELS)
    with (root / "corpus.jsonl").open("a") as handle:
        handle.write('{"id": "bad", "text": "lone \\ud800 surrogate"}\n')
    with (root / "query.jsonl").open("a") as handle:
        handle.write('{"id": "deep", "text": "x", "meta": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with (root / "qrels.jsonl").open("a") as handle:
        handle.write('{"q_id": "q1", "p_id": "gout_0", "score": ' + "9" * 5000 + "}\n")

    checked = cli("validate", "--data-dir", str(root))
    assert_clean_error(
        checked,
        1,
        f"{root / 'corpus.jsonl'}:6: invalid text: a lone surrogate",
        f"{root / 'query.jsonl'}:4: malformed JSON: nested too deeply",
        f"{root / 'qrels.jsonl'}:4: malformed JSON: Exceeds the limit (4300 digits)",
    )
    evaluated = eval_bm25(root, tmp_path / "o")
    assert_clean_error(evaluated, 1, f"{root / 'corpus.jsonl'}:6:")


def test_deeply_nested_metadata_is_a_data_error(tiny_r2med: Path, tmp_path: Path) -> None:
    (tiny_r2med / "metadata.json").write_text("{\n" + '"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    done = eval_bm25(tiny_r2med, tmp_path / "o")
    assert_clean_error(done, 1, f"{tiny_r2med / 'metadata.json'}: bad metadata: malformed JSON: nested too deeply")


def test_a_deeply_nested_rrf_is_refused(tmp_path: Path) -> None:
    nested = "rrf(" * 5000 + "bm25,bm25s" + ")" * 5000
    with pytest.raises(SpecError, match="nest"):
        parse_system(nested)
    assert str(parse_system("rrf(rrf(bm25,bm25s),bm25-okapi)")) == "rrf(rrf(bm25,bm25s),bm25-okapi)"
    done = cli("eval", "--retriever", nested, "--demo", "clinical-case", "--output-dir", str(tmp_path))
    assert_clean_error(done, 2, "error: rrf(...) may nest at most")


@pytest.mark.parametrize("k", ["0", "-5"])
def test_top_k_must_be_positive(k: str, tmp_path: Path) -> None:
    done = cli(
        "eval",
        "--retriever",
        "minilm",
        "--demo",
        "clinical-case",
        "--top-k",
        k,
        "--output-dir",
        str(tmp_path),
    )
    assert_clean_error(done, 2, "argument --top-k: must be at least 1")
    assert not list(tmp_path.iterdir())
