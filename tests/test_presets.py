"""The dense presets against the benchmark's configuration (facts copied from the R2MED protocol):
hub ids, pooling, max lengths, prompts, the exact per-task instructions for all eight tasks, which
presets instruct both halves of a rewrite, and clear errors for models that cannot run here. The
later models' presets against the ReasonEmbed authors' R2MED evaluation code (facts transcribed from
VectorSpaceLab/agentic-search, ReasonEmbed/evaluation_r2med: prompts.py, runner.py,
reasonir_models.py and the scripts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from r2med_core.analysis.fidelity import fidelity
from r2med_core.analysis.published import RETRIEVER_NAMES, published_key_for
from r2med_core.cli import main
from r2med_core.hub import ModelUnavailable
from r2med_core.retrieval.dense import (
    PRESETS,
    REASONEMBED_PRESETS,
    DenseModelUnavailable,
    DenseRetriever,
    instruction_note,
    resolve_model,
)
from r2med_core.systems import parse_system
from r2med_core.tasks import TASKS, task_instructions

# preset: (query model, document model, pooling, max length, query max length, model's own L2)
EXPECTED_MODELS = {
    "contriever": ("facebook/contriever-msmarco", None, "mean", 512, None, False),
    "medcpt": ("ncbi/MedCPT-Article-Encoder", None, "cls", 512, None, False),
    "inst-l": ("hkunlp/instructor-large", None, None, None, None, True),
    "inst-xl": ("hkunlp/instructor-xl", None, None, None, None, True),
    "bmr-410m": ("BMRetriever/BMRetriever-410M", None, None, 512, None, False),
    "bmr-2b": ("BMRetriever/BMRetriever-2B", None, None, 1024, None, False),
    "bmr-7b": ("BMRetriever/BMRetriever-7B", None, None, 2048, None, False),
    "bge": ("BAAI/bge-large-en-v1.5", None, "cls", 512, None, True),
    "e5": ("intfloat/e5-mistral-7b-instruct", None, None, 2048, None, True),
    "grit": ("GritLM/GritLM-7B", None, None, 2048, 512, True),
    "sfr": ("Salesforce/SFR-Embedding-Mistral", None, None, 2048, None, True),
    "nv": ("nvidia/NV-Embed-v2", None, None, 4096, None, True),
    "openai": ("text-embedding-3-large", None, None, 6000, None, False),
    "medcpt-dual": ("ncbi/MedCPT-Query-Encoder", "ncbi/MedCPT-Article-Encoder", "cls", 512, 64, False),
}

# The benchmark's task sentence X per task (table D without "Instruct: "/"\nQuery: ").
X = {
    "Biology": "Given a Biology post, retrieve relevant passages that help answer the post",
    "Bioinformatics": "Given a Bioinformatics post, retrieve relevant passages that help answer the post",
    "Medical-Sciences": "Given a Medical Science post, retrieve relevant passages that help answer the post",
    "MedXpertQA-Exam": "Given a Medical Exam, retrieve relevant passages that help answer the exam",
    "MedQA-Diag": "Given a Medical Exam, retrieve relevant passages that help answer the exam",
    "PMC-Treatment": "Given a Clinical Case, retrieve relevant passages that help answer the case",
    "PMC-Clinical": "Given a Clinical Case, retrieve similar cases that help diagnose the case",
    "IIYi-Clinical": "Given a Clinical Case, retrieve similar cases that help diagnose the case",
}
# Tables A and B: Instructor's query and document instructions.
INSTRUCTOR_QUERY = {
    "Biology": "Represent the Biology post for retrieving relevant paragraphs: ",
    "Bioinformatics": "Represent the Bioinformatics post for retrieving relevant paragraphs: ",
    "Medical-Sciences": "Represent the Medical Science post for retrieving relevant paragraphs: ",
    "MedXpertQA-Exam": "Represent the Medical Exam for retrieving relevant paragraphs that help answer the exam: ",
    "MedQA-Diag": "Represent the Medical Exam for retrieving relevant paragraphs that help answer the exam: ",
    "PMC-Treatment": "Represent the Clinical Case for retrieving relevant paragraphs that help answer the case: ",
    "PMC-Clinical": "Represent the Clinical Case for retrieving similar cases that help diagnose the case: ",
    "IIYi-Clinical": "Represent the Clinical Case for retrieving similar cases that help diagnose the case: ",
}
INSTRUCTOR_DOC = {
    "Biology": "Represent the Biology paragraph for retrieval: ",
    "Bioinformatics": "Represent the Bioinformatics paragraph for retrieval: ",
    "Medical-Sciences": "Represent the Medical Science paragraph for retrieval: ",
    "MedXpertQA-Exam": "Represent the Medical paragraph for retrieval: ",
    "MedQA-Diag": "Represent the Medical paragraph for retrieval: ",
    "PMC-Treatment": "Represent the Medical paragraph for retrieval: ",
    "PMC-Clinical": "Represent the Clinical Case for retrieval: ",
    "IIYi-Clinical": "Represent the Clinical Case for retrieval: ",
}


def _prompts(preset: str, task: str) -> tuple[str, str]:
    model = PRESETS[preset].with_instruction(task_instructions(task))
    return model.query_prompt, model.doc_prompt


@pytest.mark.parametrize("preset", sorted(EXPECTED_MODELS))
def test_models_pooling_and_lengths_are_the_papers(preset: str) -> None:
    model = PRESETS[preset]
    assert (
        model.query_model,
        model.doc_model,
        model.pooling,
        model.max_length,
        model.query_max_length,
        model.normalize,
    ) == EXPECTED_MODELS[preset]


def test_every_task_has_the_benchmarks_instructions() -> None:
    assert set(X) == set(TASKS)
    for task in TASKS:
        for preset in ("e5", "sfr", "nv"):
            assert _prompts(preset, task) == (f"Instruct: {X[task]}\nQuery: ", "")
        for preset in ("bmr-410m", "bmr-2b", "bmr-7b"):
            assert _prompts(preset, task) == (f"{X[task]}\nQuery: ", "Represent this passage\npassage: ")
        assert _prompts("grit", task) == (f"<|user|>\n{X[task]}\n<|embed|>\n", "<|embed|>\n")
        for preset in ("inst-l", "inst-xl"):
            assert _prompts(preset, task) == (INSTRUCTOR_QUERY[task], INSTRUCTOR_DOC[task])
        assert _prompts("bge", task) == ("Represent this sentence for searching relevant passages: ", "")
        for preset in ("contriever", "medcpt", "medcpt-dual", "openai", "minilm"):
            assert _prompts(preset, task) == ("", "")


def test_only_instructor_nv_grit_and_reasonir_instruct_both_halves_of_a_rewrite() -> None:
    both = {name for name, model in PRESETS.items() if model.instruct_all_parts}
    assert both == {"inst-l", "inst-xl", "nv", "grit", "grit-mteb", "reasonir-8b"}  # ReasonIR: GritLM's format, rule


def test_medcpt_documents_are_pairs_and_instructor_pools_without_its_prompt() -> None:
    assert {name for name, model in PRESETS.items() if model.doc_pair} == {"medcpt", "medcpt-dual"}
    assert {name for name, model in PRESETS.items() if not model.pool_prompt} == {"inst-l", "inst-xl"}
    assert PRESETS["nv"].trust_remote_code and PRESETS["grit"].backend == "gritlm"
    bmr = {name for name, model in PRESETS.items() if model.backend == "bmretriever"}
    assert bmr == {"bmr-410m", "bmr-2b", "bmr-7b"}  # EOS-pooled through transformers, as its authors encode
    assert "not a paper model" in PRESETS["minilm"].label
    assert "not the paper's setting" in PRESETS["medcpt-dual"].label


def test_old_names_still_work_and_map_to_the_papers_retrievers() -> None:
    assert str(parse_system("bge-large")) == "bge"
    assert str(parse_system("e5-mistral+hyde:gpt4")) == "e5+hyde:gpt4"
    assert str(parse_system("sfr-mistral")) == "sfr"
    assert resolve_model("bge-large") is PRESETS["bge"]
    paper = {"contriever", "medcpt", "inst-l", "inst-xl", "bmr-410m", "bmr-2b", "bmr-7b", "bge", "e5", "grit"}
    for name in paper | {"sfr", "nv", "openai"}:
        assert published_key_for(name) == name
        assert published_key_for(f"{name}+hyde:gpt4") == f"hyde/gpt4/{name}"
    assert published_key_for("bge-large") == "bge"
    assert set(RETRIEVER_NAMES) - {"bm25", "voyage"} == paper | {"sfr", "nv", "openai"} <= set(PRESETS)
    for name in ("medcpt-dual", "minilm", "e5-large-v2", *REASONEMBED_PRESETS):
        assert published_key_for(name) is None


def test_other_datasets_get_a_generic_instruction_and_a_note() -> None:
    note = instruction_note("clinical-case", "e5")
    assert note is not None and "generic" in note and "not an R2MED task" in note
    assert "Given a medical question" in _prompts("e5", "clinical-case")[0]
    assert not task_instructions("clinical-case").official
    assert instruction_note("Biology", "e5") is None  # the paper's own instruction
    assert instruction_note("clinical-case", "bge") is None  # a fixed prompt, no task instruction
    assert instruction_note("clinical-case", "minilm") is None


def test_models_that_cannot_run_here_say_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("R2MED_TRUST_REMOTE_CODE", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(DenseModelUnavailable, match="pip install gritlm"):
        DenseRetriever(PRESETS["grit"]).encode(["q"])
    with pytest.raises(DenseModelUnavailable, match="R2MED_TRUST_REMOTE_CODE=1"):
        DenseRetriever(PRESETS["nv"]).encode(["q"])
    with pytest.raises(DenseModelUnavailable, match="OPENAI_API_KEY"):
        DenseRetriever(PRESETS["openai"]).encode(["q"])


def test_cli_maps_an_unavailable_model_to_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("R2MED_TRUST_REMOTE_CODE", raising=False)
    code = main(["eval", "--retriever", "nv", "--demo", "clinical-case", "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "error: NV-Embed-v2" in err and "R2MED_TRUST_REMOTE_CODE=1" in err
    assert "Traceback" not in err


def test_the_app_explains_published_metrics_and_unavailable_models(monkeypatch: pytest.MonkeyPatch) -> None:
    from .test_app import open_app

    at = open_app("leaderboard", systems=["bm25", "minilm"])
    captions = " ".join(c.value for c in at.caption)
    assert "For dense retrievers the paper published nDCG, MAP, Recall and P at 1, 3, 5, 10, 100 (no MRR)" in captions
    assert "For BM25 the paper published nDCG, MAP, Recall and P at 1, 10, 25, 50, 100 and MRR" in captions
    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")  # compute at once (no Compute click) to see the failure
    at = open_app("metrics", systems=["bm25", "grit"])
    assert not at.exception
    assert any("pip install gritlm" in e.value for e in at.error)  # one clear message, the page goes on
    assert at.dataframe  # bm25's metrics are still shown


# --------------------------------------------------------------------------- the ReasonEmbed authors' settings

# preset: (hub id, backend, max length both sides, L2-normalised, trust_remote_code) as their scripts run
# each model: FlagEmbedding's "decoder-only-base" embedder with pooling last_token (ReasonIR-8B: its
# own SentenceTransformer), --embedder_query_max_length 512 --embedder_passage_max_length 512,
# normalize_embeddings left at its default (True), --trust_remote_code True for RaDeR and ReasonIR only.
REASONEMBED_MODELS = {
    "reasonembed-8b": ("hanhainebula/reason-embed-qwen3-8b-0928", "last-token", 512, True, False),
    "reasonembed-4b": ("hanhainebula/reason-embed-qwen3-4b-0928", "last-token", 512, True, False),
    "qwen3-emb-8b": ("Qwen/Qwen3-Embedding-8B", "last-token", 512, True, False),
    "qwen3-emb-4b": ("Qwen/Qwen3-Embedding-4B", "last-token", 512, True, False),
    "rader-7b": ("Raderspace/RaDeR_gte_Qwen2-7B_MATH_LLMq_CoT_lexical", "last-token", 512, True, True),
    "diver-4b": ("AQ-MedAI/Diver-Retriever-4B", "last-token", 512, True, False),
    "reasonir-8b": ("reasonir/ReasonIR-8B", "sentence-transformers", 512, True, True),
}
# R2MEDInstructions in their prompts.py: the benchmark's sentences, each with a full stop.
AUTHORS_INSTRUCTIONS = {
    "Biology": "Given a Biology post, retrieve relevant passages that help answer the post.",
    "Medical-Sciences": "Given a Medical Science post, retrieve relevant passages that help answer the post.",
    "Bioinformatics": "Given a Bioinformatics post, retrieve relevant passages that help answer the post.",
    "MedXpertQA-Exam": "Given a Medical Exam, retrieve relevant passages that help answer the exam.",
    "MedQA-Diag": "Given a Medical Exam, retrieve relevant passages that help answer the exam.",
    "PMC-Treatment": "Given a Clinical Case, retrieve relevant passages that help answer the case.",
    "PMC-Clinical": "Given a Clinical Case, retrieve similar cases that help diagnose the case.",
    "IIYi-Clinical": "Given a Clinical Case, retrieve similar cases that help diagnose the case.",
}
LABELS = {
    "reasonembed-8b": "ReasonEmbed-Qwen3-8B",
    "reasonembed-4b": "ReasonEmbed-Qwen3-4B",
    "qwen3-emb-8b": "Qwen3-Embedding-8B",
    "qwen3-emb-4b": "Qwen3-Embedding-4B",
    "rader-7b": "RaDeR-gte-Qwen2-7B",
    "diver-4b": "DIVER-Retriever-4B",
    "reasonir-8b": "ReasonIR-8B",
}


@pytest.mark.parametrize("preset", sorted(REASONEMBED_MODELS))
def test_later_models_are_configured_as_the_reasonembed_authors_ran_them(preset: str) -> None:
    assert set(REASONEMBED_MODELS) == REASONEMBED_PRESETS <= set(PRESETS)
    model = PRESETS[preset]
    assert (
        model.query_model,
        model.backend,
        model.max_length,
        model.normalize,
        model.trust_remote_code,
    ) == REASONEMBED_MODELS[preset]
    assert model.doc_model is None and model.query_max_length is None and model.pooling is None
    whose = "(the ReasonEmbed authors' R2MED setting; not in the R2MED paper; GPU advised)"
    assert model.label == f"{LABELS[preset]} {whose}"


def test_later_models_get_the_reasonembed_authors_instruction_for_every_task() -> None:
    assert set(AUTHORS_INSTRUCTIONS) == set(TASKS)
    for task, instruction in AUTHORS_INSTRUCTIONS.items():
        for preset in sorted(REASONEMBED_PRESETS - {"reasonir-8b"}):  # FlagEmbedding: 'Instruct: {}\nQuery: {}'
            assert _prompts(preset, task) == (f"Instruct: {instruction}\nQuery: ", "")
        assert _prompts("reasonir-8b", task) == (f"<|user|>\n{instruction}\n<|embed|>\n", "<|embed|>\n")
    note = instruction_note("clinical-case", "qwen3-emb-8b")  # elsewhere: the generic one, said so
    assert note is not None and "generic" in note
    assert _prompts("qwen3-emb-8b", "clinical-case")[0].startswith("Instruct: Given a medical question")


def test_later_models_are_badged_as_not_the_benchmarks_setting() -> None:
    for preset in REASONEMBED_PRESETS:
        verdict = fidelity(preset, dataset_name="Biology")
        assert not verdict.is_benchmark
        assert verdict.differences == (
            f"{preset} runs in the ReasonEmbed authors' R2MED setting (instructions, pooling, lengths), "
            "not the benchmark's",
        )
        assert not fidelity(f"{preset}+hyde:gpt4", dataset_name="Biology").is_benchmark
    generic = fidelity("reasonembed-8b", dataset_name="clinical-case").differences
    assert generic[1] == "clinical-case is not an R2MED task: a generic query instruction replaces the per-task one"


@pytest.fixture
def offline_empty_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No network and an empty Hugging Face cache, as on a machine that never downloaded the model."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-empty"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.mark.parametrize("preset", sorted(REASONEMBED_MODELS))
def test_later_models_offline_say_they_are_not_downloaded(
    preset: str, offline_empty_hub: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = PRESETS[preset]
    if model.trust_remote_code:  # first the operator must allow the repository's code …
        monkeypatch.delenv("R2MED_TRUST_REMOTE_CODE", raising=False)
        with pytest.raises(DenseModelUnavailable, match="R2MED_TRUST_REMOTE_CODE=1"):
            DenseRetriever(model).encode(["q"])
        monkeypatch.setenv("R2MED_TRUST_REMOTE_CODE", "1")
    with pytest.raises(ModelUnavailable) as err:  # … then the weights must be there
        DenseRetriever(model).encode(["q"])
    message = str(err.value)
    assert message.startswith(f"{model.query_model} is not downloaded and the Hugging Face hub cannot be reached")
    assert "Run once with network access" in message


def test_cli_refuses_a_later_model_offline_in_one_line(
    tmp_path: Path, offline_empty_hub: None, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["eval", "--retriever", "reasonembed-8b", "--demo", "clinical-case"]
    assert main([*args, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "error: hanhainebula/reason-embed-qwen3-8b-0928 is not downloaded" in err and "Traceback" not in err


def test_the_app_says_a_later_model_is_not_downloaded(offline_empty_hub: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from r2med_app.views.markup import md

    from .test_app import open_app

    monkeypatch.setenv("R2MED_COMPUTE_SECONDS", "100000")  # compute at once (no Compute click) to see the failure
    at = open_app("metrics", systems=["bm25", "qwen3-emb-4b"])
    assert not at.exception
    assert any(md("Qwen/Qwen3-Embedding-4B is not downloaded") in e.value for e in at.error)
    assert at.dataframe  # bm25's metrics are still shown
