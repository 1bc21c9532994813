"""The README is a newcomer's front page: two self-contained commands to paste, links that lead somewhere."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ci_script(name: str) -> ModuleType:
    """A standard-library helper of ``.ci/run``, imported from its file (``.ci`` is no package)."""
    spec = importlib.util.spec_from_file_location(f"ci_{name}", ROOT / ".ci" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


readme_commands = _ci_script("readme_commands")
skipped_tests = _ci_script("skipped_tests")


def test_quick_start_is_two_commands_each_in_its_own_virtual_environment() -> None:
    commands = readme_commands.quick_start((ROOT / "README.md").read_text(encoding="utf-8"))
    app, tests = commands["app"], commands["tests"]
    for line in (app, tests):
        assert line.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements")
    assert app.endswith("streamlit run streamlit_app.py")
    assert tests.endswith("python -m pytest")


def test_ci_runs_both_quick_start_commands_as_the_readme_writes_them() -> None:
    """CI reads the commands from the README (no copy to drift) and runs each with bash as written."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "app_command=$(python3 .ci/readme_commands.py app)" in ci
    assert "test_command=$(python3 .ci/readme_commands.py tests)" in ci
    assert 'bash -c "$app_command"' in ci and 'bash -c "$test_command"' in ci
    assert ".ci/landing_smoke.py" in ci and "/_stcore/health" in ci
    # the project never runs on the system Python: every python after the README's commands is .venv's
    after = ci.split('bash -c "$test_command"', 1)[1]
    assert re.findall(r"^\s*python3? -m", after, re.M) == [], "CI ran the system Python for the project"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace("## Run it: quick start", "## Quick start"), "no '## Run it: quick start' section"),
        (lambda t: re.sub(r"(\npython3[^\n]*pytest[^\n]*\n)", "\\1echo more\n", t), "has 3 commands"),
        (lambda t: re.sub(r"\npython3[^\n]*pytest[^\n]*\n", "\n", t), "has 1 commands"),
        (lambda t: t.replace("activate && pip install -r requirements-dev", "activate"), "second command does not"),
        (lambda t: t.replace("streamlit run streamlit_app.py", "r2med app"), "first command does not serve"),
        (lambda t: t.replace("&& python -m pytest", "&& echo tested"), "second command does not run pytest"),
        (lambda t: t.replace("```bash", "```sh", 1), "0 bash blocks"),
    ],
)  # fmt: skip
def test_an_edit_that_breaks_the_quick_start_fails_ci_with_a_message(edit: Any, message: str, tmp_path: Path) -> None:
    text = edit((ROOT / "README.md").read_text(encoding="utf-8"))
    with pytest.raises(readme_commands.ReadmeError, match=re.escape(message)):
        readme_commands.quick_start(text)
    (tmp_path / "README.md").write_text(text, encoding="utf-8")
    script = ROOT / ".ci" / "readme_commands.py"
    done = subprocess.run(
        [sys.executable, str(script), "tests", str(tmp_path / "README.md")], capture_output=True, text=True
    )
    assert done.returncode == 1 and done.stdout == "" and done.stderr.startswith("error: ") and message in done.stderr


def test_ci_reruns_exactly_the_tests_a_run_skipped_from_its_report(tmp_path: Path) -> None:
    """The ids read from the README run's JUnit report are the skipped tests' node ids — in a class,
    parametrized with a space, a module skipped while collecting — and pytest runs exactly them again."""
    tests = tmp_path / "tests"
    (tests / "sub").mkdir(parents=True)
    (tests / "test_a.py").write_text(
        "import os, pytest\n"
        "gone = pytest.mark.skipif(not os.environ.get('EXTRA'), reason='the extra is not installed')\n"
        "@gone\n@pytest.mark.parametrize('x', [1, 'a b'])\ndef test_p(x): pass\n"
        "class TestK:\n    @gone\n    def test_m(self): pass\n"
        "def test_ran(): pass\n"
    )
    (tests / "sub" / "test_b.py").write_text(
        "import os, pytest\nif not os.environ.get('EXTRA'): pytest.skip('no extra', allow_module_level=True)\n"
        "def test_x(): pass\n"
    )
    report = tmp_path / "report.xml"
    pytest_run = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    env = {k: v for k, v in os.environ.items() if k not in ("EXTRA", "PYTEST_ADDOPTS")}
    first = subprocess.run(
        [*pytest_run, f"--junitxml={report}", "-o", "junit_family=xunit1", "tests"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert first.returncode == 0, first.stdout
    found = skipped_tests.skipped(report.read_text(encoding="utf-8"))
    ids = [node for node, _ in found]
    assert ids == [
        "tests/sub/test_b.py",
        "tests/test_a.py::test_p[1]",
        "tests/test_a.py::test_p[a b]",
        "tests/test_a.py::TestK::test_m",
    ]
    again = subprocess.run([*pytest_run, *ids], cwd=tmp_path, env={**env, "EXTRA": "1"}, capture_output=True, text=True)
    assert again.returncode == 0 and "4 passed" in again.stdout and "skipped" not in again.stdout, again.stdout


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
