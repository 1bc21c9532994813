"""How MTEB names what R2MED calls a task and a metric, in one place, for every module that reads or
writes MTEB's files (the transcribed results, the exporter, the importer).

MTEB runs R2MED as eight tasks of its own (``R2MEDBiologyRetrieval`` … ``R2MEDIIYiClinicalRetrieval``,
dataset ``R2MED/<Task>``, split ``test``, main score ``ndcg_at_10``). Its metric keys are mostly ours
(``ndcg_at_10``), with two traps: MTEB scores the top 1,000 and reports cutoffs 1/3/5/10/20/100/1000,
and our ``mrr`` — pytrec_eval's uncut reciprocal rank over the top 100 a run keeps — is MTEB's
``mrr_at_100``, not ``mrr_at_10``. Cutoffs only one side has (our 25 and 50, MTEB's 20 and 1000)
do not map.
"""

from __future__ import annotations

from r2med_core.measures import MEASURES
from r2med_core.tasks import TASKS

__all__ = [
    "MAIN_SCORE",
    "METRIC_FROM_MTEB",
    "METRIC_TO_MTEB",
    "MTEB_CUTOFFS",
    "MTEB_SPLIT",
    "MTEB_SUBSET",
    "MTEB_TASK_NAMES",
    "task_from_mteb",
]

#: The split and subset every R2MED task has in MTEB, and its main score.
MTEB_SPLIT = "test"
MTEB_SUBSET = "default"
MAIN_SCORE = "ndcg_at_10"

#: Our task name → MTEB's (``PMC-Treatment`` → ``R2MEDPMCTreatmentRetrieval``), in the paper's order.
MTEB_TASK_NAMES: dict[str, str] = {name: f"R2MED{name.replace('-', '')}Retrieval" for name in TASKS}

#: The cutoffs MTEB reports (``k_values`` of its retrieval evaluator).
MTEB_CUTOFFS = (1, 3, 5, 10, 20, 100, 1000)

#: Our metric name → MTEB's key for the same number (only those both report), from each measure's record.
METRIC_TO_MTEB: dict[str, str] = {
    measure.metric(k): (measure.mteb if k is None else f"{measure.mteb}_{k}")
    for measure in MEASURES.values()
    if measure.mteb is not None
    for k in ([k for k in measure.cutoffs if k in MTEB_CUTOFFS] if measure.cutoffs else [None])
}
#: MTEB's key → our metric name.
METRIC_FROM_MTEB: dict[str, str] = {mteb: ours for ours, mteb in METRIC_TO_MTEB.items()}


def task_from_mteb(task_name: str) -> str | None:
    """Our task name for an MTEB task name (``R2MEDBiologyRetrieval`` → ``Biology``); None if not R2MED's."""
    for ours, theirs in MTEB_TASK_NAMES.items():
        if theirs == task_name:
            return ours
    return None
