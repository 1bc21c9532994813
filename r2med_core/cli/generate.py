"""``generate``: write a query rewrite (HyDE, query2doc, LaMer …) with an LLM. Its endpoint, sampling and
prompt options live here, beside the one command that talks to an LLM endpoint directly."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from r2med_core.cli._common import (
    INTERRUPTED,
    UsageError,
    add_source,
    finite,
    int_at_least,
    llm_incomplete,
    load,
    tqdm_progress,
)
from r2med_core.llm.batch import RetryPolicy
from r2med_core.llm.client import Endpoint, LocalEndpoint
from r2med_core.llm.generation import (
    GENERATION_METHODS,
    LAMER_PASSAGES,
    check_llm_name,
    generate_rewrites,
    rewrite_file,
    save_rewrites,
)
from r2med_core.llm.prompts import PROMPT_SETS, Prompts, load_examples
from r2med_core.runs import safe_name
from r2med_core.settings import load_settings


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this group's subcommands to ``commands`` (an argparse subparsers action)."""
    ge = commands.add_parser(
        "generate",
        help="write METHOD/LLM/query_with_hydoc.jsonl with an LLM (cached per query; exit 3 if incomplete)",
    )
    ge.add_argument("--method", required=True, choices=GENERATION_METHODS)
    add_source(ge)
    ge.add_argument(
        "--model",
        help="the model name on the server (with --endpoint: default the endpoint's own, else the server's "
        "first), or local:smollm2 / local:PATH for demo-quality offline generation in this process",
    )
    where = ge.add_mutually_exclusive_group()
    where.add_argument("--base-url", help="an OpenAI-compatible server (default: $OPENAI_BASE_URL, else OpenAI)")
    where.add_argument(
        "--endpoint",
        metavar="NAME",
        help="a server by name: 'local' (this machine's `llm-server`) or an operator's NAME=URL in R2MED_LLM_ENDPOINTS",
    )
    ge.add_argument(
        "--llm-name",
        help="the rewrite's name, as in --rewrite METHOD:NAME (default: from --model; NAME-live where the data "
        "already ships a set of that name)",
    )
    ge.add_argument("--output", type=Path, help="a folder (default: rewrites/<task>) or a .jsonl file")
    ge.add_argument("--limit", type=int_at_least(1), help="only the first N queries")
    ge.add_argument("--first-stage", default="bm25", help="lamer: the system whose top 10 go into the prompt")
    ge.add_argument(
        "--prompts",
        choices=PROMPT_SETS,
        default="official",
        help="official: the benchmark's per-task prompts (default); explorer: this project's own wording",
    )
    ge.add_argument(
        "--examples",
        type=Path,
        metavar="FILE",
        help="query2doc few-shot examples (text, or JSON {task: text}); without it query2doc is zero-shot",
    )
    ge.add_argument(
        "--temperature",
        type=finite(0.0, strict=False),
        default=None,
        help="default: the benchmark's (0.7, seed 42; GPT-4o / o1 / o3 / DeepSeek-R1 class 0.8 with top_p 0.8)",
    )
    ge.add_argument(
        "--top-p", type=finite(0.0, strict=True), default=None, help="default: the benchmark's (see --temperature)"
    )
    ge.add_argument("--seed", type=int, default=None, help="the sampling seed sent (default: the benchmark's)")
    ge.add_argument(
        "--model-file",
        type=Path,
        metavar="GGUF",
        help="the served model's file: its name and sha256 go into the set's provenance.json",
    )
    ge.add_argument(
        "--note",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a fact kept in the set's provenance.json (e.g. server=llama-cpp-python 0.3.36); repeatable",
    )
    ge.add_argument(
        "--max-tokens",
        type=int_at_least(1),
        default=None,
        help="default: the benchmark's (10240; none sent to the GPT-4o / o1 / o3 / DeepSeek-R1 class)",
    )
    ge.add_argument(
        "--timeout", type=finite(0.0, strict=True), default=300.0, help="seconds one request may take in all"
    )
    ge.add_argument(
        "--max-retries", type=int_at_least(0), default=5, help="retries of rate-limited or failed requests"
    )
    ge.add_argument(
        "--workers",
        type=int_at_least(1),
        default=None,
        help="requests in flight at once (default: R2MED_LLM_CONCURRENCY, else 1; llama-cpp-python's server "
        "answers one at a time)",
    )
    ge.set_defaults(handler=cmd_generate)


def _endpoint(args: argparse.Namespace) -> Endpoint | LocalEndpoint:
    if args.endpoint:
        from r2med_core.llm.endpoints import operator_llm, resolve_named

        settings = load_settings()
        resolved = resolve_named(
            args.endpoint,
            args.model or "",
            operator_llm(settings),
            settings,
            temperature=args.temperature,
            top_p=args.top_p,
            max_tokens=args.max_tokens,
            timeout=args.timeout,
        )
        if resolved.endpoint is None:
            raise UsageError(resolved.note or f"no LLM endpoint {args.endpoint!r}")
        return resolved.endpoint
    if not args.model:
        raise UsageError("give --model (or --endpoint NAME, whose server names its model)")
    if args.model.startswith("local:"):
        return LocalEndpoint(
            args.model[len("local:") :] or "smollm2", args.temperature or 0.0, min(args.max_tokens or 256, 256)
        )
    endpoint = Endpoint.from_env(
        args.model,
        base_url=args.base_url,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        max_tokens=args.max_tokens,
        timeout=args.timeout,
    )
    if endpoint.api_key is None and endpoint.base_url is None:
        raise UsageError("no API key: set OPENAI_API_KEY, or pass --base-url for a server that needs no key")
    return endpoint


def _prompts(args: argparse.Namespace) -> Prompts:
    """The prompt set; query2doc's few-shot examples from ``--examples FILE`` (official prompts only)."""
    if args.examples is None:
        return Prompts(args.prompts)
    if args.prompts != "official":
        raise UsageError("--examples goes with the official prompts (--prompts official)")
    if not args.examples.is_file():
        raise UsageError(f"{args.examples}: examples file not found")
    data = args.examples.read_bytes()
    return Prompts(args.prompts, load_examples(data, str(args.examples), load_settings().upload_max_bytes))


def _notes(args: argparse.Namespace) -> dict[str, str]:
    """``--note KEY=VALUE`` facts for the provenance record; the model file must exist."""
    if args.model_file is not None and not args.model_file.is_file():
        raise UsageError(f"{args.model_file}: model file not found")
    notes = {}
    for note in args.note:
        key, sep, value = note.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--note {note!r} must be KEY=VALUE")
        notes[key.strip()] = value.strip()
    return notes


def cmd_generate(args: argparse.Namespace) -> int:
    from r2med_core.llm.generation import lamer_passages, new_set_name
    from r2med_core.llm.provenance import write_provenance
    from r2med_core.systems import run_system

    notes = _notes(args)
    endpoint = _endpoint(args)
    if args.llm_name:
        check_llm_name(args.llm_name)
    prompts = _prompts(args)
    progress, close = tqdm_progress()
    try:
        dataset = load(args, progress)
        llm_name = args.llm_name or new_set_name(dataset, args.method, endpoint)
        first_stage = run_system(dataset, args.first_stage, k=LAMER_PASSAGES) if args.method == "lamer" else None
        wanted = list(dataset.queries)[: args.limit] if args.limit else None
        print(f"prompts: {prompts.describe(args.method, dataset.name, dataset.family)}")
        if isinstance(endpoint, Endpoint):
            print(f"server: {endpoint.url}, model {endpoint.model}")
            print("sampling: " + ", ".join(f"{k}={v}" for k, v in endpoint.sampling().items()))
        result = generate_rewrites(
            dataset,
            args.method,
            endpoint,
            llm_name=llm_name,
            first_stage=first_stage,
            progress=progress,
            retry=RetryPolicy(max_retries=args.max_retries),
            workers=args.workers or load_settings().llm_concurrency,
            query_ids=wanted,
            prompts=prompts,
        )
    except KeyboardInterrupt:
        print("error: interrupted; run the same command again to resume (finished queries are cached)", file=sys.stderr)
        return INTERRUPTED
    finally:
        close()
    problem = result.problem()
    if problem:
        return llm_incomplete(result.summary(), problem)
    print(result.summary())
    target = args.output or Path("rewrites") / safe_name(dataset.name)
    path = target if target.suffix == ".jsonl" else rewrite_file(target, args.method, llm_name)
    save_rewrites(result.results, dataset, path)
    passages = {q: lamer_passages(dataset, first_stage, q) for q in result.results} if first_stage else None
    write_provenance(
        path.parent,
        dataset,
        args.method,
        llm_name,
        endpoint,
        result.results,
        result.usage,
        prompts,
        model_file=args.model_file,
        notes=notes,
        passages=passages,
    )
    print(f"wrote {path} ({len(result.results)} queries); evaluate with --rewrite {args.method}:{llm_name}")
    return 0
