"""What a live rewrite asks the LLM, and with which sampling: R2MED's own settings by default.

Two prompt sets. ``official`` (the default) is the benchmark's: system message "You are a helpful
assistant.", and per task the HyDE / query2doc / LaMer user prompts the benchmark sent, so a new
LLM's rewrites are comparable with the published ones. ``explorer`` is this project's own wording
(a medical-expert system message, per-family instructions) — an alternative, labelled as such.

For a dataset that is not one of the 8 R2MED tasks, the official prompts of a task of the same
family stand in (``official_task`` says which, and the app and CLI say so). query2doc is few-shot in
the benchmark, with examples from its own code: pass them as an examples file; without one the
prompt is zero-shot, and is described so.

Sampling as the benchmark: temperature 0.7, seed 42 and a 10240-token budget for open models (it
served them with vLLM); the API models (GPT-4o, o1-mini, o3-mini, DeepSeek-R1 class) temperature 0.8
and top_p 0.8 with no token limit sent. sky-32b gets its own system prompt, as in the benchmark.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from r2med_core.tasks import TASKS, Family, family_stand_in

PROMPT_SETS: tuple[str, ...] = ("official", "explorer")
OFFICIAL_SYSTEM = "You are a helpful assistant."
#: The system prompt the benchmark generated with for sky-32b (``SkyAI_system_prompt`` in its first
#: commit's instrcution.py; its typos and the "\n\n" are the benchmark's own).
SKY_SYSTEM = (
    "Your role as an assistant involves thoroughly exploring questions through a systematic long thinking "
    "process before providing the final precise and accurate solutions. This requires engaging in a "
    "comprehensive cycle of analysis, summarizing, exploration, reassessment, reflection, backtracing, and "
    "iteration to develop well-considered thinking process. Please structure your response into two main "
    "sections: Thought and Solution. In the Thought section, detail your reasoning process using the "
    "specified format: <|begin_of_thought|> {thought with steps separated with '\n\n'} <|end_of_thought|> "
    "Each step should include detailed considerations such as analisying questions, summarizing relevant "
    "findings, brainstorming new ideas, verifying the accuracy of the current steps, refining any errors, and "
    "revisiting previous steps. In the Solution section, based on various attempts, explorations, and "
    "reflections from the Thought section, systematically present the final solution that you deem correct. "
    "The solution should remain a logical, accurate, concise expression style and detail necessary step "
    "needed to reach the conclusion, formatted as follows: <|begin_of_solution|> {final formatted, precise, "
    "and clear solution} <|end_of_solution|> Now, try to solve the following question through the above "
    "guidelines:"
)
#: LLMs (by the benchmark's name for them) that it prompted with their own system message.
_OWN_SYSTEM: dict[str, str] = {"sky-32b": SKY_SYSTEM}
GENERATION_METHODS: tuple[str, ...] = ("hyde", "query2doc", "lamer")

#: LaMer: the first-stage top 10, each cut to its first 512 whitespace tokens (official); the
#: explorer set cuts each to 1200 characters.
LAMER_PASSAGES = 10
LAMER_PASSAGE_TOKENS = 512
LAMER_PASSAGE_CHARS = 1200


class GenerationError(ValueError):
    """A generation request that cannot be carried out (bad method, name, examples or missing input)."""


# --------------------------------------------------------------------------- sampling


#: Models the benchmark called through an API (gpt-4o, o1-mini, o3-mini, DeepSeek-R1), by model id,
#: with or without a provider's prefix; DeepSeek-R1's distilled open models are served like the others.
_API_CLASS = re.compile(
    r"^(?:[^/]+/)*(?:gpt-4|gpt-5|o\d|deepseek-reasoner$|deepseek-r1(?!-distill))", re.IGNORECASE
)


#: The benchmark's completion budget for the open models it served with vLLM: a reasoning model's
#: "</think>" often comes after 512 tokens, and a reply cut before it would keep the whole reasoning.
OFFICIAL_MAX_TOKENS = 10240


def is_api_class(model: str) -> bool:
    """Whether the benchmark sampled this model as its API models (``official_sampling``)."""
    return bool(_API_CLASS.match(model.strip()))


def official_sampling(model: str) -> dict[str, Any]:
    """The benchmark's sampling for a model: the API class 0.8 + top_p 0.8, else 0.7 + seed 42."""
    if is_api_class(model):
        return {"temperature": 0.8, "top_p": 0.8}
    return {"temperature": 0.7, "seed": 42}


def official_max_tokens(model: str) -> int | None:
    """The benchmark's completion budget for a model: none sent to the API class, else 10240."""
    return None if is_api_class(model) else OFFICIAL_MAX_TOKENS


def official_system(llm_name: str | None) -> str:
    """The benchmark's system message for the LLM it named ``llm_name`` (sky-32b has its own)."""
    return _OWN_SYSTEM.get(llm_name or "", OFFICIAL_SYSTEM)


# --------------------------------------------------------------------------- the official wording


def official_task(task: str | None, family: Family | None) -> tuple[str, bool]:
    """``(task whose official prompts are used, whether that is the dataset's own task)``: for a dataset
    that is not an R2MED task, the task of its family marked ``family_stand_in`` in ``tasks.TASKS``."""
    if task is not None and task in TASKS:
        return task, True
    return family_stand_in(family).name, False


def format_lamer_passages(passages: Iterable[str]) -> str:
    """LaMer's {PASSAGE} as the benchmark builds it: ``"\\n[1]. text\\n[2]. text…"``, each passage with
    newlines replaced by spaces and cut to its first 512 whitespace tokens (``str.split()``: runs of
    blanks collapse, ends go), re-joined with single spaces."""
    cut = (" ".join(text.replace("\n", " ").split()[:LAMER_PASSAGE_TOKENS]) for text in passages)
    return "".join(f"\n[{i}]. {text}" for i, text in enumerate(cut, start=1))


def official_user_prompt(
    method: str, query: str, task: str, passages: Iterable[str] = (), examples: str | None = None
) -> str:
    """The benchmark's user prompt for ``task`` (an R2MED task name)."""
    w = TASKS[task].wording
    if method == "hyde":
        if w.similar:
            return f"Please write a similar case to help diagnose the Clinical Case.\nCase: {query}\nSimilar Case: "
        return f"Please write a passage to help answer the {w.subject}.\n{w.label}: {query}\nPassage: "
    if method == "lamer":
        found = format_lamer_passages(passages)
        if w.similar:
            return (
                "Give a Clinical Case and its possible similar cases (most of these cases are non-similar). "
                "Please write a correct similar case that help diagnose the case.\nJust output the correct case, "
                f"don't explanation.\n\nCase: {query}\n\nPossible Similar Cases: {found}"
            )
        return (
            f"Give a {w.subject} and its possible relevant passages (most of these passages are wrong). "
            f"Please write a correct passage that help answer the {w.short}.\nJust output the correct passage, "
            f"don't explanation.\n\n{w.label}: {query}\n\nPossible Relevant Passages: {found}"
        )
    # query2doc; the case-retrieval wording follows the benchmark's HyDE pattern for those tasks
    head = (
        "Write a similar case to help diagnose the Clinical Case."
        if w.similar
        else f"Write a passage {'that help' if task == 'Biology' else 'to help'} answer the {w.subject}."
    )  # "that help" for Biology is the benchmark's own wording (first commit and HEAD)
    tail = f"{w.label}: {query}\n" + ("Similar Case: " if w.similar else "Passage: ")
    if examples is None:
        return f"{head}\n\n{tail}"  # zero-shot: no examples section
    return f"{head}\n\n###Examples:###\n{examples}\n\n###Real Test:###\n{tail}"


# --------------------------------------------------------------------------- the explorer's own wording

#: Per family: what the user's text is, and what document a relevant corpus entry would be.
_FAMILY_TEXT: dict[Family | None, tuple[str, str]] = {
    Family.QA_REFERENCE: (
        "a biology or medical-science question from a Q&A forum",
        "a passage from a textbook, review article or expert answer that explains the mechanism, "
        "concept or method the answer relies on",
    ),
    Family.CLINICAL_EVIDENCE: (
        "a clinical vignette or exam question",
        "a passage from a medical textbook or clinical guideline that supports the correct answer; "
        "first work out the most likely diagnosis or the right clinical decision, then write the "
        "passage so that it names it and explains why",
    ),
    Family.CLINICAL_CASE: (
        "a patient case summary",
        "a short case report of another patient with the same diagnosis; first work out the most "
        "likely diagnosis, then describe a typical presentation, the findings that confirm it and "
        "the treatment",
    ),
    None: (
        "a medical question",
        "a passage from a medical reference that answers it",
    ),
}

_EXPLORER_SYSTEM = (
    "You are a careful medical expert helping a search engine. You write the kind of document a "
    "relevant source would contain, in plain technical English, with no preamble or disclaimer."
)

_EXPLORER_TEMPLATES: dict[str, str] = {
    "hyde": (
        "Below is {kind}. Write {document}.\n"
        "Write about 150 words, as the document itself, without restating the question.\n\n"
        "{query}"
    ),
    "query2doc": (
        "Write a passage that answers the query below; the query is {kind}. The passage should read "
        "like {document}. Use the specific terms such a document would contain (diseases, drugs, "
        "genes, tests, mechanisms). About 120 words, passage only.\n\nQuery: {query}\n\nPassage:"
    ),
    "lamer": (
        "Below is {kind}, followed by passages a first-stage search retrieved for it; some are "
        "relevant and some are not. Using the relevant ones as evidence and your own knowledge, "
        "write {document}. About 150 words, document only.\n\n"
        "Question: {query}\n\nRetrieved passages:\n{passages}\n\nDocument:"
    ),
}


def _explorer_user_prompt(method: str, query: str, family: Family | None, passages: Iterable[str]) -> str:
    kind, document = _FAMILY_TEXT.get(family, _FAMILY_TEXT[None])
    shown = "\n".join(
        f"[{i}] {' '.join(text.split())[:LAMER_PASSAGE_CHARS]}" for i, text in enumerate(passages, start=1)
    )
    return _EXPLORER_TEMPLATES[method].format(
        kind=kind, document=document, query=query.strip(), passages=shown or "(none)"
    )


# --------------------------------------------------------------------------- the prompt set


@dataclass(frozen=True)
class Prompts:
    """Which wording a live generation uses: ``official`` (R2MED's) or ``explorer`` (this project's).

    ``examples`` are query2doc's few-shot examples, as ``(task name or "*", text)`` pairs (see
    ``load_examples``); without any, official query2doc is zero-shot.
    """

    name: str = "official"
    examples: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.name not in PROMPT_SETS:
            raise GenerationError(f"unknown prompt set {self.name!r}: choose one of {', '.join(PROMPT_SETS)}")

    def examples_for(self, task: str) -> str | None:
        found = dict(self.examples)
        return found.get(task, found.get("*"))

    @property
    def examples_digest(self) -> str | None:
        if not self.examples:
            return None
        return hashlib.sha256(json.dumps(sorted(self.examples)).encode("utf-8")).hexdigest()[:16]

    def identity(self) -> dict[str, Any]:
        """What a cache key needs from the prompt set."""
        return {"prompts": self.name, "examples": self.examples_digest}

    def describe(self, method: str, task: str | None, family: Family | None) -> str:
        """One line saying which prompts a batch uses (shown by the CLI and the app)."""
        if self.name == "explorer":
            return "R2MED Explorer's own prompts (not the benchmark's)"
        used, own = official_task(task, family)
        text = "the benchmark's prompts" + ("" if own else f" of {used} (not an R2MED task: same family)")
        if method == "query2doc":
            text += (
                ", few-shot examples from your file" if self.examples_for(used) else ", zero-shot (no examples file)"
            )
        return text


OFFICIAL_PROMPTS = Prompts()
EXPLORER_PROMPTS = Prompts("explorer")


def load_examples(data: bytes, source: str, max_bytes: int) -> tuple[tuple[str, str], ...]:
    """Read a query2doc examples file: UTF-8 text used for every task, or a JSON object mapping R2MED
    task names (or "*") to the examples text of that task. ``source`` names the file in messages.

    Example text is kept byte for byte (a text file's final newline too): the benchmark's examples end
    with a newline, which puts three newlines before "###Real Test:###" in its prompt."""
    if len(data) > max_bytes:
        raise GenerationError(f"{source}: the examples file is larger than {max_bytes // (1024 * 1024) or 1} MB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise GenerationError(f"{source}: not UTF-8 text (byte {err.start})") from None
    if not text.strip():
        raise GenerationError(f"{source}: the examples file is empty")
    if text.lstrip().startswith("{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as err:
            raise GenerationError(f"{source}:{err.lineno}: malformed JSON: {err.msg}") from None
        if not isinstance(parsed, dict) or not parsed:
            raise GenerationError(f"{source}: expected a JSON object of task name → examples text")
        unknown = [k for k in parsed if k != "*" and k not in TASKS]
        if unknown:
            raise GenerationError(
                f"{source}: unknown task {unknown[0]!r}; keys are R2MED task names ({', '.join(TASKS)}) or *"
            )
        if not all(isinstance(v, str) and v.strip() for v in parsed.values()):
            raise GenerationError(f"{source}: every value must be a non-empty examples text")
        return tuple(sorted(parsed.items()))
    return (("*", text),)


def build_messages(
    method: str,
    query: str,
    family: Family | None = None,
    passages: Iterable[str] = (),
    *,
    task: str | None = None,
    prompts: Prompts = OFFICIAL_PROMPTS,
    llm_name: str | None = None,
) -> list[dict[str, str]]:
    """The chat messages sent for one query (shown by the app; part of every cache key). ``llm_name``,
    the name the rewrite is saved under, picks the benchmark's system message (``official_system``)."""
    if method not in GENERATION_METHODS:
        raise GenerationError(f"cannot generate {method!r} rewrites: choose one of {', '.join(GENERATION_METHODS)}")
    if prompts.name == "explorer":
        user = _explorer_user_prompt(method, query, family, passages)
        return [{"role": "system", "content": _EXPLORER_SYSTEM}, {"role": "user", "content": user}]
    used, _ = official_task(task, family)
    user = official_user_prompt(method, query, used, passages, prompts.examples_for(used))
    return [{"role": "system", "content": official_system(llm_name)}, {"role": "user", "content": user}]
