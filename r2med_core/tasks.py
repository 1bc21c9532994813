"""The eight R2MED tasks and their three families, and the benchmark's retrievers and rewrite methods.

Each task is one record (:class:`TaskInfo`) holding every fact about it: name, family, Hugging Face
id and pinned revision, published sizes, its short column header, the per-task instructions that
instruction-following dense models use and the wording of the rewrite prompts (the benchmark's exact
strings), the name its first-commit result files gave it, and whether its prompts stand in for its
family. The published results, the MTEB names, the prompts, the transcription script and the tests
derive their per-task tables from :data:`TASKS`, so a ninth task is one more record here and the CLI,
the loaders and the app never disagree. The retrievers' and rewrite methods' ids are the benchmark's folder names:
the system kinds (which dense presets are the benchmark's) and the published scores both read them here.
Each corpus's length in characters (``task_documents.json``, MTEB's descriptive statistics of its R2MED
tasks, recorded with their source) lets a speed be projected per task without downloading R2MED.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any


class Family(StrEnum):
    """R2MED's three task families."""

    QA_REFERENCE = "Q&A reference retrieval"
    CLINICAL_EVIDENCE = "Clinical evidence retrieval"
    CLINICAL_CASE = "Clinical case retrieval"


@dataclass(frozen=True)
class TaskInstructions:
    """What instruction-following dense models are told for one task, as the R2MED code words it.

    ``task`` is the sentence e5/SFR/NV-Embed ("Instruct: …\nQuery: "), BMRetriever ("…\nQuery: ")
    and GritLM ("<|user|>\n…\n<|embed|>\n") wrap; Instructor has its own query and document
    sentences. ``official`` is False for the generic instruction this app uses on other datasets.
    """

    task: str
    instructor_query: str
    instructor_doc: str
    official: bool = True


def _r2med(task: str, instructor_query: str, instructor_doc: str) -> TaskInstructions:
    return TaskInstructions(task, instructor_query, instructor_doc)


_POST = "Given a {} post, retrieve relevant passages that help answer the post"
_EXAM = _r2med(
    "Given a Medical Exam, retrieve relevant passages that help answer the exam",
    "Represent the Medical Exam for retrieving relevant paragraphs that help answer the exam: ",
    "Represent the Medical paragraph for retrieval: ",
)
_SIMILAR_CASE = _r2med(
    "Given a Clinical Case, retrieve similar cases that help diagnose the case",
    "Represent the Clinical Case for retrieving similar cases that help diagnose the case: ",
    "Represent the Clinical Case for retrieval: ",
)


def _post(subject: str) -> TaskInstructions:
    """The instructions of a Stack Exchange task (``subject``: "Medical Science")."""
    return _r2med(
        _POST.format(subject),
        f"Represent the {subject} post for retrieving relevant paragraphs: ",
        f"Represent the {subject} paragraph for retrieval: ",
    )


_TREATMENT = _r2med(
    "Given a Clinical Case, retrieve relevant passages that help answer the case",
    "Represent the Clinical Case for retrieving relevant paragraphs that help answer the case: ",
    "Represent the Medical paragraph for retrieval: ",
)


@dataclass(frozen=True)
class PromptWording:
    """How the benchmark's rewrite prompts (HyDE, query2doc, LaMer) name a task's queries."""

    subject: str  # "Biology post", "Medical Exam", "Clinical Case"
    short: str  # "post", "exam", "case"
    label: str  # "Post", "Exam", "Case"
    similar: bool = False  # case-retrieval tasks ask for a similar case


def _post_wording(subject: str) -> PromptWording:
    return PromptWording(f"{subject} post", "post", "Post")


_EXAM_WORDING = PromptWording("Medical Exam", "exam", "Exam")
_CASE_WORDING = PromptWording("Clinical Case", "case", "Case")
_SIMILAR_CASE_WORDING = PromptWording("Clinical Case", "case", "Case", similar=True)

#: This app's own instruction for datasets that are not R2MED tasks (demo, local, BEIR folders).
GENERIC_INSTRUCTIONS = TaskInstructions(
    "Given a medical question, retrieve relevant passages that help answer the question",
    "Represent the medical question for retrieving relevant paragraphs: ",
    "Represent the medical paragraph for retrieval: ",
    official=False,
)


#: What counts as relevant when a person grades a document, per family: shown beside the document on the
#: Judging page so every annotator grades against the same rule.
JUDGING_GUIDELINES: dict[Family | None, str] = {
    Family.QA_REFERENCE: (
        "The query is a question posted on a Q&A forum. Grade 2 when the document explains the mechanism, "
        "concept or method the best answer relies on; 1 when it is on the topic and gives part of that "
        "reasoning; 0 when it only shares words or the topic without helping to answer."
    ),
    Family.CLINICAL_EVIDENCE: (
        "The query is a clinical question (an exam vignette, a diagnosis or a treatment decision). Grade 2 "
        "when the document states the evidence that leads to the right answer (the diagnosis, the drug, the "
        "next step); 1 when it supports part of the reasoning; 0 when it concerns another condition or "
        "decision, however similar the words."
    ),
    Family.CLINICAL_CASE: (
        "The query is a patient's case. Grade 2 when the document is a case with the same diagnosis and a "
        "comparable presentation; 1 when it shares the diagnosis but differs in presentation or course, or "
        "clearly helps reach it; 0 when the diagnosis differs, even with similar symptoms."
    ),
    None: (
        "Grade 2 when the document answers the query; 1 when it helps to answer it; 0 when it does not, "
        "however many words it shares."
    ),
}


def judging_guideline(family: Family | None) -> str:
    """What counts as relevant for a task of ``family`` (None: a dataset outside the three families)."""
    return JUDGING_GUIDELINES.get(family, JUDGING_GUIDELINES[None])


def task_instructions(dataset_name: str) -> TaskInstructions:
    """The benchmark's instructions for an R2MED task (exact name), else this app's generic one."""
    info = TASKS.get(dataset_name)
    return GENERIC_INSTRUCTIONS if info is None else info.instructions


@dataclass(frozen=True)
class TaskInfo:
    """A published R2MED task: name, family, hub id and size as reported by the authors."""

    name: str
    family: Family
    n_queries: int
    n_documents: int
    source: str
    #: The hub commit loaded by default: the one MTEB pins for this task, so a number made today
    #: and one made next year read the same files (override with ``--revision`` / ``R2MED_HF_REVISION``).
    revision: str
    #: Its column header in a table of all the tasks beside the settings' names (the full name and what the
    #: task is are the tooltip): short, so the eight fit a 1000 px window.
    header: str
    #: The benchmark's query/document instructions for instruction-following dense models.
    instructions: TaskInstructions
    #: How the benchmark's rewrite prompts name its queries.
    wording: PromptWording
    #: The ``dataset_name`` the benchmark's first commit gave its result files (``Stack-Biology``).
    first_commit_name: str
    #: Whether its official prompts stand in for a dataset of its family that is not an R2MED task.
    family_stand_in: bool = False

    @property
    def hf_id(self) -> str:
        """The Hugging Face dataset repository holding this task."""
        return f"R2MED/{self.name}"


TASKS: dict[str, TaskInfo] = {
    t.name: t
    for t in (
        TaskInfo(
            "Biology",
            Family.QA_REFERENCE,
            103,
            57359,
            "Stack Exchange (Biology)",
            "8b9fec2db9eda4b5742d03732213fbaee8169556",
            "Biology",
            _post("Biology"),
            _post_wording("Biology"),
            "Stack-Biology",
        ),
        TaskInfo(
            "Bioinformatics",
            Family.QA_REFERENCE,
            77,
            47473,
            "Stack Exchange (Bioinformatics)",
            "6021fce366892cbfd7837fa85a4128ea93315e18",
            "Bioinf.",
            _post("Bioinformatics"),
            _post_wording("Bioinformatics"),
            "Stack-Bioinformatics",
        ),
        TaskInfo(
            "Medical-Sciences",
            Family.QA_REFERENCE,
            88,
            34810,
            "Stack Exchange (Medical Sciences)",
            "1b48911514c80bf9182222d99752ad75e23b4b47",
            "Med-Sci.",
            _post("Medical Science"),
            _post_wording("Medical Science"),
            "Stack-Medical",
            family_stand_in=True,
        ),
        TaskInfo(
            "MedXpertQA-Exam",
            Family.CLINICAL_EVIDENCE,
            97,
            61379,
            "MedXpertQA exam questions",
            "b457ea43db9ae5db74c3a3e5be0a213d0f85ac3a",
            "MedXpert",
            _EXAM,
            _EXAM_WORDING,
            "MedXpertQA-Exam",
        ),
        TaskInfo(
            "MedQA-Diag",
            Family.CLINICAL_EVIDENCE,
            118,
            56250,
            "MedQA diagnosis questions",
            "78b585990279cc01a493f876c1b0cf09557fba57",
            "MedQA",
            _EXAM,
            _EXAM_WORDING,
            "MedQA-Diag",
            family_stand_in=True,
        ),
        TaskInfo(
            "PMC-Treatment",
            Family.CLINICAL_EVIDENCE,
            150,
            28954,
            "PubMed Central case reports",
            "53c489a44a3664ba352c07550b72b4525a5968d5",
            "PMC-Treat.",
            _TREATMENT,
            _CASE_WORDING,
            "PMC-Treat",
        ),
        TaskInfo(
            "PMC-Clinical",
            Family.CLINICAL_CASE,
            114,
            60406,
            "PubMed Central case reports",
            "812829522f7eaa407ef82b96717be85788a50f7e",
            "PMC-Clin.",
            _SIMILAR_CASE,
            _SIMILAR_CASE_WORDING,
            "PMCPatients",
            family_stand_in=True,
        ),
        TaskInfo(
            "IIYi-Clinical",
            Family.CLINICAL_CASE,
            129,
            10449,
            "IIYi clinical cases",
            "974abbc9bc281c3169180a6aa5d7586cfd2f5877",
            "IIYi",
            _SIMILAR_CASE,
            _SIMILAR_CASE_WORDING,
            "IIYiPatients-EN",
        ),
    )
}


def family_stand_in(family: Family | None) -> TaskInfo:
    """The task whose official prompts stand in for a dataset of ``family`` that is not an R2MED task
    (a Q&A reference one for a dataset of no family)."""
    stand_ins = {info.family: info for info in TASKS.values() if info.family_stand_in}
    return stand_ins[family or Family.QA_REFERENCE]


#: The benchmark's first-stage retrievers: their ids as its results folders spell them (the dense presets
#: configured as it ran them share these names), and the names the paper prints.
RETRIEVER_NAMES: dict[str, str] = {
    "bm25": "BM25",
    "contriever": "Contriever",
    "medcpt": "MedCPT",
    "inst-l": "Instructor-large",
    "inst-xl": "Instructor-xl",
    "bmr-410m": "BMRetriever-410M",
    "bmr-2b": "BMRetriever-2B",
    "bmr-7b": "BMRetriever-7B",
    "bge": "bge-large-en-v1.5",
    "e5": "e5-mistral-7b-instruct",
    "grit": "GritLM-7B",
    "sfr": "SFR-Embedding-Mistral",
    "nv": "NV-Embed-v2",
    "openai": "text-embedding-3-large",
    "voyage": "voyage-3",
}

#: Rewriting methods whose outputs R2MED publishes, in the benchmark's folder names.
REWRITE_METHODS: tuple[str, ...] = ("hyde", "query2doc", "lamer", "search-o1", "search-r1")


def get_task(name: str) -> TaskInfo:
    """Look a task up by name, case-insensitively, with a message listing the valid names."""
    for task_name, info in TASKS.items():
        if task_name.lower() == name.lower():
            return info
    raise KeyError(f"unknown R2MED task {name!r}; choose one of: {', '.join(TASKS)}")


#: Each task's corpus size and length in characters, from MTEB's descriptive statistics (its source inside).
DOCUMENTS_FILE = Path(__file__).with_name("task_documents.json")


@dataclass(frozen=True)
class CorpusLengths:
    """A task's corpus as MTEB describes it: documents, and their lengths in characters."""

    task: str
    documents: int
    average_characters: float
    max_characters: int


@lru_cache(maxsize=1)
def _documents_file() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DOCUMENTS_FILE.read_text(encoding="utf-8"))
    return data


def corpus_lengths() -> dict[str, CorpusLengths]:
    """Every task's corpus size and document lengths (``task_documents.json``), in ``TASKS`` order."""
    rows = _documents_file()["tasks"]
    return {
        name: CorpusLengths(
            name, rows[name]["documents"], rows[name]["average_characters"], rows[name]["max_characters"]
        )
        for name in TASKS
    }


def corpus_lengths_source() -> dict[str, str]:
    """Where ``corpus_lengths`` come from: the package, its version and the files read."""
    return dict(_documents_file()["source"])
