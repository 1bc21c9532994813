"""The type hints of ``r2med_core`` are checked, not only written: mypy runs over the package with the
configuration in pyproject.toml (``[tool.mypy]``), and CI runs pytest, so this test is how the type
checker runs in CI. mypy's cache is ``.mypy_cache/`` in the checkout (git-ignored)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_r2med_core_passes_mypy() -> None:
    checked = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False
    )
    report = checked.stdout + checked.stderr
    assert checked.returncode == 0, f"mypy found type errors in r2med_core:\n{report}"
    assert "Success: no issues found" in checked.stdout, report
