"""The README's two Quick start commands, read from README.md so CI runs exactly what a newcomer pastes.

``.ci/run`` runs them as written (``bash -c``) instead of keeping copies of its own: a copy drifts, and
a README whose commands no longer work would then pass CI. The parse is strict — the section, one
``bash`` block, two non-empty lines, the first serving the app and the second running the tests, each
making and activating the ``.venv`` the README promises — so an edit that breaks the shape fails CI
here with a message, and an edit that breaks a command fails CI when it runs.

Usage: ``python3 .ci/readme_commands.py app|tests [README.md]`` prints that command. Standard library
only: CI runs it before any virtual environment exists.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SECTION = "## Run it: quick start"
VENV = "python3 -m venv .venv && . .venv/bin/activate && "


class ReadmeError(ValueError):
    """The README's Quick start is not the two commands CI expects."""


def quick_start(text: str) -> dict[str, str]:
    """``{"app": ..., "tests": ...}``: the Quick start's two commands, checked for their shape."""
    if SECTION not in text:
        raise ReadmeError(f"README.md has no {SECTION!r} section")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```bash\n(.*?)^```", section, re.S | re.M)
    if len(blocks) != 1:
        raise ReadmeError(f"the Quick start has {len(blocks)} bash blocks, expected 1")
    lines = [line.strip() for line in blocks[0].splitlines() if line.strip()]
    if len(lines) != 2:
        raise ReadmeError(f"the Quick start's bash block has {len(lines)} commands, expected 2")
    app, tests = lines
    for name, line in (("first", app), ("second", tests)):
        if not line.startswith(VENV):
            raise ReadmeError(f"the {name} command does not start with {VENV.strip()!r}: {line!r}")
    if "streamlit run" not in app:
        raise ReadmeError(f"the first command does not serve the app with 'streamlit run': {app!r}")
    if "pytest" not in tests:
        raise ReadmeError(f"the second command does not run pytest: {tests!r}")
    return {"app": app, "tests": tests}


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or argv[0] not in ("app", "tests"):
        print("usage: readme_commands.py app|tests [README.md]", file=sys.stderr)
        return 2
    readme = Path(argv[1]) if len(argv) == 2 else Path(__file__).resolve().parent.parent / "README.md"
    try:
        print(quick_start(readme.read_text(encoding="utf-8"))[argv[0]])
    except (OSError, ReadmeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
