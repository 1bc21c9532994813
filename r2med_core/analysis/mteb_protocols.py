"""Same model, two protocols: for every model both the R2MED paper and MTEB ran, the per-task
difference between their numbers and the reasons, in words, each with the source file that shows it.

The reasons are facts read from the two codebases at the versions that made the numbers — R2MED's
first commit (45cbac5, which made the paper's numbers), mteb 1.38.20 (the 2025 runs) and mteb 2.18.1
(the BM25 baseline's run), and the GritLM package mteb called — transcribed here with the file each
is in, so a reader can check them. What the code does not explain is said too: the code shows what
differs, never which difference moves which task (the ``bm25s-mteb`` system and the ``*-mteb`` dense
presets make that testable locally).

bge-large-en-v1.5 is the control: run the same way by both, its 160 published values are equal, which
rules out the data and the scoring as causes of the other gaps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from r2med_core.analysis.mteb import MtebModel, mteb_models, paper_key_for_mteb
from r2med_core.analysis.published import PUBLISHED_TASKS, RETRIEVER_NAMES, normalise_metric, published_score

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ProtocolComparison", "Reason", "protocol_comparisons", "protocol_table"]

_R2MED = "R2MED/R2MED@45cbac5"
_MTEB_2025 = "embeddings-benchmark/mteb@1.38.20"
_MTEB_BM25 = "embeddings-benchmark/mteb@2.18.1"
_RESULTS = "embeddings-benchmark/results"
#: A per-task gap smaller than this (points × 100) is rounding: the files keep 5 decimals.
EQUAL_WITHIN = 0.005


@dataclass(frozen=True)
class Reason:
    """One way the two protocols differ: what (``aspect``), R2MED's way, MTEB's way, and where each is read."""

    aspect: str
    paper: str
    mteb: str
    sources: tuple[str, ...]


def _reason(aspect: str, paper: str, mteb: str, *sources: str) -> Reason:
    return Reason(aspect, paper, mteb, sources)


_CUSTOM_TASK = _reason(
    "task and data",
    "the eight tasks, each loaded from its own folder",
    'a custom task R2MEDRetrieval (dataset_revision "1.0", the eight tasks as subsets) written before mteb '
    "shipped R2MED tasks; its files were later split into eight, and the Medical-Sciences files' "
    "dataset_revision was edited by hand from 7f11654e… to 1b48911514… (scores unchanged)",
    f"{_RESULTS}: results/<model>/<revision>/R2MEDRetrieval.json (e.g. commit 6810ef127), later deleted",
    f"{_RESULTS}: commits 'Update R2MEDMedicalSciencesRetrieval.json' of 2025-06-05",
)
_EVALUATION = _reason(
    "evaluation conventions",
    "BEIR's EvaluateRetrieval (pytrec_eval), cosine similarity, k up to 1000, a document whose id is the "
    "query's ignored",
    "mteb's RetrievalEvaluator (pytrec_eval) over its top 1000, identical ids not ignored; bge-large-en-v1.5, "
    "run the same way by both, gives the same 160 values, so these conventions do not move the numbers",
    f"{_R2MED}: src/eval_bench.py (retrieval_by_dense: EvaluateRetrieval, k_values, ignore_identical_ids=True)",
    f"{_MTEB_2025}: mteb/abstasks/AbsTaskRetrieval.py (ignore_identical_ids = False), "
    "mteb/evaluation/evaluators/RetrievalEvaluator.py",
)
_GENERIC = "Retrieve text based on user query."
_QUERY_INSTRUCTION = _reason(
    "query instruction",
    "the benchmark's per-task instruction (e.g. \"Given a Biology post, retrieve relevant passages that help "
    "answer the post\") in the model's template",
    f'mteb\'s generic retrieval prompt "{_GENERIC}" for every task (the custom task set no prompt), in the '
    "model's template",
    f"{_R2MED}: src/instrcution.py (e5_q, grit; query_instruction), src/eval_bench.py (set per task)",
    f"{_MTEB_2025}: mteb/abstasks/AbsTaskRetrieval.py (abstask_prompt), mteb/models/wrapper.py (get_instruction)",
)


def _document_instruction(paper_side: str, template: str) -> Reason:
    return _reason(
        "document instruction",
        paper_side,
        f"the query's instruction before every document too ({template}): the 2025 wrapper ignored the "
        "prompt type; mteb stopped this in 2026 (commit 338af3394, apply_instruction_to_passages=False)",
        f"{_R2MED}: src/instrcution.py (doc_instruction), src/eval_bench.py",
        f"{_MTEB_2025}: mteb/models/instruct_wrapper.py (InstructWrapper.encode), mteb/models/gritlm_models.py "
        "(gritlm_instruction ignores prompt_type)",
    )


def _max_length(paper_side: str) -> Reason:
    return _reason(
        "max length",
        paper_side,
        "512 tokens on both sides: mteb's wrapper passes no length, so GritLM.encode's default (512) applies",
        f"{_R2MED}: src/eval_bench.py (max_length=2048), src/utils.py (GritModel: query 512, documents 2048)",
        f"{_MTEB_2025}: mteb/models/instruct_wrapper.py",
        "ContextualAI/gritlm: gritlm/gritlm.py (GritLM.encode, max_length=512)",
    )


_E5_TEMPLATE = f'"Instruct: {_GENERIC}\\nQuery: "'


def _mistral_reasons(mteb_precision: str, mteb_file: str) -> tuple[Reason, ...]:
    """e5-mistral and SFR-Embedding-Mistral: the same R2MED class (HighScaleModel) and mteb wrapper; only
    the precision mteb loaded them in differs."""
    return (
        _CUSTOM_TASK,
        _QUERY_INSTRUCTION,
        _document_instruction("none", _E5_TEMPLATE),
        _max_length("2048 tokens on both sides"),
        _reason(
            "precision",
            "fp32 (AutoModel.from_pretrained without a dtype)",
            mteb_precision,
            f"{_R2MED}: src/utils.py (HighScaleModel)",
            f"{_MTEB_2025}: {mteb_file}",
        ),
        _EVALUATION,
    )


_REASONS: dict[str, tuple[Reason, ...]] = {
    "bm25": (
        _reason(
            "BM25 parameters",
            "k1 0.9, b 0.4 (gensim's LuceneBM25Model); the query weighted by the same model (each distinct term "
            "once, saturated), top 100 kept",
            "bm25s's BM25() defaults: k1 1.5, b 0.75, method lucene; a document's score sums its weights once per "
            "query token; top 1000",
            f"{_R2MED}: src/eval_bench_BM25.py (LuceneBM25Model(dictionary, k1=0.9, b=0.4))",
            f"{_MTEB_BM25}: mteb/models/model_implementations/bm25.py (BM25Search.index: bm25s.BM25())",
        ),
        _reason(
            "BM25 tokens",
            "Pyserini's Lucene English analyzer (Lucene stop words, Porter stemmer)",
            "bm25s.tokenize with bm25s's English stop words and PyStemmer's Snowball English stemmer, on "
            '"\\n".join([title, text])',
            f"{_R2MED}: src/eval_bench_BM25.py (analysis.Analyzer(analysis.get_lucene_analyzer()))",
            f"{_MTEB_BM25}: mteb/models/model_implementations/bm25.py (BM25Tokenizer, _ISO3_TO_LANG['eng'])",
        ),
        _reason(
            "task and data",
            "the eight tasks, each loaded from its own folder",
            "mteb's own R2MED tasks (2026), at the revisions this app loads",
            f"{_MTEB_BM25}: mteb/tasks/retrieval/eng/r2_med_retrieval.py",
        ),
    ),
    "e5": _mistral_reasons("fp16 (torch_dtype=torch.float16)", "mteb/models/e5_instruct.py (e5_mistral)"),
    "sfr": _mistral_reasons(
        'the checkpoint\'s own dtype (torch_dtype="auto")', "mteb/models/salesforce_models.py (SFR_Embedding_Mistral)"
    ),
    "grit": (
        _CUSTOM_TASK,
        _QUERY_INSTRUCTION,
        _document_instruction('only the embed marker "<|embed|>\\n"', f'"<|user|>\\n{_GENERIC}\\n<|embed|>\\n"'),
        _max_length("512 tokens for queries, 2048 for documents"),
        _reason(
            "precision",
            'the checkpoint\'s own dtype (torch_dtype="auto")',
            'the same (torch_dtype="auto"): not a cause',
            f"{_R2MED}: src/utils.py (GritModel)",
            f"{_MTEB_2025}: mteb/models/gritlm_models.py (gritlm7b)",
        ),
        _EVALUATION,
    ),
    "bge": (
        _CUSTOM_TASK,
        _reason(
            "query instruction",
            '"Represent this sentence for searching relevant passages: " for every task',
            "the same, from the model's own prompts (a sentence-transformers model, not the instruct wrapper)",
            f"{_R2MED}: src/instrcution.py (query_instruction['bge'])",
            f"{_MTEB_2025}: mteb/models/bge_models.py (model_prompts)",
        ),
        _reason(
            "max length",
            "512 tokens, CLS pooling",
            "512 tokens (the model's max_seq_length), CLS pooling from its configuration",
            f"{_R2MED}: src/eval_bench.py (FlagDRESModel(..., pooling_method='cls', max_length=512))",
            f"{_MTEB_2025}: mteb/models/bge_models.py (max_tokens=512)",
        ),
        _EVALUATION,
    ),
}


@dataclass(frozen=True)
class ProtocolComparison:
    """One model in both sources: per-task numbers (× 100), MTEB − paper, and why they differ."""

    model: str
    paper_key: str
    paper_label: str
    metric: str
    paper: dict[str, float]
    mteb: dict[str, float]
    reasons: tuple[Reason, ...]
    #: What the code leaves unexplained, in words (never empty for a model with a gap).
    not_found: tuple[str, ...]

    @property
    def gaps(self) -> dict[str, float]:
        """MTEB − paper per task, in points (NaN where the paper did not publish the metric)."""
        return {t: self.mteb[t] - self.paper.get(t, math.nan) for t in PUBLISHED_TASKS}

    @property
    def largest_gap(self) -> tuple[str, float]:
        """The task with the largest absolute gap and the gap."""
        task = max(PUBLISHED_TASKS, key=lambda t: -1.0 if math.isnan(self.gaps[t]) else abs(self.gaps[t]))
        return task, self.gaps[task]

    @property
    def equal(self) -> bool:
        """True when every published task value is MTEB's (within the files' rounding); False when none was
        published."""
        return _equal(self.gaps)


def _equal(gaps: dict[str, float]) -> bool:
    known = [g for g in gaps.values() if not math.isnan(g)]
    return bool(known) and all(abs(g) < EQUAL_WITHIN for g in known)


def _not_found(gaps: dict[str, float]) -> tuple[str, ...]:
    known = {t: g for t, g in gaps.items() if not math.isnan(g)}
    if not known:
        return ("The paper did not publish this metric for this model: nothing to compare.",)
    if _equal(gaps):
        return ()
    up = sorted(t for t, g in known.items() if g > EQUAL_WITHIN)
    down = sorted(t for t, g in known.items() if g < -EQUAL_WITHIN)
    said = [
        "Not found in the code: which of these differences moves which task. The differences are the same for "
        "all eight tasks, yet the gaps are not"
        + (f" (higher on MTEB: {', '.join(up)}; lower: {', '.join(down)})" if up and down else "")
        + ". Run the MTEB variant locally on a task and compare it per query to test one."
    ]
    return tuple(said)


def _comparison(model: MtebModel, key: str, metric: str) -> ProtocolComparison:
    paper: dict[str, float] = {}
    for task in PUBLISHED_TASKS:
        value = published_score(key, task, metric)
        if value is not None:
            paper[task] = value * 100
    mteb = {t: r.metrics[metric] * 100 for t, r in model.tasks.items()}
    gaps = {t: mteb[t] - paper.get(t, math.nan) for t in PUBLISHED_TASKS}
    return ProtocolComparison(
        model.model,
        key,
        RETRIEVER_NAMES.get(key, key),
        metric,
        paper,
        mteb,
        _REASONS.get(key, ()),
        _not_found(gaps) if key in _REASONS else ("Not found: nobody has read this model's two code paths yet.",),
    )


def protocol_comparisons(metric: str = "ndcg_at_10") -> tuple[ProtocolComparison, ...]:
    """Every MTEB model the paper also ran, with its per-task numbers, gaps and reasons; largest average
    gap first. ValueError for a metric MTEB does not report (see ``mteb_names``)."""
    name = normalise_metric(metric)
    found = []
    for model in mteb_models():
        key = paper_key_for_mteb(model.model)
        if key is not None and name in next(iter(model.tasks.values())).metrics:
            found.append(_comparison(model, key, name))
        elif key is not None:
            raise ValueError(f"MTEB reports no {metric!r}")

    def average_gap(c: ProtocolComparison) -> float:
        known = [g for g in c.gaps.values() if not math.isnan(g)]
        return -abs(sum(known) / len(known)) if known else 0.0

    return tuple(sorted(found, key=average_gap))


def protocol_table(metric: str = "ndcg_at_10") -> pd.DataFrame:
    """The comparisons as a table (index: the paper's model name): ``paper Avg``, ``MTEB Avg``, ``gap Avg``
    (their difference), the gap (MTEB − paper) per task, the ``largest gap`` and its task; points × 100. The
    paper's average is NaN where it did not publish all eight tasks for the metric."""
    import pandas as pd

    rows = []
    for c in protocol_comparisons(metric):
        task, gap = c.largest_gap
        paper_avg = sum(c.paper.values()) / 8 if len(c.paper) == 8 else math.nan
        rows.append(
            {
                "model": c.paper_label,
                "MTEB model": c.model,
                "paper Avg": paper_avg,
                "MTEB Avg": sum(c.mteb.values()) / 8,
                "gap Avg": sum(c.mteb.values()) / 8 - paper_avg,
                **c.gaps,
                "largest gap": 0.0 if c.equal else gap,
                "on": "" if c.equal else task,
            }
        )
    return pd.DataFrame(rows).set_index("model")
