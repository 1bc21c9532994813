"""The package as a user installs it: a wheel built from the checkout carries every subpackage and its
data, and works outside the checkout (an editable install or the checkout on sys.path would hide a
package the wheel leaves out, as it once left out ``r2med_core.kinds``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the tracked files (a ``build/`` folder left in the checkout by an
    earlier build would otherwise slip its packages into the wheel)."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        check=True,
        cwd=out,
        capture_output=True,
        timeout=600,
    )
    (built,) = out.glob("r2med_explorer-*.whl")
    return built


def test_the_wheel_carries_every_subpackage_and_the_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = sorted(
        str(p.parent.relative_to(ROOT)) for p in (ROOT / "r2med_core").rglob("__init__.py") if "demo" not in p.parts
    )
    assert packages and all(f"{package}/__init__.py" in names for package in packages), packages
    assert "r2med_core/analysis/published_results.json" in names
    assert any(n.startswith("r2med_core/demo/clinical-case/") and n.endswith("corpus.jsonl") for n in names)


def test_the_installed_wheel_imports_and_runs_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    """A fresh virtual environment (its dependencies seen from this interpreter's site-packages) with only
    the wheel installed: every subpackage imports and the CLI answers, from a folder outside the checkout."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300, cwd=tmp_path)
    code = (
        "import importlib, pkgutil, r2med_core, pathlib\n"
        "assert 'site-packages' in r2med_core.__file__, r2med_core.__file__\n"
        "for m in pkgutil.walk_packages(r2med_core.__path__, 'r2med_core.'):\n"
        "    if not m.name.endswith('__main__'):  # that one runs the CLI\n"
        "        importlib.import_module(m.name)\n"
        "from r2med_core import load_demo, run_system\n"
        "print(len(run_system(load_demo('clinical-case'), 'bm25').rankings))\n"
    )
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.split()[-1] == "12", done.stderr[-2000:]
    cli = subprocess.run(
        [str(env_dir / "bin" / "r2med"), "--help"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert cli.returncode == 0 and "usage" in cli.stdout.lower(), cli.stderr[-2000:]
