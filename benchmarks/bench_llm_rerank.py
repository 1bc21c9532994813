"""Throughput of the LLM rerankers against a local OpenAI-compatible server, and the cost of a cache hit.

Why: an LLM reranking is hundreds to thousands of HTTP requests, so it must keep a server busy
(several requests in flight) and a second look must cost nothing. The script starts the tests'
fake chat-completions server on 127.0.0.1 (each reply waits ``--latency`` seconds, standing in for
the model's time) and reranks a synthetic task list-wise (one request per query, the benchmark's
prompt) and point-wise (one request per query and document) at 1, 4 and 16 concurrent requests,
each in a fresh cache; then again from the warm cache. It prints requests/s next to the ideal
(concurrency / latency), the number of requests the benchmark's own code would make for the same
work (one per query, one at a time), and the load average. It asserts nothing.

    python -m benchmarks.bench_llm_rerank                 # from the repo root
    python -m benchmarks.bench_llm_rerank --queries 64 --k 20 --latency 0.2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from typing import Any

from r2med_core.data import Dataset
from r2med_core.llm.batch import BatchReport
from r2med_core.llm.client import Endpoint
from r2med_core.llm.llm_rerank import Window, estimate, listwise_rerank, pointwise_rerank
from r2med_core.runs import Run
from tests.test_generation import FakeLLM


def synthetic(queries: int, k: int, words: int) -> tuple[Dataset, Run]:
    corpus = {f"d{i}": " ".join(f"term{(i * 7 + j) % 997}" for j in range(words)) for i in range(queries * k)}
    texts = {f"q{i}": f"question {i} about term{i % 997} and term{(i * 3) % 997}" for i in range(queries)}
    rankings = {f"q{i}": [(f"d{i * k + j}", float(k - j)) for j in range(k)] for i in range(queries)}
    return Dataset("synthetic", corpus, texts, {}, "benchmark"), Run("bm25", rankings)


def responder(messages: list[dict[str, str]]) -> str:
    prompt = messages[-1]["content"]
    if "Document:" in prompt:
        return "The document names the query's terms.\nAnswer: relevant"
    shown = [int(n) for n in re.findall(r"^\[(\d+)\]\. ", prompt, re.MULTILINE)]
    return "Reasoning about each passage.\n```json\n" + json.dumps(list(reversed(shown))[:10]) + "\n```"


def timed(job: Any) -> tuple[float, BatchReport]:
    report = BatchReport("", "")
    started = time.perf_counter()
    job(report)
    return time.perf_counter() - started, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=48)
    parser.add_argument("--k", type=int, default=10, help="documents reranked per query")
    parser.add_argument("--words", type=int, default=60, help="words per document")
    parser.add_argument("--latency", type=float, default=0.1, help="seconds the fake server takes per reply")
    parser.add_argument("--concurrency", default="1,4,16")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    dataset, run = synthetic(args.queries, args.k, args.words)
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())} ({os.cpu_count()} CPUs)")
    print(
        f"synthetic task: {args.queries} queries x top {args.k}, {args.words} words per document; "
        f"fake server latency {args.latency * 1000:.0f} ms per reply"
    )
    with FakeLLM() as server, tempfile.TemporaryDirectory() as tmp:
        server.responder = responder
        server.latency = args.latency
        endpoint = Endpoint(server.url, "bench-model")
        os.environ["R2MED_CACHE_DIR"] = os.path.join(tmp, "estimate")
        plan = estimate(run, dataset, endpoint, "listwise", k=args.k)
        print(f"estimate (listwise): {plan.summary()}")
        point = estimate(run, dataset, endpoint, "pointwise", k=args.k)
        print(f"estimate (pointwise): {point.summary()}")
        os.environ["R2MED_CACHE_DIR"] = os.path.join(tmp, "warm-up")  # the client's import and TLS set-up
        listwise_rerank(Run("bm25", {"q0": run.rankings["q0"]}), dataset, endpoint, k=args.k)
        rows = []
        for method in ("listwise", "pointwise"):
            for workers in levels:
                os.environ["R2MED_CACHE_DIR"] = os.path.join(tmp, f"{method}-{workers}")

                def job(report: BatchReport, method: str = method, workers: int = workers) -> None:
                    if method == "listwise":
                        listwise_rerank(run, dataset, endpoint, k=args.k, workers=workers, report_to=report)
                    else:
                        pointwise_rerank(run, dataset, endpoint, k=args.k, workers=workers, report_to=report)

                cold, report = timed(job)
                warm, again = timed(job)
                assert report.sent and not again.sent  # the second pass is served by the cache
                rows.append((method, workers, report.sent, cold, warm, again.from_cache))
        window = Window()
        spans = len(window.spans(args.k))
        print()
        print(
            f"{'method':<10} {'conc.':>5} {'requests':>8} {'cold s':>8} {'req/s':>8} {'ideal':>7} {'ratio':>6} "
            f"{'hit ms/req':>10} {'official requests':>18}"
        )
        for method, workers, sent, cold, warm, hits in rows:
            rate = sent / cold
            ideal = workers / args.latency
            print(
                f"{method:<10} {workers:>5} {sent:>8} {cold:>8.2f} {rate:>8.1f} {ideal:>7.1f} {rate / ideal:>6.2f} "
                f"{warm / hits * 1000:>10.2f} {args.queries:>18}"
            )
        print()
        print(
            f"The benchmark's code makes {args.queries} requests for this work (one per query, one at a time: "
            f"{args.queries * args.latency:.1f} s at this latency); point-wise needs {args.queries * args.k} "
            f"(k per query); a sliding window of {window.size}/{window.step} would need {spans} per query "
            f"at this k ({args.queries * spans} in all; not the benchmark's setting)."
        )
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
