"""The README is a newcomer's front page: two self-contained commands to paste, links that lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _quick_start() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Run it: quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the Quick start has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_is_two_commands_each_in_its_own_virtual_environment() -> None:
    app, tests = _quick_start()
    for line in (app, tests):
        assert line.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements")
    assert app.endswith("streamlit run streamlit_app.py")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert tests.endswith(ci)  # CI runs the README's test command


def test_quick_start_warns_that_the_app_command_keeps_running_and_the_install_is_large() -> None:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Run it: quick start", 1)[1]
    intro = section.split("```", 1)[0]
    assert "one line at a time" in intro and "Ctrl-C" in intro and "2 GB" in intro


def test_every_relative_link_and_image_in_the_readme_leads_to_a_file() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z]+:|#", t)]
    assert len(relative) >= 20  # the tour's screenshots and the links into docs/
    broken = [t for t in relative if not (ROOT / t).is_file()]
    assert not broken, f"README.md links to missing files: {broken}"


def test_the_readme_stays_a_front_page_and_leaves_the_manual_to_docs() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert "](docs/index.md)" in text
