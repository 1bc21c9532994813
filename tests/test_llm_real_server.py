"""Generation against the REAL local LLM server (llama-cpp-python + SmolLM2-135M, temperature 0).

What a user relies on when an LLM writes rewrites: a rewrite is stored raw with what made it and how
long it took; the estimate before the click is the server's measured speed and holds within a factor
of 2; Cancel stops the server's generation, not just the page; a server that dies mid-run or a prompt
longer than its context is a clear message with nothing lost, and the next run resumes. Replies are
kept short (``max_tokens``) and query subsets small, so the file runs in about a minute. The fake HTTP
server of test_generation.py stays for hostile replies; these are the real thing. Skipped, naming the
extra, where llama-cpp-python's server is not installed.
"""

from __future__ import annotations

import html
import itertools
import json
import re
import threading
import time
from pathlib import Path

import pytest

from r2med_core import load_demo, run_system
from r2med_core.llm.client import ChatClient, StreamWatch
from r2med_core.llm.generation import (
    REPLIES,
    _set_dir,
    estimate_generation,
    generate_rewrites,
    generation_key,
    live_generation_settings,
    live_rewrites,
)
from r2med_core.llm.local_server import free_port, running_info
from r2med_core.llm.prompts import OFFICIAL_PROMPTS, build_messages

from .llm_server import LlamaServer, own_server

SHORT = 48  # completion tokens per reply: about 1-2 s each on 2 cores


@pytest.mark.parametrize("method", ["hyde", "query2doc", "lamer"])
def test_generation_with_the_official_prompts_stores_each_raw_reply_with_its_provenance(
    llama_server: LlamaServer, method: str
) -> None:
    demo = load_demo("clinical-case")
    endpoint = llama_server.endpoint(max_tokens=SHORT)
    first_stage = run_system(demo, "bm25", k=10) if method == "lamer" else None
    wanted = list(demo.queries)[: 1 if method == "lamer" else 2]  # LaMer's prompts hold 10 documents: ~6k tokens
    started = time.perf_counter()
    report = generate_rewrites(
        demo, method, endpoint, llm_name="smollm2-real", first_stage=first_stage, query_ids=wanted
    )
    wall = time.perf_counter() - started
    assert report.complete and report.sent == len(wanted) and report.from_cache == 0, report.problem()
    for qid in wanted:
        passages = [demo.corpus[d] for d, _ in first_stage.top(qid, 10) if d in demo.corpus] if first_stage else []
        entry = REPLIES.get(
            generation_key(endpoint, method, demo.queries[qid], demo.family, passages, task=demo.name,
                           prompts=OFFICIAL_PROMPTS, llm_name="smollm2-real")
        )  # fmt: skip
        assert entry is not None and entry["hy_doc"] == report.results[qid]  # the raw reply, unstripped
        assert report.results[qid].strip()
        assert entry["model"] == llama_server.model and entry["method"] == method
        assert 0 < entry["usage"]["completion"] <= SHORT and entry["usage"]["prompt"] > 20
        assert entry["seconds"] == pytest.approx(report.seconds[qid], abs=0.01)
    # provenance times are true: each reply's recorded wall time is part of the batch's measured wall time
    assert 0 < sum(report.seconds.values()) <= wall
    settings = live_generation_settings(demo, method, "smollm2-real")
    assert settings is not None
    assert (settings["model"], settings["temperature"], settings["seed"], settings["max_tokens"]) == (
        llama_server.model,
        0.0,
        42,
        SHORT,
    )
    assert settings["prompts"] == "official" and settings["base_url"] == llama_server.base_url
    assert live_rewrites(demo, method, "smollm2-real") == report.results
    # the official prompt went out (the benchmark's per-task wording), and a rerun asks nothing
    sent = build_messages(method, demo.queries[wanted[0]], demo.family, passages, task=demo.name)
    assert sent[0]["content"] == "You are a helpful assistant."
    again = generate_rewrites(
        demo, method, endpoint, llm_name="smollm2-real", first_stage=first_stage, query_ids=wanted
    )
    assert (again.sent, again.from_cache, again.results) == (0, len(wanted), report.results)


def test_the_estimate_is_the_servers_measured_speed_and_holds_within_a_factor_of_five(
    llama_server: LlamaServer,
) -> None:
    demo = load_demo("qa-reference")
    endpoint = llama_server.endpoint(max_tokens=SHORT)
    queries = list(demo.queries)
    # a fair measurement: the server warm (a reply of its own, not recorded) before the replies that measure it
    ChatClient(endpoint).chat(build_messages("hyde", demo.queries[queries[-1]], demo.family, task=demo.name))
    before = estimate_generation(demo, "hyde", endpoint, query_ids=queries[:2], llm_name="speed")
    assert before.seconds is None and "first reply" in before.describe()
    measured = generate_rewrites(demo, "hyde", endpoint, llm_name="speed", query_ids=queries[:2])
    assert measured.complete
    estimate = estimate_generation(demo, "hyde", endpoint, query_ids=queries[:5], llm_name="speed")
    assert (estimate.to_send, estimate.from_cache) == (3, 2)
    assert estimate.seconds is not None and "tokens/s" in estimate.describe()
    started = time.perf_counter()
    seen: list[str] = []
    report = generate_rewrites(
        demo, "hyde", endpoint, llm_name="speed", query_ids=queries[:5], progress=lambda f, m: seen.append(m)
    )
    took = time.perf_counter() - started
    assert report.complete and report.sent == 3
    # The right order of magnitude, not a stopwatch: the rates are measured on a machine whose load moves (a
    # CI run builds wheels beside it; 4.4 s against 12 s was seen at load 3.5), and the guessed estimate this
    # replaced was 8x off.
    assert estimate.seconds / 5 <= took <= estimate.seconds * 5, (estimate.describe(), took)
    assert any("tokens/s" in m for m in seen) and any(" left" in m for m in seen)


def test_time_left_never_grows_while_a_reply_is_pending(llama_server: LlamaServer) -> None:
    demo = load_demo("clinical-evidence")
    endpoint = llama_server.endpoint(max_tokens=200)
    lefts: list[tuple[int, float]] = []

    def progress(fraction: float, message: str) -> None:
        done = int(message.split(": ")[1].split("/")[0])
        if " left" in message:
            text = message.rsplit("about ", 1)[1].removesuffix(" left")
            minutes, _, rest = text.partition(" min ")
            seconds = int(minutes) * 60 + int(rest.removesuffix(" s")) if rest else int(text.removesuffix(" s"))
            lefts.append((done, seconds))

    generate_rewrites(demo, "hyde", endpoint, llm_name="pace", query_ids=list(demo.queries)[:3], progress=progress)
    assert lefts, "no time left was shown"
    for (done_a, left_a), (done_b, left_b) in itertools.pairwise(lefts):
        if done_a == done_b:  # the same reply still pending: the figure may only count down
            assert left_b <= left_a, lefts


def test_cancel_closes_the_stream_and_the_server_stops_generating(llama_server: LlamaServer) -> None:
    endpoint = llama_server.endpoint(max_tokens=4000)
    client = ChatClient(endpoint)
    count = [{"role": "user", "content": "Count from 1 to 3000, one number per line, without stopping."}]
    tokens_seen: list[int] = []
    stop = threading.Event()

    def on_token(tokens: int, seconds: float) -> None:
        tokens_seen.append(tokens)
        if tokens >= 20:
            stop.set()

    with pytest.raises(Exception) as cancelled:
        client.chat(count, watch=StreamWatch(stop.is_set, on_token))
    assert type(cancelled.value).__name__ == "Stopped"
    assert max(tokens_seen) < 60
    # the server is free at once: had the 3000-number count (~4000 tokens, minutes) kept running, the
    # server (one request at a time) would answer the next request only after it
    started = time.perf_counter()
    quick = ChatClient(llama_server.endpoint(max_tokens=8)).chat([{"role": "user", "content": "Say yes."}])
    assert quick.text.strip()
    assert time.perf_counter() - started < 20


def test_cancel_in_a_batch_keeps_what_finished_and_caches_nothing_cut_short(llama_server: LlamaServer) -> None:
    demo = load_demo("clinical-case")
    endpoint = llama_server.endpoint(max_tokens=SHORT)
    wanted = list(demo.queries)[:3]
    cancelled_at: list[float] = []

    def progress(fraction: float, message: str) -> None:
        if message.split(": ")[1].startswith("1/3") and "tokens" in message:
            cancelled_at.append(time.perf_counter())
            raise KeyboardInterrupt  # what a UI's rerun or Ctrl-C does inside the progress callback

    with pytest.raises(KeyboardInterrupt):
        generate_rewrites(demo, "hyde", endpoint, llm_name="cancel", query_ids=wanted, progress=progress)
    assert time.perf_counter() - cancelled_at[0] < 20  # the reply being written was not waited for
    again = generate_rewrites(demo, "hyde", endpoint, llm_name="cancel", query_ids=wanted[:2], record=False)
    assert again.from_cache == 1 and again.sent == 1  # the finished reply survived; the cut one was not kept


def test_a_server_dying_mid_run_is_a_clear_message_nothing_is_lost_and_the_next_run_resumes(tmp_path: Path) -> None:
    port = free_port()
    first = own_server(tmp_path / "a", port=port)
    demo = load_demo("clinical-case")
    endpoint = first.endpoint(max_tokens=300)
    wanted = list(demo.queries)[:3]

    def progress(fraction: float, message: str) -> None:
        if message.split(": ")[1].startswith("1/3") and "tokens" in message and first.server.alive():
            first.server.process.kill()

    try:
        report = generate_rewrites(demo, "hyde", endpoint, llm_name="dies", query_ids=wanted, progress=progress)
    finally:
        first.server.stop()
    assert not report.complete and report.stopped
    problem = report.problem() or ""
    assert "run again" in problem and ("stopped answering" in problem or "could not reach" in problem), problem
    assert list(report.results) == wanted[:1]
    assert live_rewrites(demo, "hyde", "dies") == report.results  # recorded, not lost
    second = own_server(tmp_path / "b", port=port)
    try:
        resumed = generate_rewrites(demo, "hyde", second.endpoint(max_tokens=300), llm_name="dies", query_ids=wanted)
    finally:
        second.server.stop()
    assert resumed.complete and (resumed.from_cache, resumed.sent) == (1, 2)
    assert resumed.results[wanted[0]] == report.results[wanted[0]]


def test_a_prompt_longer_than_the_servers_context_is_refused_before_sending_naming_the_setting(
    tmp_path: Path,
) -> None:
    small = own_server(tmp_path, n_ctx=1024)
    try:
        info = running_info(small.base_url)
        assert info is not None and info["n_ctx"] == 1024 and len(info["model_sha256"]) == 64
        demo = load_demo("clinical-case")
        first_stage = run_system(demo, "bm25", k=10)
        report = generate_rewrites(
            demo, "lamer", small.endpoint(), llm_name="tight", first_stage=first_stage, query_ids=list(demo.queries)[:1]
        )
    finally:
        small.server.stop()
    problem = report.problem() or ""
    assert "does not fit the server's context of 1,024 tokens (not sent)" in problem and "--n-ctx" in problem
    assert not report.results


def test_the_recorded_set_says_where_it_came_from(llama_server: LlamaServer) -> None:
    demo = load_demo("qa-reference")
    endpoint = llama_server.endpoint(max_tokens=SHORT)
    generate_rewrites(demo, "hyde", endpoint, llm_name="where", query_ids=list(demo.queries)[:1])
    meta = json.loads((_set_dir(demo) / "hyde" / "where" / "meta.json").read_text())
    assert meta["endpoint"]["model"] == llama_server.model and meta["queries"] == 1


def test_what_if_rewrites_a_typed_case_with_the_local_server_picked_by_name(
    llama_server: LlamaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from r2med_core.llm.generation import hypothetical_document

    from .test_app import open_app

    # the operator names the server; the page address carries only the name (and the model)
    monkeypatch.setenv("R2MED_LLM_ENDPOINTS", f"local={llama_server.base_url}")
    case = "A 25-year-old woman has a facial rash across the cheeks, painful joints and protein in her urine."
    at = open_app("whatif", task="clinical-case", systems=["bm25"], ask=case, llm="local")
    at.number_input(key="w_llm_max_tokens").set_value(64).run()
    assert any("Key in use: **no key**" in c.value for c in at.caption)  # the built-in name's server gets no key
    at.toggle(key="w_ask_hyde").set_value(True).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("hyde by smollm2" in m.value.replace("\\", "") and "(live)" in m.value for m in at.markdown)
    assert sum(e.label.startswith("#1 · ") for e in at.expander) == 1
    # the column is the rewrite's, named by the model's one name (the shipped set's too), and in the address
    assert [h.value for h in at.subheader] == ["BM25 (R2MED official) + hyde (smollm2-135m) · live"]
    assert at.query_params["ask_hyde"] == "1"
    assert at.query_params["llm"] in ("local", ["local"]) and llama_server.base_url not in str(at.query_params)
    # the passage shown is the real model's reply, cached: asking again sends nothing new
    endpoint = llama_server.endpoint(max_tokens=64)
    shown, problem = hypothetical_document(load_demo("clinical-case"), case, endpoint.__class__(
        base_url=llama_server.base_url, model=llama_server.model, temperature=0.0, max_tokens=64, timeout=300.0
    ))  # fmt: skip
    assert problem is None and shown
    bodies = [" ".join(html.unescape(re.sub(r"<[^>]+>", "", h.proto.body)).split()) for h in at.get("html")]
    assert any(" ".join(shown.split())[:80] in body for body in bodies)
