"""Hard items (``r2med_core.judging.hard``): documents ranked by the time annotators spent on them times
how much they disagreed, for the Adjudication page."""

from __future__ import annotations

import pytest

from r2med_core.judging.annotations import Annotation
from r2med_core.judging.hard import hard_items

from .test_annotations import TASK, label

_CLOCK = iter(range(3600))


def _tick() -> str:
    """A later time at each call: labels are judged in the order written."""
    n = next(_CLOCK)
    return f"2025-01-01T00:{n // 60:02d}:{n % 60:02d}Z"


def _judged(doc: str, *said: tuple[str, str, int | None], **fields: object) -> list[Annotation]:
    """Each (annotator, code, seconds) on ``doc``, in that order."""
    return [
        label(annotator=who, doc_id=doc, failure_type=code, time_ms=None if s is None else s * 1000,
              created_at=_tick(), **fields)
        for who, code, s in said
    ]  # fmt: skip


def test_hard_items_rank_long_judging_time_times_disagreement() -> None:
    labels = [
        *_judged("slow-split", ("alice", "grade_2", 60), ("bob", "grade_0", 40)),  # 50 s × 1 = 50
        *_judged("fast-split", ("alice", "grade_1", 5), ("bob", "grade_0", 5)),  # 5 s × 1 = 5
        *_judged("slow-agreed", ("alice", "grade_1", 300), ("bob", "grade_1", 200)),  # all agree: not hard
        *_judged("three", ("alice", "grade_1", 30), ("bob", "grade_1", 30), ("carol", "grade_2", 90)),  # 30 × 2/3
        *_judged("unsure", ("alice", "unsure", 80), ("bob", "unsure", 40)),  # unsure agrees with nobody: 60 × 1
        *_judged("untimed", ("alice", "grade_2", None), ("bob", "grade_0", None)),  # no time: cannot be ranked
        *_judged("alone", ("alice", "grade_2", 500)),  # one person: no agreement to measure
        *_judged("model", ("alice", "grade_2", 500), ("proposed by judge", "relevant_unjudged", None)),
        *_judged("regraded", ("alice", "grade_0", 999), ("bob", "grade_1", 10), ("alice", "grade_1", 10)),
    ]
    hard = hard_items(labels)
    assert [(h.unit[3], h.seconds, round(h.agreement, 3), round(h.score, 3)) for h in hard] == [
        ("unsure", 60, 0, 60),
        ("slow-split", 50, 0, 50),
        ("three", 30, 0.333, 20),
        ("fast-split", 5, 0, 5),
    ]  # "regraded": alice's latest grade (10 s) agrees with bob: not hard; her first 999 s no longer counts
    assert hard[2].said == ("grade_1", "grade_1", "grade_2")
    assert [h.unit[3] for h in hard_items(labels, limit=2)] == ["unsure", "slow-split"]
    assert hard_items(labels, task="another-task") == []
    assert [h.unit[1] for h in hard] == [TASK] * 4


@pytest.mark.parametrize("codes", [("grade_1", "relevant_unjudged"), ("grade_0", "not_relevant")])
def test_a_grade_is_the_same_grade_whichever_page_wrote_it(codes: tuple[str, str]) -> None:
    assert hard_items(_judged("d", ("alice", codes[0], 50), ("bob", codes[1], 50))) == []
