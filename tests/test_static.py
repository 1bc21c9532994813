"""Static embeddings (``static:``): MiniLM distilled offline and cached with its provenance, the hub
presets served from a pre-filled Hugging Face cache, the run on every demo task fused with BM25, and a
clear message when the optional ``static`` extra is missing."""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from r2med_core import evaluate, load_demo
from r2med_core.cli import main
from r2med_core.data import DEMO_TASKS
from r2med_core.retrieval import static
from r2med_core.retrieval.fusion import reciprocal_rank_fusion
from r2med_core.systems import is_computed, parse_system, run_system

from .conftest import write_jsonl

needs_model2vec = pytest.mark.skipif(
    importlib.util.find_spec("model2vec") is None,
    reason="the optional 'static' extra is not installed (pip install -r requirements-static.txt)",
)

WORDS = ["[PAD]", "[UNK]", "asthma", "wheeze", "airway", "heart", "chest", "pain", "troponin", "gout", "urate"]


def _tokenizer():  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def _vectors() -> np.ndarray:
    """One direction per topic (asthma words, heart words, gout words), so a query finds its topic."""
    vectors = np.zeros((len(WORDS), 3), dtype=np.float32)
    for i, word in enumerate(WORDS):
        topic = {"asthma": 0, "wheeze": 0, "airway": 0, "heart": 1, "chest": 1, "pain": 1, "troponin": 1}.get(word, 2)
        vectors[i, topic] = 1.0 if i > 1 else 0.0
    return vectors


def _model2vec_layout(folder: Path) -> Path:
    from model2vec import StaticModel

    StaticModel(vectors=_vectors(), tokenizer=_tokenizer(), normalize=True).save_pretrained(str(folder))
    return folder


def _sentence_transformers_layout(folder: Path) -> Path:
    """The layout of sentence-transformers' static models (weights under ``0_StaticEmbedding``)."""
    from safetensors.numpy import save_file

    module = folder / "0_StaticEmbedding"
    module.mkdir(parents=True)
    save_file({"embedding.weight": _vectors()}, str(module / "model.safetensors"))
    _tokenizer().save(str(module / "tokenizer.json"))
    kind = "sentence_transformers.models.StaticEmbedding"
    modules = [{"idx": 0, "name": "0", "path": "0_StaticEmbedding", "type": kind}]
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    (folder / "config_sentence_transformers.json").write_text("{}", encoding="utf-8")
    return folder


@pytest.fixture
def topics(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Three documents on three topics and a query for each."""
    from r2med_core.data import load_r2med_dir

    root = tmp_path / "topics"
    docs = {"d_asthma": "asthma wheeze airway", "d_heart": "chest pain troponin", "d_gout": "gout urate"}
    write_jsonl(root / "corpus.jsonl", [{"id": k, "text": v} for k, v in docs.items()])
    queries = {"q_asthma": "wheeze", "q_heart": "heart pain", "q_gout": "urate"}
    write_jsonl(root / "query.jsonl", [{"id": k, "text": v} for k, v in queries.items()])
    qrels = [{"q_id": q, "p_id": f"d_{q[2:]}", "score": 1} for q in queries]
    write_jsonl(root / "qrels.jsonl", qrels)
    return load_r2med_dir(root, name="topics")


def _hub_cache(root: Path, repo: str, make, commit: str) -> Path:  # type: ignore[no-untyped-def]
    """A Hugging Face cache holding ``repo`` at ``commit``, as a download leaves it."""
    base = root / f"models--{repo.replace('/', '--')}"
    make(base / "snapshots" / commit)
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(commit, encoding="utf-8")
    return root


@needs_model2vec
@pytest.mark.parametrize(
    ("preset", "make"),
    [
        ("potion-multilingual-128m", _model2vec_layout),
        ("static-similarity-mrl-multilingual", _sentence_transformers_layout),
    ],
)
def test_mteb_static_presets_load_from_a_prefilled_hub_cache_offline(
    preset: str, make, topics, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from huggingface_hub import constants

    repo = static.STATIC_PRESETS[preset].source
    cache = _hub_cache(tmp_path / "hf", repo, make, "a" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    static._load.cache_clear()
    spec = parse_system(f"static:{repo}")
    assert str(spec) == f"static:{preset}"  # the hub id is the preset
    run = run_system(topics, spec, k=3)
    assert {q: ranking[0][0] for q, ranking in run.rankings.items()} == {
        "q_asthma": "d_asthma",
        "q_heart": "d_heart",
        "q_gout": "d_gout",
    }
    assert static.identity(preset) == {"model": repo, "revision": "a" * 40}  # the cached commit keys its vectors
    assert any("not the benchmark's setting" in note for note in spec.system_kind.differences(spec, "topics"))
    # another commit of the same repository is other vectors: not reused
    shutil.rmtree(cache)
    _hub_cache(tmp_path / "hf", repo, make, "b" * 40)
    assert not is_computed(topics, spec, 3)


@needs_model2vec
def test_a_hub_or_local_static_model_reads_at_most_its_own_configs_token_limit(tmp_path: Path) -> None:
    from model2vec import StaticModel

    static._load.cache_clear()
    capped = tmp_path / "capped"
    StaticModel(vectors=_vectors(), tokenizer=_tokenizer(), normalize=True, max_length=3).save_pretrained(str(capped))
    encoder = static.StaticEncoder(capped)
    assert encoder.max_tokens == 3
    retriever = static.StaticRetriever(str(capped))
    # short words, so model2vec's first cut (3 × the median token length in characters) keeps 3 tokens
    long, first = retriever.encode(["pain pain pain gout gout", "pain pain pain"], "doc")
    assert np.allclose(long, first, atol=1e-6)
    uncapped = static.StaticEncoder(_model2vec_layout(tmp_path / "uncapped"))
    assert uncapped.max_tokens == 512  # no limit in its config: model2vec's default, as MTEB ran the presets
    unlimited = static.StaticRetriever(str(tmp_path / "uncapped")).encode(["pain pain pain gout gout"], "doc")[0]
    assert not np.allclose(unlimited, first, atol=1e-3)  # the gout tokens count when nothing caps them
    assert static.StaticEncoder(_sentence_transformers_layout(tmp_path / "st")).max_tokens == 512


@needs_model2vec
def test_a_hub_static_model_not_in_the_cache_offline_is_a_clear_error(
    topics, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(static.StaticModelUnavailable, match="is not downloaded"):
        run_system(topics, "static:potion-multilingual-128m", k=3)


def test_a_missing_model2vec_is_a_clear_message_naming_the_extra(
    topics, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "model2vec" else real(name, *a))
    with pytest.raises(static.StaticModelUnavailable, match=r"optional 'static' extra \(model2vec\)") as err:
        run_system(topics, "static:minilm", k=3)
    assert "requirements-static.txt" in str(err.value)
    assert main(["eval", "--retriever", "static:minilm", "--demo", "clinical-case", "--output-dir", "out"]) == 2
    shown = capsys.readouterr().err
    assert shown.split("\r")[-1].startswith("error: static embeddings need the optional 'static' extra")
    assert "Traceback" not in shown
    assert "r2med-explorer[static]" in shown


@pytest.fixture
def tiny_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny BERT sentence-transformer standing in for the offline MiniLM (distils in a second)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules
    from transformers import BertConfig, BertModel, BertTokenizerFast

    bert = tmp_path / "bert"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS[2:]]
    BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}).save_pretrained(bert)
    torch.manual_seed(0)
    sizes = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32}
    BertModel(BertConfig(vocab_size=len(vocab), max_position_embeddings=64, **sizes)).save_pretrained(bert)
    folder = tmp_path / "source"
    transformer = modules.Transformer(str(bert))
    SentenceTransformer(modules=[transformer, modules.Pooling(16, pooling_mode="mean")]).save(str(folder))
    monkeypatch.setattr(static, "minilm_source", lambda: folder)
    return folder


@needs_model2vec
def test_distilled_once_with_provenance_and_a_changed_source_is_distilled_again(
    tiny_source: Path, topics, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    import model2vec.distill

    calls: list[str] = []
    real = model2vec.distill.distill
    monkeypatch.setattr(model2vec.distill, "distill", lambda **kw: calls.append(kw["model_name"]) or real(**kw))
    static._load.cache_clear()
    first = run_system(topics, "static:minilm", k=3)
    folder = static.distilled_folder()
    assert calls == [str(tiny_source)] and static.is_distilled()
    made = static.provenance(folder)
    assert made["source_files"] == static.files_digest(tiny_source)
    assert made["pca_dims"] == static.PCA_DIMS and made["model2vec"] == static._version("model2vec")
    assert made["vocabulary_size"] > 0 and made["source"] == "offline:all-MiniLM-L6-v2"
    assert made["max_tokens"] == static.source_token_limit(tiny_source)  # what the source reads, kept in the key
    assert static.distilled_folder() == folder and len(calls) == 1  # cached: not distilled again

    # the source model changes (other weights, same file names and sizes): a new static model and run
    import torch
    from transformers import BertModel

    weights = tiny_source / "model.safetensors"
    model = BertModel.from_pretrained(str(tiny_source))
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.mul_(-1.0)
    model.save_pretrained(str(tiny_source))
    assert weights.is_file()
    assert not static.is_distilled() and not is_computed(topics, parse_system("static:minilm"), 3)
    second = run_system(topics, "static:minilm", k=3)
    assert len(calls) == 2 and static.distilled_folder() != folder
    assert first.rankings.keys() == second.rankings.keys()


MEASURED = json.loads(static.MEASURED_FILE.read_text(encoding="utf-8")) if static.MEASURED_FILE.is_file() else {}


@pytest.fixture(scope="module")
def minilm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the real distillation (a minute or more on a CPU), shared by this module's tests."""
    return tmp_path_factory.mktemp("static-cache")


@pytest.fixture
def offline_minilm(minilm_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """That cache, with the hub offline: where each real-distillation test runs."""
    monkeypatch.setenv("R2MED_CACHE_DIR", str(minilm_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return minilm_cache


@needs_model2vec
def test_static_minilm_runs_on_every_demo_task_from_a_cold_cache_offline_as_measured(offline_minilm: Path) -> None:
    assert not static.is_distilled()
    scores = {}
    for task in DEMO_TASKS:
        demo = load_demo(task)
        run = run_system(demo, "static:minilm")
        assert set(run.rankings) == set(demo.queries)
        assert all(len(r) == min(100, len(demo.corpus)) for r in run.rankings.values())
        scores[task] = evaluate(run, demo.qrels, dataset_name=demo.name).means["ndcg_at_10"]
    assert static.provenance(static.distilled_folder())["dimensions"] == static.PCA_DIMS
    # the figures the app shows beside the system are what this computes (benchmarks/bench_static.py wrote them)
    assert MEASURED, "r2med_core/retrieval/static_measured.json is missing: python -m benchmarks.bench_static"
    for task, score in scores.items():
        assert score == pytest.approx(MEASURED["quality"]["tasks"][task]["static"], abs=0.005), task


def test_static_minilm_reads_what_minilm_reads() -> None:
    # MiniLM reads 256 tokens with [CLS] and [SEP] among them; the static model adds no special tokens
    assert static.source_token_limit(static.minilm_source()) == 254
    assert static.distill_key(static.minilm_source())["max_tokens"] == 254


@needs_model2vec
def test_a_document_longer_than_the_limit_gives_the_vector_of_its_first_tokens(offline_minilm: Path) -> None:
    retriever = static.StaticRetriever("minilm")
    limit = static.provenance(static.distilled_folder())["max_tokens"]
    model = retriever._encoder("doc").model
    assert limit == 254 and model.max_length == limit  # saved in the model's config, read at every load
    tokenizer = copy.deepcopy(model.tokenizer)
    tokenizer.no_truncation()
    texts = [text for task in DEMO_TASKS for text in load_demo(task).corpus.values()]
    longer = [
        (t, e) for t, e in zip(texts, tokenizer.encode_batch(texts, add_special_tokens=False)) if len(e.ids) > limit
    ]
    assert len(longer) >= 20, "the demo has documents longer than the limit"
    firsts = [text[: tokens.offsets[limit - 1][1]] for text, tokens in longer]
    whole = retriever.encode([text for text, _ in longer], "doc")
    assert np.allclose(whole, retriever.encode(firsts, "doc"), atol=1e-6)
    # and the limit is what makes them equal: read whole, the same documents give other vectors
    unlimited = model.encode([text for text, _ in longer], max_length=None, use_multiprocessing=False)
    unlimited = unlimited / np.linalg.norm(unlimited, axis=1, keepdims=True)
    assert np.abs(unlimited - whole).max() > 1e-2


@needs_model2vec
def test_static_minilm_fuses_with_bm25_and_runs_from_the_command_line(
    offline_minilm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = load_demo("clinical-case")
    fused = run_system(demo, "rrf(bm25,static:minilm)")
    members = [run_system(demo, name) for name in ("bm25", "static:minilm")]
    expected = reciprocal_rank_fusion(members, "expected")
    assert fused.rankings == expected.rankings  # the fusion kind over the static run, cached like any member
    assert fused.rankings != members[0].rankings and fused.rankings != members[1].rankings

    out = tmp_path / "runs"
    assert main(["eval", "--retriever", "static:minilm", "--demo", "clinical-case", "--output-dir", str(out)]) == 0
    assert "static MiniLM" in capsys.readouterr().out
    assert main(["encode", "--model", "static:minilm", "--demo", "clinical-case"]) == 0
    assert "cache entry:" in capsys.readouterr().out


def test_the_app_offers_static_minilm_with_its_measured_cost_and_quality_beside_it() -> None:
    from streamlit.testing.v1 import AppTest

    from .test_app import APP

    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params["systems"] = ["bm25", "static:minilm"]
    at.run()
    at.switch_page("views/pages/metrics.py").run()
    assert not at.exception, [e.value for e in at.exception]
    systems = at.multiselect(key="w_systems")
    offered = [parse_system(name).label for name in ("static:minilm", "static:potion-multilingual-128m")]
    assert set(offered) <= set(systems.options), systems.options
    note = static.cost_and_quality()
    assert "MiniLM's nDCG@10 on the demo" in note and "not the benchmark's setting" in note
    assert "for all 357,080 R2MED documents" in note
    assert note in systems.help.replace("\\", "")  # the picker says it
    # not computed yet: its Compute panel shows the estimate with the same sentence beside it
    assert any(b.label.startswith("Compute (≈") for b in at.button)
    assert any(note == c.value.replace("\\", "") for c in at.caption)


def test_static_names_round_trip_and_a_link_runs_only_presets_or_allowed_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from r2med_core.server.access import system_refusal
    from r2med_core.settings import load_settings
    from r2med_core.systems import SpecError

    for name in ("static:minilm", "static:minilm+hyde:gpt4", "static:/models/my-static", "rrf(bm25,static:minilm)"):
        assert str(parse_system(name)) == name
    with pytest.raises(SpecError, match="names no model"):
        parse_system("static:")
    settings = load_settings()
    assert system_refusal("static:minilm", settings) is None
    assert system_refusal("static:potion-multilingual-128m", settings) is None
    assert system_refusal("static:/etc", settings)  # a path from a URL is never loaded
    assert system_refusal("static:someone/static-model", settings)
    monkeypatch.setenv("R2MED_ALLOW_MODELS", "someone/static-model")
    assert system_refusal("static:someone/static-model", load_settings()) is None


def test_r2med_corpus_lengths_are_mtebs_per_task_and_sum_to_the_benchmark() -> None:
    from r2med_core.tasks import TASKS, corpus_lengths, corpus_lengths_source

    lengths = corpus_lengths()
    assert list(lengths) == list(TASKS)
    assert {name: c.documents for name, c in lengths.items()} == {name: t.n_documents for name, t in TASKS.items()}
    assert sum(c.documents for c in lengths.values()) == 357_080
    assert all(0 < c.average_characters <= c.max_characters for c in lengths.values())
    source = corpus_lengths_source()
    assert source["package"] == "mteb" and source["version"] and "descriptive_stats" in source["files"]
    if importlib.util.find_spec("mteb") is None:
        return
    import mteb

    recorded = json.loads((Path(static.__file__).parents[1] / "task_documents.json").read_text(encoding="utf-8"))
    folder = Path(mteb.__file__).parent / "descriptive_stats" / "Retrieval"
    for name, row in recorded["tasks"].items():  # the figures are MTEB's, as its files hold them
        stats = json.loads((folder / f"{row['mteb_task']}.json").read_text(encoding="utf-8"))["test"]
        assert row["documents"] == stats["num_documents"], name
        assert row["total_characters"] == stats["documents_text_statistics"]["total_text_length"], name
        assert row["average_characters"] == pytest.approx(
            stats["documents_text_statistics"]["average_text_length"], abs=0.05
        ), name


def test_the_stored_projection_is_per_task_and_adds_up_to_all_of_r2med() -> None:
    from r2med_core.tasks import TASKS, corpus_lengths

    assert MEASURED, "r2med_core/retrieval/static_measured.json is missing: python -m benchmarks.bench_static"
    rows = {row["task"]: row for row in MEASURED["encode"]["tasks"]}
    assert list(rows) == list(TASKS)
    for name, corpus in corpus_lengths().items():
        row = rows[name]
        assert row["documents"] == corpus.documents and row["characters"] == round(corpus.average_characters)
        assert row["static_cpu_seconds"] == pytest.approx(corpus.documents / row["static_docs_per_cpu_s"], rel=0.01)
        assert row["static_tokens_read"] <= MEASURED["distilled"]["max_tokens"]
    projection = MEASURED["projection"]
    assert projection["documents"] == 357_080
    assert projection["static_cpu_seconds"] == pytest.approx(sum(r["static_cpu_seconds"] for r in rows.values()), abs=1)
    assert MEASURED["distill_cpu_seconds"] > 0 and MEASURED["distilled"]["max_tokens"] == 254
