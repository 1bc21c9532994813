"""The embedded demo: well-formed, shipped inside the package, and hard in the way R2MED is hard."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from r2med_core import DEMO_TASKS, evaluate, load_demo, run_system
from r2med_core.data import demo_path, validate_dir

ROOT = Path(__file__).resolve().parent.parent
NOTICE = "Illustrative demo data written for R2MED Explorer. Not R2MED data, not medical advice."


@pytest.mark.parametrize("task", DEMO_TASKS)
def test_demo_task_is_clean(task: str) -> None:
    errors, warnings = validate_dir(demo_path(task))
    assert errors == [] and warnings == []
    ds = load_demo(task)
    assert ds.family is not None and ds.is_demo
    assert len(ds.queries) >= 10
    assert ds.report.unknown_qrels_documents == 0 and ds.report.unknown_qrels_queries == 0
    for qid in ds.queries:
        assert 2 <= len(ds.positives(qid)) <= 4, qid
        assert set(ds.positives(qid).values()) <= {1, 2}
    texts = list(ds.corpus.values()) + list(ds.queries.values())
    assert len(set(texts)) == len(texts), "duplicate texts"
    lengths = [len(t.split()) for t in ds.corpus.values()]
    assert min(lengths) >= 80 and max(lengths) <= 300
    assert set(ds.rewrites["hyde", "demo-writer"]) == set(ds.queries) and ds.hand_written(("hyde", "demo-writer"))
    assert ds.meta["notice"] == NOTICE
    assert NOTICE in (demo_path(task) / "README.md").read_text(encoding="utf-8")


def test_demo_size() -> None:
    assert sum(len(load_demo(t).corpus) for t in DEMO_TASKS) >= 300
    assert sum(len(load_demo(t).queries) for t in DEMO_TASKS) >= 30


@pytest.mark.parametrize("task", DEMO_TASKS)
def test_the_reasoning_gap_is_real(task: str) -> None:
    """BM25 on the raw query is clearly below BM25 on the HyDE document; dense disagrees with BM25."""
    ds = load_demo(task)
    bm25 = run_system(ds, "bm25")
    plain = evaluate(bm25, ds.qrels).means["ndcg_at_10"]
    hyde = evaluate(run_system(ds, "bm25+hyde:demo-writer"), ds.qrels).means["ndcg_at_10"]
    assert plain <= 0.35
    assert hyde >= plain + 0.3
    dense = run_system(ds, "minilm")
    differing = sum({d for d, _ in bm25.top(q, 10)} != {d for d, _ in dense.top(q, 10)} for q in ds.queries)
    assert differing >= len(ds.queries) / 3


def test_demo_ships_inside_the_installed_package(tmp_path: Path) -> None:
    """Build a wheel, install it elsewhere, and load the demo from there (not from this checkout)."""
    wheels, site, source = tmp_path / "wheels", tmp_path / "site", tmp_path / "source"
    # Build from a copy so setuptools' build/ and *.egg-info never land in the checkout.
    shutil.copytree(ROOT / "r2med_core", source / "r2med_core", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "requirements.txt", "README.md"):
        shutil.copy(ROOT / name, source / name)
    build = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(wheels),
        str(source),
    ]
    subprocess.run(build, check=True, capture_output=True, timeout=300)
    [wheel] = list(wheels.glob("*.whl"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    script = (
        "import json, r2med_core; from r2med_core import load_demo, DEMO_TASKS; "
        "print(json.dumps([r2med_core.__file__] + [len(load_demo(t).corpus) for t in DEMO_TASKS]"
        " + [sorted(m for (_, m), p in load_demo(t).rewrite_provenance.items() if p) for t in DEMO_TASKS]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    location, *found = json.loads(done.stdout.strip().splitlines()[-1])
    assert location.startswith(str(site))
    sizes, made = found[: len(DEMO_TASKS)], found[len(DEMO_TASKS) :]
    assert sizes == [len(load_demo(t).corpus) for t in DEMO_TASKS]
    assert made == [["demo-writer", "smollm2-135m"]] * len(DEMO_TASKS)  # both sets' provenance ship too
