"""The manual in docs/ is what a newcomer reads after the README: it must build, and must not go stale.

`mkdocs build --strict` fails on a page missing from the nav, a broken link or a missing anchor; the
reference pages are checked against what they document (every CLI command and option, every public name).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_the_manual_builds_with_no_broken_link_or_nav_entry(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "guide" / "explorer" / "index.html").is_file()


def _help(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "r2med_core", *args, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _sections(path: Path) -> dict[str, str]:
    """A page's ``## heading`` sections by heading."""
    parts = re.split(r"^## (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_command_and_each_of_its_options_is_in_the_cli_reference() -> None:
    commands = re.search(r"\{([a-z,-]+)\}", _help()).group(1).split(",")  # type: ignore[union-attr]
    sections = _sections(DOCS / "reference" / "cli.md")
    assert commands
    for command in commands:
        assert command in sections, f"docs/reference/cli.md has no '## {command}' section"
        options = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", _help(command))) - {"--help"}
        missing = sorted(o for o in options if o not in sections[command])
        assert not missing, f"docs/reference/cli.md's '{command}' section does not mention {missing}"


def test_every_public_name_of_r2med_core_is_in_the_api_reference() -> None:
    import r2med_core

    text = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    missing = [name for name in r2med_core.__all__ if not re.search(rf"`{re.escape(name)}\b", text)]
    assert not missing, f"docs/reference/api.md does not document {missing}"
