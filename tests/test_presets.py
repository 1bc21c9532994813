"""The dense presets against the benchmark's configuration (facts copied from the R2MED protocol):
hub ids, pooling, max lengths, prompts, the exact per-task instructions for all eight tasks, which
presets instruct both halves of a rewrite, and clear errors for models that cannot run here."""

from __future__ import annotations

from pathlib import Path

import pytest

from r2med_core.cli import main
from r2med_core.published import RETRIEVER_NAMES, published_key_for
from r2med_core.retrieval.dense import (
    PRESETS,
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


def test_only_instructor_nv_and_grit_instruct_both_halves_of_a_rewrite() -> None:
    both = {name for name, model in PRESETS.items() if model.instruct_all_parts}
    assert both == {"inst-l", "inst-xl", "nv", "grit"}


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
    for name in ("medcpt-dual", "minilm", "e5-large-v2"):
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
