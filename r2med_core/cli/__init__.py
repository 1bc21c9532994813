"""``python -m r2med_core``: evaluate systems, score imported runs, validate and download data.

A contract other tools rely on: bad input prints ``error: …`` naming the file and line and exits
non-zero — never a traceback.

One module per command group (``evaluate``: eval, evaluate-run, compare-results; ``data``: validate,
download; ``generate``; ``llm``: llm-server; ``cache``: encode, export, import; ``sweep``;
``judgements``: diagnose, pool, qrels; ``mteb``: mteb-export, mteb-results; ``app``: the Streamlit app)
holds its subcommands' options right beside their handlers, so a command is read and changed in one place;
:func:`build_parser` only asks each group in :data:`GROUPS` to add its own. What several groups share
(dataset options, argument types, progress bars, exit statuses) is in ``_common``. Commands import what
they run (systems, evaluation, sweep, rerank pull in scipy, pandas, nltk …) inside their function, so
``--help`` and a usage error answer at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from r2med_core.cli import app, cache, data, evaluate, generate, judgements, llm, mteb, sweep
from r2med_core.cli._common import DATA_ERROR, USAGE_ERROR, UsageError, llm_incomplete
from r2med_core.data import DataError
from r2med_core.hub import DownloadError, ModelUnavailable
from r2med_core.llm.generation import GenerationError
from r2med_core.llm.llm_rerank import RerankIncomplete

#: The command groups, in the order ``--help`` lists their commands.
GROUPS = (evaluate, mteb, generate, llm, data, cache, sweep, judgements, app)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m r2med_core", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(commands)
    return parser


#: Errors of modules the commands import lazily: (module, class). A command can only raise one
#: once its module is imported, so :func:`_lazy_usage_error` never imports anything itself.
_LAZY_USAGE_ERRORS = (("r2med_core.systems", "SpecError"), ("r2med_core.retrieval.rerank", "RerankerUnavailable"))


def _lazy_usage_error(err: Exception) -> bool:
    for module_name, class_name in _LAZY_USAGE_ERRORS:
        error_class = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(error_class, type) and isinstance(err, error_class):
            return True
    return False


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line; a command with a ``passthrough`` default (``app``) gets what it does not know
    there, unparsed, and any other command rejects it as argparse would."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not hasattr(args, "passthrough"):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if rest:
        args.passthrough = rest
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    try:
        return args.handler(args)
    except DataError as err:
        for problem in err.problems[:50]:
            print(f"error: {problem}", file=sys.stderr)
        return DATA_ERROR
    except RerankIncomplete as err:  # an LLM reranking (``…>llmrerank:…``) its endpoint did not let finish
        return llm_incomplete(err.report.summary(), str(err))
    except (DownloadError, UsageError, KeyError, OSError, GenerationError, ModelUnavailable) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"error: {message}", file=sys.stderr)
        return USAGE_ERROR
    except Exception as err:
        if _lazy_usage_error(err):
            print(f"error: {err}", file=sys.stderr)
            return USAGE_ERROR
        # a bug, not bad input: still one line, never a traceback
        print(f"error: unexpected {type(err).__name__}: {' '.join(str(err).split())[:300]}", file=sys.stderr)
        return DATA_ERROR
