"""Shared fixtures: every test session gets its own cache folder, and small datasets built on disk."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.llm_server import llama_server  # noqa: F401 (the real LLM server fixture, used by name)
from tests.pg_cluster import Cluster, find_bin_dir


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets an empty cache and annotation store, away from the user's own."""
    cache = tmp_path / "r2med-cache"
    monkeypatch.setenv("R2MED_CACHE_DIR", str(cache))
    monkeypatch.setenv("R2MED_DATA_HOME", str(tmp_path / "r2med-data"))  # annotations
    monkeypatch.delenv("R2MED_ANNOTATIONS_URL", raising=False)  # never the operator's annotation database
    return cache


@pytest.fixture(params=["sqlite", "postgresql"])
def new_target(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], str | Path]:
    """Make a place for one more empty annotation store of the backend under test: a SQLite file (its
    folder not yet made) or a fresh schema of the test PostgreSQL server (skipped without PostgreSQL)."""
    if request.param == "sqlite":
        return lambda name: tmp_path / "stores" / name / "annotations.sqlite"
    new_url: Callable[[], str] = request.getfixturevalue("postgres_urls")
    return lambda name: new_url()


@pytest.fixture(scope="session")
def postgres_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A throwaway PostgreSQL server for the whole session, started on first use and stopped at the end."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL is not installed (no initdb/pg_ctl in /usr/lib/postgresql/*/bin or on PATH): "
            "apt-get install postgresql"
        )
    cluster = Cluster.start(bin_dir, tmp_path_factory.mktemp("postgres"))
    yield cluster
    cluster.stop()


@pytest.fixture
def postgres_urls(postgres_cluster: Cluster) -> Iterator[Callable[..., str]]:
    """Make a URL naming an empty schema of the test server per call (one store each), over the trusted
    socket or, with ``tcp=True``, over localhost with the password; the schemas are dropped afterwards."""
    import psycopg

    made: list[str] = []

    def new_url(tcp: bool = False) -> str:
        schema = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(postgres_cluster.socket_url(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        made.append(schema)
        return postgres_cluster.tcp_url(schema=schema) if tcp else postgres_cluster.socket_url(schema)

    yield new_url
    with psycopg.connect(postgres_cluster.socket_url(), autocommit=True) as conn:
        for schema in made:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


TINY_CORPUS = [
    {"id": "dka_0", "text": "Diabetic ketoacidosis is treated with intravenous fluids and insulin infusion."},
    {"id": "dka_1", "text": "Ketoacidosis causes an anion gap metabolic acidosis with ketones in the blood."},
    {"id": "asthma_0", "text": "Asthma is a chronic inflammatory disease of the airways with wheeze."},
    {"id": "mi_0", "text": "Myocardial infarction presents with chest pain and raised troponin."},
    {"id": "gout_0", "text": "Gout is caused by urate crystal deposition in the joints."},
]
TINY_QUERIES = [
    {"id": "q1", "text": "How is diabetic ketoacidosis treated?", "answer": "fluids and insulin"},
    {"id": "q2", "text": "What causes chest pain with raised troponin?"},
    {"id": "q3", "text": "A question nobody judged"},
]
TINY_QRELS = [
    {"q_id": "q1", "p_id": "dka_0", "score": 2},
    {"q_id": "q1", "p_id": "dka_1", "score": 1},
    {"q_id": "q2", "p_id": "mi_0", "score": 1},
]


@pytest.fixture
def tiny_r2med(tmp_path: Path) -> Path:
    """A five-document dataset in the R2MED layout, with one HyDE rewrite file."""
    root = tmp_path / "tiny"
    write_jsonl(root / "corpus.jsonl", TINY_CORPUS)
    write_jsonl(root / "query.jsonl", TINY_QUERIES)
    write_jsonl(root / "qrels.jsonl", TINY_QRELS)
    write_jsonl(
        root / "hyde" / "toy-llm" / "query_with_hydoc.jsonl",
        [
            {"id": "q1", "text": TINY_QUERIES[0]["text"], "hy_doc": "Insulin infusion and intravenous fluids."},
            {"id": "q2", "text": TINY_QUERIES[1]["text"], "hy_doc": "Myocardial infarction raises troponin."},
        ],
    )
    return root
