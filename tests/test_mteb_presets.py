"""The dense presets "as MTEB ran it" (issue 39 item 3): for each paper model MTEB also ran (e5, SFR,
GritLM), mteb 1.38.20's generic instruction on queries and documents and 512 tokens — configuration only,
checked as the other presets are (tests/test_presets.py), and encoded with a stand-in model as
sentence-transformers is told to (tests/test_dense.py). bge-large-en-v1.5 has no such variant: MTEB ran it
as the benchmark does (its 160 published values are equal)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from r2med_core.analysis.fidelity import fidelity
from r2med_core.analysis.published import published_key_for
from r2med_core.retrieval.dense import MTEB_PRESETS, PRESETS, DenseRetriever
from r2med_core.systems import parse_system
from r2med_core.tasks import TASKS, task_instructions

from . import test_dense
from .test_dense import TINY_VOCAB
from .test_dense import _reasonir_encoder as sentence_transformers_encode

tiny_bert = test_dense.tiny_bert  # the stand-in models' fixtures, shared with the other presets' tests
tiny_sentence_transformer = test_dense.tiny_sentence_transformer

GENERIC = "Retrieve text based on user query."
# preset: (hub id, backend, prompt on both sides) as mteb 1.38.20 configured the model (e5_instruct.py's
# E5_INSTRUCTION, salesforce_models.py's instruction_template, gritlm_models.py's gritlm_instruction).
EXPECTED = {
    "e5-mteb": ("intfloat/e5-mistral-7b-instruct", "sentence-transformers", f"Instruct: {GENERIC}\nQuery: "),
    "sfr-mteb": ("Salesforce/SFR-Embedding-Mistral", "sentence-transformers", f"Instruct: {GENERIC}\nQuery: "),
    "grit-mteb": ("GritLM/GritLM-7B", "gritlm", f"<|user|>\n{GENERIC}\n<|embed|>\n"),
}


@pytest.mark.parametrize("preset", sorted(EXPECTED))
def test_each_is_the_paper_model_with_mtebs_instruction_on_both_sides_and_512_tokens(preset: str) -> None:
    assert set(EXPECTED) == MTEB_PRESETS <= set(PRESETS)
    model = PRESETS[preset]
    hub, backend, prompt = EXPECTED[preset]
    assert (model.query_model, model.backend, model.max_length, model.query_max_length) == (hub, backend, 512, None)
    base = PRESETS[preset.removesuffix("-mteb")]
    assert (model.pooling, model.normalize, model.query_model) == (base.pooling, base.normalize, base.query_model)
    for task in TASKS:  # the same generic instruction for every task, not the benchmark's
        filled = model.with_instruction(task_instructions(task))
        assert (filled.query_prompt, filled.doc_prompt) == (prompt, prompt)
    assert "as MTEB ran it on R2MED" in model.label and "not the benchmark's setting" in model.label


@pytest.mark.parametrize("preset", sorted(EXPECTED))
def test_each_is_badged_as_not_the_benchmarks_setting_and_has_no_paper_number(preset: str) -> None:
    verdict = fidelity(preset, dataset_name="Biology")
    assert not verdict.is_benchmark
    assert verdict.differences == (
        f"{preset} runs as MTEB ran it on R2MED (its generic instruction on queries and documents, 512 tokens), "
        "not the benchmark's",
    )
    assert fidelity(preset.removesuffix("-mteb"), dataset_name="Biology").is_benchmark
    assert published_key_for(preset) is None and str(parse_system(preset)) == preset


def test_a_stand_in_encodes_both_sides_with_the_generic_instruction_cut_at_512(tiny_sentence_transformer: Path) -> None:
    model = replace(PRESETS["e5-mteb"], query_model=str(tiny_sentence_transformer))
    retriever = DenseRetriever(model.with_instruction(task_instructions("Biology")))
    texts = [" ".join(TINY_VOCAB[5:] * 50), "asthma wheeze"]  # over 512 tokens, and a short one
    prompt = f"Instruct: {GENERIC}\nQuery: "
    want = sentence_transformers_encode(tiny_sentence_transformer, texts, prompt, 512)
    documents = retriever.encode(texts, "doc")
    assert documents == pytest.approx(want, abs=1e-5)
    assert retriever.encode(texts, "query") == pytest.approx(want, abs=1e-5)  # the same text on both sides
    e5 = replace(PRESETS["e5"], query_model=str(tiny_sentence_transformer), max_length=512)  # the stand-in's limit
    benchmark = DenseRetriever(e5.with_instruction(task_instructions("Biology")))
    assert not np.allclose(documents, benchmark.encode(texts, "doc"), atol=1e-3)  # the benchmark's: no prefix
    shorter = sentence_transformers_encode(tiny_sentence_transformer, texts[:1], prompt, 256)
    assert not np.allclose(documents[0], shorter[0], atol=1e-3)  # cut at 512, not earlier
