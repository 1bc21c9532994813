"""TREC run files round-trip, and bad run files are reported by file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from r2med_core.data import DataError
from r2med_core.retrieval.fusion import reciprocal_rank_fusion
from r2med_core.runs import Run, read_trec, safe_name, write_trec


def test_trec_round_trip(tmp_path: Path) -> None:
    run = Run("bm25+hyde:gpt4", {"q1": [("a", 3.5), ("b", 1.25)], "q2": [("c", 0.5)]})
    path = write_trec(run, tmp_path / "run.trec")
    assert path.read_text().splitlines()[0] == "q1 Q0 a 1 3.500000 bm25+hyde_gpt4"
    back = read_trec(path)
    assert back.rankings == run.rankings
    assert back.rank_of("q1", "b") == 2 and back.rank_of("q1", "zzz") is None


def test_read_trec_orders_by_score_then_rank(tmp_path: Path) -> None:
    path = tmp_path / "x.trec"
    path.write_text("q Q0 low 1 1.0 t\nq Q0 high 2 9.0 t\nq Q0 tie_b 4 5.0 t\nq Q0 tie_a 3 5.0 t\n")
    assert [d for d, _ in read_trec(path).top("q")] == ["high", "tie_a", "tie_b", "low"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("q Q0 a 1 1.0 t\nq Q0 b 2\n", ":2: expected 6 columns"),
        ("q Q0 a one 1.0 t\n", ":1: rank must be an integer"),
        ("q Q0 a 1 1.0 t\nq Q0 a 2 0.5 t\n", ":2: document 'a' listed twice"),
        ("", ": file is empty"),
    ],
)
def test_bad_run_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.trec"
    path.write_text(content)
    with pytest.raises(DataError) as err:
        read_trec(path)
    assert message in str(err.value.problems[0])
    assert str(path) in str(err.value.problems[0])


def test_safe_name() -> None:
    assert safe_name("rrf(bm25,dense:/models/x y)") == "rrf_bm25,dense_models_x_y"
    assert " " not in safe_name("a b") and "/" not in safe_name("a/b")


def test_reciprocal_rank_fusion() -> None:
    a = Run("a", {"q": [("x", 9.0), ("y", 8.0), ("z", 7.0)]})
    b = Run("b", {"q": [("y", 0.9), ("w", 0.8)]})
    fused = reciprocal_rank_fusion([a, b], "rrf", k=60)
    assert [d for d, _ in fused.top("q")] == ["y", "x", "w", "z"]
    assert fused.top("q")[0][1] == pytest.approx(1 / 62 + 1 / 61)
    with pytest.raises(ValueError, match="at least two"):
        reciprocal_rank_fusion([a], "rrf")
