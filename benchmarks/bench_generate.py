"""The product's generation throughput against a bare client of the same server (issue 38).

Why: generating rewrites is minutes of an LLM's time, and the product adds to each request what a bare
client does not (streaming for progress and Cancel, the context fit, the reply cache, the recorded
set). This measures what that costs, as whole processes side by side: ours is the CLI's
``generate`` (the product's ``generate_rewrites``, the path the app's Generate takes) in a fresh
cache; the reference is a bare ``openai`` client in its own process sending the same official
prompts, one after the other, streamed as the product streams them (``stream=True`` with usage: the
product needs the tokens as they come for progress and Cancel, and a streamed reply costs a loaded
2-core machine more than a whole one, so comparing against a whole one measured streaming, not the
product; ``--bare-whole`` measures that difference). Both talk to one local llama.cpp server started here
(``r2med_core.llm.local_server``, SmolLM2-135M; temperature 0, so both get the same replies) and run
interleaved; the ratio printed is the reference's wall time over ours (throughput, ours ÷ bare: the goal
is ≥ 0.9), next to the load averages the runs started at.

    python -m benchmarks.bench_generate                     # 12 clinical-case queries, 128 tokens each
    python -m benchmarks.bench_generate --queries 6 --max-tokens 256 --pairs 5
    python -m benchmarks.bench_generate --bare-whole          # the reference without streaming
    python -m benchmarks.bench_generate --threads 1           # a loaded machine: one server thread
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from benchmarks.procs import Pairs, interleaved

ROOT = Path(__file__).resolve().parent.parent
TASK = "clinical-case"


def bare(url: str, model: str, max_tokens: int, queries: int, whole: bool = False) -> None:
    """The reference: the official prompts sent by a plain openai client, one after the other,
    streamed (``whole``: not)."""
    import openai

    from r2med_core import load_demo
    from r2med_core.llm.prompts import build_messages

    dataset = load_demo(TASK)
    client = openai.OpenAI(base_url=url, api_key="no-key", max_retries=0, timeout=600)
    tokens = 0
    for qid in list(dataset.queries)[:queries]:
        messages = build_messages("hyde", dataset.queries[qid], dataset.family, task=dataset.name)
        if whole:
            reply = client.chat.completions.create(
                model=model,
                messages=messages,
                temperature=0.0,
                max_tokens=max_tokens,  # type: ignore[arg-type]
            )
            tokens += reply.usage.completion_tokens if reply.usage else 0
            continue
        stream = client.chat.completions.create(
            model=model,
            messages=messages,
            temperature=0.0,
            max_tokens=max_tokens,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            tokens += chunk.usage.completion_tokens if chunk.usage else 0
    print(json.dumps({"completion_tokens": tokens}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--bare-whole", action="store_true", help="the reference without streaming")
    parser.add_argument(
        "--threads",
        type=int,
        default=2,
        help="the server's CPU threads (1 on a loaded machine: two threads wait on "
        "each other whenever one is descheduled)",
    )
    parser.add_argument("--bare", nargs=2, metavar=("URL", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        bare(args.bare[0], args.bare[1], args.max_tokens, args.queries, args.bare_whole)
        return

    from r2med_core.llm import local_server

    server = local_server.start(threads=args.threads)
    try:
        print(f"server: {server.base_url}, {server.model}, llama-cpp-python {local_server.llama_cpp_version()}")

        def ours() -> tuple[list[str], dict[str, str]]:
            cache = tempfile.mkdtemp(prefix="bench-generate-")
            command = [
                sys.executable, "-m", "r2med_core", "generate", "--method", "hyde", "--demo", TASK,
                "--base-url", server.base_url, "--model", server.model, "--temperature", "0",
                "--max-tokens", str(args.max_tokens), "--limit", str(args.queries), "--llm-name", "bench",
                "--output", str(Path(cache) / "out"),
            ]  # fmt: skip
            return command, {**os.environ, "R2MED_CACHE_DIR": cache}

        reference = [
            sys.executable, "-m", "benchmarks.bench_generate", "--bare", server.base_url, server.model,
            "--max-tokens", str(args.max_tokens), "--queries", str(args.queries),
            *(["--bare-whole"] if args.bare_whole else []),
        ]  # fmt: skip
        pairs: Pairs = interleaved(ours, reference, n=args.pairs, cwd=str(ROOT))
    finally:
        server.stop()
    low, high = pairs.loads
    ratio = 1.0 / pairs.ratio("wall")
    print(
        f"generate {args.queries} HyDE rewrites ({TASK}, ≤ {args.max_tokens} tokens each, server threads "
        f"{args.threads}), load {low:.1f}–{high:.1f}:"
    )
    print(f"  ours (r2med generate)   {pairs.median('a', 'wall'):8.1f} s wall (median of {args.pairs})")
    mode = "whole replies" if args.bare_whole else "streamed, as ours"
    print(f"  bare openai client      {pairs.median('b', 'wall'):8.1f} s wall ({mode})")
    print(f"  throughput, ours ÷ bare {ratio:8.2f}x   goal ≥ 0.90  {'met' if ratio >= 0.9 else 'NOT met'}")


if __name__ == "__main__":
    main()
