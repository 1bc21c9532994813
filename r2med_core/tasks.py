"""The eight R2MED tasks and their three families.

One place for task names, Hugging Face ids, published sizes and the per-family instructions that
instruction-following dense models use, so the CLI, the loaders and the app never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Family(StrEnum):
    """R2MED's three task families."""

    QA_REFERENCE = "Q&A reference retrieval"
    CLINICAL_EVIDENCE = "Clinical evidence retrieval"
    CLINICAL_CASE = "Clinical case retrieval"


#: What an instruction-following retriever is told to look for, per family (written for this project).
FAMILY_INSTRUCTIONS: dict[Family, str] = {
    Family.QA_REFERENCE: (
        "Given a biology or medical-science question, retrieve passages that explain the "
        "mechanism or concept an expert answer would rely on"
    ),
    Family.CLINICAL_EVIDENCE: (
        "Given a clinical vignette, infer the underlying diagnosis or clinical decision and "
        "retrieve textbook or guideline passages that support it"
    ),
    Family.CLINICAL_CASE: (
        "Given a patient case summary, infer the likely diagnosis and retrieve other case "
        "reports with the same diagnosis"
    ),
}


@dataclass(frozen=True)
class TaskInfo:
    """A published R2MED task: name, family, hub id and size as reported by the authors."""

    name: str
    family: Family
    n_queries: int
    n_documents: int
    source: str

    @property
    def hf_id(self) -> str:
        """The Hugging Face dataset repository holding this task."""
        return f"R2MED/{self.name}"

    @property
    def instruction(self) -> str:
        return FAMILY_INSTRUCTIONS[self.family]


TASKS: dict[str, TaskInfo] = {
    t.name: t
    for t in (
        TaskInfo("Biology", Family.QA_REFERENCE, 103, 57359, "Stack Exchange (Biology)"),
        TaskInfo("Bioinformatics", Family.QA_REFERENCE, 77, 47473, "Stack Exchange (Bioinformatics)"),
        TaskInfo("Medical-Sciences", Family.QA_REFERENCE, 88, 34810, "Stack Exchange (Medical Sciences)"),
        TaskInfo("MedXpertQA-Exam", Family.CLINICAL_EVIDENCE, 97, 61379, "MedXpertQA exam questions"),
        TaskInfo("MedQA-Diag", Family.CLINICAL_EVIDENCE, 118, 56250, "MedQA diagnosis questions"),
        TaskInfo("PMC-Treatment", Family.CLINICAL_EVIDENCE, 150, 28954, "PubMed Central case reports"),
        TaskInfo("PMC-Clinical", Family.CLINICAL_CASE, 114, 60406, "PubMed Central case reports"),
        TaskInfo("IIYi-Clinical", Family.CLINICAL_CASE, 129, 10449, "IIYi clinical cases"),
    )
}

#: Rewriting methods whose outputs R2MED publishes, in the benchmark's folder names.
REWRITE_METHODS: tuple[str, ...] = ("hyde", "query2doc", "lamer", "search-o1", "search-r1")


def get_task(name: str) -> TaskInfo:
    """Look a task up by name, case-insensitively, with a message listing the valid names."""
    for task_name, info in TASKS.items():
        if task_name.lower() == name.lower():
            return info
    raise KeyError(f"unknown R2MED task {name!r}; choose one of: {', '.join(TASKS)}")
