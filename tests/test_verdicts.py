"""Failures in plain words (r2med_core.analysis.verdicts and the landing): the sentences a clinician reads
name what was missed, why and what HyDE changed, with the real ranks; the app opens on them."""

from __future__ import annotations

import pytest

from r2med_core import load_demo, run_system
from r2med_core.analysis.diagnosis import REASONING_GAP, diagnose, oracle_run
from r2med_core.analysis.verdicts import answer_name, named_in, next_failure, summary, verdict, worst_failures
from r2med_core.data import DEMO_TASKS


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("R2MED_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        dataset = load_demo("clinical-case")
        run, oracle = run_system(dataset, "bm25"), oracle_run(dataset)
        hyde = run_system(dataset, "bm25+hyde:demo-writer")
    return dataset, run, oracle, hyde, diagnose(dataset, run, oracle)


def test_the_headline_and_class_sentences_count_what_the_diagnosis_counts(case) -> None:  # type: ignore[no-untyped-def]
    dataset, run, _, _, found = case
    words = summary(found, "BM25", "BM25")
    in_top = sum(
        any((r := run.rank_of(q, d)) is not None and r <= 10 for d in dataset.positives(q))
        for q in dataset.queries
        if dataset.positives(q)
    )
    assert words.headline == f"BM25 finds a relevant document in its top 10 for {in_top} of 12 questions."
    assert in_top == 4 and words.n_failed == 8
    assert len(words.class_lines) == 1 and words.class_lines[0].startswith("8 questions failed for lack of reasoning")


def test_the_addison_case_verdict_names_the_answer_the_ranks_and_what_hyde_changed(case) -> None:  # type: ignore[no-untyped-def]
    dataset, run, oracle, hyde, found = case
    item = next(q for q in found.queries if q.query_id == "3")
    told = verdict(
        dataset, item, run, system_label="BM25", oracle_run=oracle, oracle_label="BM25",
        rewrite_run=hyde, rewrite_label="HyDE (demo-writer)",
    )  # fmt: skip
    gold = sorted(dataset.positives("3"), key=lambda d: run.rank_of("3", d) or 10_000)
    before = [run.rank_of("3", d) for d in gold]
    after = [hyde.rank_of("3", d) for d in gold]
    assert before == [42, 83, None] and after == [3, 1, 2]  # the demo's Addison's crisis case
    assert told.failed and told.failure_class == REASONING_GAP
    assert told.sentences == (
        "Missed: none of the 3 relevant documents is in BM25's top 10 (they are at ranks 42, 83 and not in the "
        "top 100).",
        "Reasoning gap: the answer, Primary adrenal insufficiency, is never named in the question; given the "
        "answer, BM25 finds 3 of 3 in its top 10.",
        "With HyDE (demo-writer) they come back at ranks 3, 1, 2.",
    )


def test_a_found_question_and_a_question_without_a_rewrite(case) -> None:  # type: ignore[no-untyped-def]
    dataset, run, oracle, _, found = case
    ok = next(q for q in found.queries if not q.failed)
    told = verdict(dataset, ok, run, system_label="BM25", oracle_run=oracle, oracle_label="BM25")
    assert not told.failed and told.text.startswith("Found: BM25 has ") and "HyDE" not in told.text
    failed = worst_failures(found, 1)[0]
    told = verdict(dataset, failed, run, system_label="BM25", oracle_run=None, oracle_label="BM25")
    assert told.sentences[0].startswith("Missed:") and len(told.sentences) == 1  # no oracle run: no reason made up


def test_the_worst_failures_come_first_and_next_failure_walks_them(case) -> None:  # type: ignore[no-untyped-def]
    _, _, _, _, found = case
    worst = worst_failures(found, 3)
    ranks = [q.best_gold_rank or 10_000 for q in worst]
    assert ranks == sorted(ranks, reverse=True) and all(q.failed for q in worst)
    failed = [q.query_id for q in found.queries if q.failed]
    assert next_failure(failed, failed[0]) == failed[1]
    assert next_failure(failed, failed[-1]) == failed[0]  # wraps round
    assert next_failure(["7"], "7") is None


def test_answer_names_and_whether_the_question_names_them() -> None:
    assert answer_name("Cardiac sarcoidosis: granulomatous infiltration of the septum") == "Cardiac sarcoidosis"
    assert answer_name("Wilson disease (hepatolenticular degeneration): copper") == "Wilson disease"
    assert answer_name("Giant cell arteritis presenting as fever of unknown origin") == "Giant cell arteritis"
    assert named_in("Known celiac disease, now anaemic", "Celiac disease")
    assert not named_in("Diarrhoea and weight loss with a rash", "Celiac disease")


def test_the_demo_opens_on_its_most_telling_task(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The app's default demo task is the one where BM25 fails most for lack of reasoning."""
    from r2med_app.views.state import DEMO_TASK, View

    monkeypatch.setenv("R2MED_CACHE_DIR", str(tmp_path))
    gaps = {}
    for task in DEMO_TASKS:
        dataset = load_demo(task)
        gaps[task] = diagnose(dataset, run_system(dataset, "bm25"), oracle_run(dataset)).counts()[REASONING_GAP]
    assert View().task == DEMO_TASK == max(gaps, key=gaps.__getitem__)


def test_the_landing_starts_from_the_failures_and_a_card_opens_its_verdict() -> None:
    from tests.test_app import open_app

    at = open_app()  # "/" with no link: the Overview, on the demo's default task
    assert at.title[0].value == "R2MED Explorer"
    texts = [m.value.replace("\\", "") for m in at.markdown]  # as shown: markdown escapes undone
    assert any("BM25 finds a relevant document in its top 10 for 4 of 12 questions." in t for t in texts)
    cards = [b for b in at.button if b.label == "Open this question"]
    assert len(cards) == 3
    cards[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    verdicts = [e.value.replace("\\", "") for e in at.warning if "Missed" in e.value]
    # The real model's HyDE is what the landing reports, harm included, and each card says why it did not rescue.
    outcome = "- HyDE (smollm2-135m) takes nDCG@10 from 0.059 to 0.047: 3 questions helped, 3 hurt"
    assert any(t.startswith(outcome) for t in texts)
    assert verdicts and "Reasoning gap" in verdicts[0]
    assert "With HyDE (smollm2-135m) still none in the top 10 (ranks 19, 37, 59)." in verdicts[0]
    assert "Its passage never names the answer, Systemic lupus erythematosus" in verdicts[0]
    first = at.session_state["view"].q
    at.button(key="w_next_failure").click().run()
    assert at.session_state["view"].q != first
    assert any("Missed" in e.value for e in at.warning)


def test_the_contrast_tells_why_a_wrong_document_beat_the_gold_one(case) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from r2med_core.analysis.explore import contrast

    dataset, run, _, _, found = case
    told = contrast(dataset, run, "3")  # the Addison's crisis case
    assert told is not None
    assert (told.winner, told.winner_rank) == (run.top("3", 1)[0][0], 1) and told.winner not in dataset.positives("3")
    assert (told.loser, told.loser_rank) == ("addison_crisis_hemorrhage_0", 42)  # the best-placed missed gold
    assert len(told.winner_words) > 5 * len(told.loser_words)
    assert {"adrenal", "cortisol", "insufficiency"} <= {w.lower() for w in told.bridge_words}
    assert not {w.lower() for w in told.bridge_words} & {w.lower() for w in told.loser_words}
    first, second = told.sentences()
    assert first.startswith(f"The top wrong document, {told.winner} (rank 1), shares {len(told.winner_words)} words")
    assert "words with the reference answer that the question lacks" in second
    found_ids = [q.query_id for q in found.queries if not q.failed]
    assert contrast(dataset, run, found_ids[0], depth=100) is None  # every gold document is in the top 100
    no_answers = replace(dataset, query_meta={})
    bare = contrast(no_answers, run, "3")
    assert bare is not None and not bare.has_answer and bare.bridge_words == () and len(bare.sentences()) == 1


def test_the_explorer_shows_the_contrast_under_the_verdict() -> None:
    from tests.test_app import open_app

    at = open_app("explorer", task="clinical-case", systems=["bm25"], system="bm25", q="3")
    (box,) = [e for e in at.expander if e.label.startswith("Why did a wrong document beat the gold one?")]
    texts = [m.value.replace("\\", "") for m in box.markdown]
    assert any(t.startswith("The top wrong document, ") and "addison_crisis_hemorrhage_0 (rank 42)" in t for t in texts)


def test_rewrites_are_named_for_a_reader() -> None:
    from r2med_core.systems import rewrite_words

    assert rewrite_words("hyde:demo-writer") == "HyDE (demo-writer)"
    assert rewrite_words("query2doc:gpt-4o") == "query2doc (gpt-4o)"
    assert rewrite_words("lamer:qwen") == "LameR (qwen)"


def test_why_a_rescue_failed_is_read_from_the_rewrites_own_text(case) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from r2med_core.analysis.verdicts import ANSWER_NAMED_LOW, ANSWER_NOT_NAMED, NO_PASSAGE, rescue_failure

    dataset, run, oracle, _, found = case
    texts = {
        "3": "A case of primary adrenal insufficiency with low cortisol.",  # names the answer
        "11": "This looks like a rare disease called Pleurisis Elliot Syndrome.",  # names something else
        "0": "   ",  # an empty reply
    }
    mine = replace(dataset, rewrites={("hyde", "t"): texts})
    assert rescue_failure(mine, "3", ("hyde", "t")) == ANSWER_NAMED_LOW
    assert rescue_failure(mine, "11", ("hyde", "t")) == ANSWER_NOT_NAMED
    assert rescue_failure(mine, "0", ("hyde", "t")) == NO_PASSAGE
    assert rescue_failure(mine, "5", ("hyde", "t")) == NO_PASSAGE  # no row for the query at all
    assert rescue_failure(replace(mine, query_meta={}), "3", ("hyde", "t")) is None  # no answer to read against
    item = next(q for q in found.queries if q.query_id == "11")
    told = verdict(
        mine, item, run, system_label="BM25", oracle_run=oracle, oracle_label="BM25",
        rewrite_run=run, rewrite_label="HyDE (t)", rewrite=("hyde", "t"),
    )  # fmt: skip
    assert told.sentences[-1] == (
        "Its passage never names the answer, Systemic lupus erythematosus: it restated the case or reasoned to "
        "something else."
    )
    item = next(q for q in found.queries if q.query_id == "3")
    told = verdict(
        mine, item, run, system_label="BM25", oracle_run=oracle, oracle_label="BM25",
        rewrite_run=run, rewrite_label="HyDE (t)", rewrite=("hyde", "t"),
    )  # fmt: skip
    assert told.sentences[-1] == (
        "Its passage names the right answer, Primary adrenal insufficiency, but the documents still rank low."
    )


def test_the_real_models_hyde_is_told_with_its_harm_and_why_each_rescue_failed(case) -> None:  # type: ignore[no-untyped-def]
    """On the demo's stored SmolLM2-135M rewrites (data, so deterministic): the task's line counts helped,
    hurt and unchanged questions, and each failed question's verdict says why the passage did not rescue it."""
    from r2med_core.analysis.verdicts import rewrite_summary
    from r2med_core.evaluation import evaluate

    dataset, run, oracle, _, found = case
    real = ("hyde", "smollm2-135m")
    rewritten = run_system(dataset, "bm25+hyde:smollm2-135m")
    told = rewrite_summary(
        dataset, found, evaluate(run, dataset.qrels), evaluate(rewritten, dataset.qrels), rewritten, real,
        "HyDE (smollm2-135m)",
    )  # fmt: skip
    assert told == (
        "HyDE (smollm2-135m) takes nDCG@10 from 0.059 to 0.047: 3 questions helped, 3 hurt, 6 unchanged. "
        "It rescues 2 of the 8 failed questions; of the other 6, its passage never names the answer for 6. "
        "It loses 3 of the 4 questions found without it (no relevant document left in the top 10)."
    )

    def said(qid: str) -> tuple[str, ...]:
        item = next(q for q in found.queries if q.query_id == qid)
        return verdict(
            dataset, item, run, system_label="BM25", oracle_run=oracle, oracle_label="BM25",
            rewrite_run=rewritten, rewrite_label="HyDE (smollm2-135m)", rewrite=real,
        ).sentences  # fmt: skip

    assert said("11")[-2:] == (
        "With HyDE (smollm2-135m) still none in the top 10 (ranks 19, 37, 59).",
        "Its passage never names the answer, Systemic lupus erythematosus: it restated the case or reasoned to "
        "something else.",
    )
    assert said("6")[-1] == "With HyDE (smollm2-135m) they come back at ranks 45, 8, 60."  # a rescue
    assert said("0") == (  # found without the rewrite, lost with it
        "Found: BM25 has 1 of the 3 relevant documents in its top 10.",
        "With HyDE (smollm2-135m) none is left in the top 10 (ranks 16, 64 and not in the top 100): the rewrite "
        "hurt this question.",
    )
    assert said("10") == ("Found: BM25 has 1 of the 3 relevant documents in its top 10.",)  # kept
