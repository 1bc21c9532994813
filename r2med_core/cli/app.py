"""``app``: start the Streamlit app of the installed package, so an installed product needs no checkout
and no path to a script.

``r2med_core`` never imports Streamlit (or the app): the router is found by its module spec and run in a
fresh ``python -m streamlit run``, which replaces this process, so Ctrl-C and the exit status are
Streamlit's own.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from r2med_core.cli._common import UsageError

#: The app's router, inside the ``r2med_app`` package.
ROUTER = "streamlit_app.py"

DESCRIPTION = (
    "Start the R2MED Explorer app with Streamlit, from the installed r2med_app package; it opens on the "
    "embedded demo data. Every further argument goes to `streamlit run` unchanged (see `streamlit run --help`), "
    "e.g. --server.port 8600 --server.headless true. Ctrl-C stops it; the exit status is Streamlit's."
)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``app``; what follows it is Streamlit's, so :func:`r2med_core.cli.main` hands it over unparsed."""
    app = commands.add_parser(
        "app",
        help="start the Streamlit app (options after it go to `streamlit run`, e.g. --server.port 8600)",
        description=DESCRIPTION,
        usage="%(prog)s [-h] [STREAMLIT OPTION ...]",
    )
    app.set_defaults(handler=cmd_app, passthrough=[])


def router() -> Path:
    """The installed app's router script, found without importing the app (or Streamlit)."""
    spec = importlib.util.find_spec("r2med_app")
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    script = next((Path(folder) / ROUTER for folder in folders if (Path(folder) / ROUTER).is_file()), None)
    if script is None:
        raise UsageError("the app is not installed (no r2med_app package): install r2med-explorer with its app")
    return script


def cmd_app(args: argparse.Namespace) -> int:
    script = router()
    if importlib.util.find_spec("streamlit") is None:
        raise UsageError("streamlit is not installed: pip install streamlit")
    command = [sys.executable, "-m", "streamlit", "run", str(script), *args.passthrough]
    os.execv(sys.executable, command)
