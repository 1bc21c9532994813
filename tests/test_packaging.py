"""The product as a user installs it: a wheel built from the checkout carries every subpackage of
``r2med_core`` and the app ``r2med_app`` with their data, and works outside the checkout — the library
imports, the CLI answers, and ``r2med app`` serves the app (an editable install or the checkout on
sys.path would hide a package the wheel leaves out, as it once left out ``r2med_core.kinds``)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import site
import socket
import subprocess
import sys
import time
import urllib.request
import venv
import zipfile
from collections.abc import Iterator
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


def _packages(root: str) -> list[str]:
    return sorted(str(p.parent.relative_to(ROOT)) for p in (ROOT / root).rglob("__init__.py") if "demo" not in p.parts)


def test_the_wheel_carries_every_subpackage_and_the_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = _packages("r2med_core") + _packages("r2med_app")
    assert "r2med_app/views/pages" in packages and "r2med_core/cli" in packages, packages
    assert all(f"{package}/__init__.py" in names for package in packages), sorted(set(packages) - names)
    assert "r2med_core/analysis/published_results.json" in names
    assert any(n.startswith("r2med_core/demo/clinical-case/") and n.endswith("corpus.jsonl") for n in names)
    # The theme and usage-stats settings travel as the router's script-level .streamlit/config.toml.
    app_files = (
        "streamlit_app.py",
        "views/assets/icon.png",
        "views/components/list_judge/index.html",
        ".streamlit/config.toml",
    )
    assert all(f"r2med_app/{name}" in names for name in app_files), sorted(n for n in names if "r2med_app" in n)


def _environment_seeing_this_one(env_dir: Path) -> Path:
    """A fresh virtual environment in ``env_dir`` whose dependencies are this interpreter's own: a ``.pth``
    file adds every site-packages folder the running interpreter has (``site.getsitepackages()``: a
    venv's own, plus its base's only where that venv includes them). ``system_site_packages=True`` would
    give the *base* interpreter's folders instead, which inside a venv such as the README's ``.venv``
    hold none of the project's dependencies. The checkout itself is never on its path. Its python."""
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    folders = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    # "import" lines of a .pth file run: addsitedir also reads the .pth files inside each folder
    lines = "".join(f"import site; site.addsitedir({folder!r})\n" for folder in folders if Path(folder).is_dir())
    Path(purelib, "_the_tests_interpreter.pth").write_text(lines, encoding="utf-8")
    return python


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment (its dependencies seen from this interpreter's site-packages) with only
    the wheel installed; its folder."""
    env_dir = tmp_path_factory.mktemp("venv")
    python = _environment_seeing_this_one(env_dir)
    install = [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300, cwd=env_dir)
    return env_dir


def test_the_test_environment_sees_the_distributions_of_the_interpreter_running_the_tests(tmp_path: Path) -> None:
    """Run from the README's ``.venv``, CI's venv or a system Python alike, the environment the packaging
    tests build sees the same installed distributions, at the same versions, as the interpreter running
    them (inside a venv it once saw the base interpreter's instead: no pandas, no streamlit)."""
    python = _environment_seeing_this_one(tmp_path / "env")
    listing = (
        "import importlib.metadata as m, json\n"
        "print(json.dumps(sorted({d.metadata['Name'].lower() + '==' + d.version for d in m.distributions()})))"
    )
    here = json.loads(
        subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    )
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    done = subprocess.run([str(python), "-c", listing], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    there = json.loads(done.stdout)
    assert set(here) - set(there) == set(), "missing in the test environment"
    assert {"pandas", "streamlit", "pip"} <= {entry.split("==")[0] for entry in there}
    where = subprocess.run([str(python), "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True)
    assert Path(where.stdout.strip()) == tmp_path / "env"  # its own environment, not the running one


def test_the_installed_wheel_imports_and_runs_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    """From a folder outside the checkout every subpackage of the library and the app imports from the
    environment, the library runs on its embedded demo, and the CLI answers."""
    code = (
        "import importlib, pkgutil, sys, pathlib, r2med_core, r2med_app\n"
        "for package in (r2med_core, r2med_app):\n"
        "    assert pathlib.Path(package.__file__).is_relative_to(sys.prefix), package.__file__\n"
        "    for m in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        # __main__ runs the CLI; the router and the pages are scripts Streamlit runs (served below)\n"
        "        script = m.name == 'r2med_app.streamlit_app' or m.name.startswith('r2med_app.views.pages.')\n"
        "        if not (script or m.name.endswith('__main__')):\n"
        "            importlib.import_module(m.name)\n"
        "from r2med_core import load_demo, run_system\n"
        "print(len(run_system(load_demo('clinical-case'), 'bm25').rankings))\n"
    )
    python = installed / "bin" / "python"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.split()[-1] == "12", done.stderr[-2000:]
    cli = subprocess.run(
        [str(installed / "bin" / "r2med"), "--help"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert cli.returncode == 0 and "usage" in cli.stdout.lower(), cli.stderr[-2000:]


def test_the_installed_app_opens_on_the_embedded_demo(installed: Path, tmp_path: Path) -> None:
    """The environment's router runs as Streamlit runs it, with its pages, icon and components from
    site-packages: it opens on the embedded demo with no exception."""
    code = (
        "import pathlib, r2med_app\n"
        "from streamlit.testing.v1 import AppTest\n"
        "router = pathlib.Path(r2med_app.__file__).parent / 'streamlit_app.py'\n"
        "at = AppTest.from_file(str(router), default_timeout=300).run()\n"
        "assert not at.exception, [e.value for e in at.exception]\n"
        "print([t.value for t in at.title], [s.label for s in at.sidebar.selectbox])\n"
    )
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    python = installed / "bin" / "python"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "['R2MED Explorer'] " in done.stdout and "'Demo task'" in done.stdout, done.stdout[-2000:]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def served(installed: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``r2med app`` of the environment started in ``tmp_path`` without PYTHONPATH, and its address once
    Streamlit answers its health check; the whole process group is stopped afterwards."""
    port = _free_port()
    command = [str(installed / "bin" / "r2med"), "app", "--server.headless", "true", "--server.port", str(port)]
    command += ["--server.address", "127.0.0.1"]
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    log = tmp_path / "streamlit.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=out, start_new_session=True)
    address = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "no answer in 240 s: " + log.read_text(errors="replace")[-3000:]
            try:
                with urllib.request.urlopen(f"{address}/_stcore/health", timeout=5) as reply:
                    assert reply.read().decode() == "ok"
                break
            except OSError:
                time.sleep(1)
        yield process, address
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the whole process group (Streamlit and anything it started), SIGKILL if it lingers."""
    for stop in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, stop)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
            return


def test_r2med_app_serves_the_installed_app_outside_the_checkout(
    installed: Path, tmp_path: Path, served: tuple[subprocess.Popen[bytes], str]
) -> None:
    """``r2med app`` runs ``streamlit run`` on the router inside the environment's site-packages (never the
    checkout's), with every further argument passed on, and serves the app shell."""
    process, address = served
    with urllib.request.urlopen(f"{address}/", timeout=30) as reply:
        shell = reply.read().decode()
    assert '<div id="root"></div>' in shell and "<title>Streamlit</title>" in shell
    # os.execv kept the process: it is Streamlit's now, started from tmp_path without PYTHONPATH
    proc = Path("/proc") / str(process.pid)
    argv = proc.joinpath("cmdline").read_bytes().decode().split("\0")
    router = argv[4]
    assert argv[1:4] == ["-m", "streamlit", "run"] and "--server.headless" in argv[5:], argv
    assert Path(router).is_relative_to(installed) and Path(router).name == "streamlit_app.py", router
    assert not Path(router).is_relative_to(ROOT), router
    assert proc.joinpath("cwd").resolve() == tmp_path.resolve()
    environ = proc.joinpath("environ").read_bytes().split(b"\0")
    assert not any(entry.startswith(b"PYTHONPATH=") for entry in environ)


def test_the_app_server_does_not_collect_every_object_after_each_rerun(tmp_path: Path) -> None:
    """Streamlit's default is a full ``gc.collect(2)`` after every script run: with 357k documents in
    memory that is over a second a rerun, and a page showing a job's progress reruns every second (most
    of the server's CPU while computing; ``benchmarks/bench_compare.py``). The app's own config turns it
    off, read as Streamlit reads it for the router, from a folder with no config of its own."""
    code = (
        "import streamlit.config as config\n"
        f"config._main_script_path = {str(ROOT / 'r2med_app' / 'streamlit_app.py')!r}\n"
        "config.get_config_options(force_reparse=True)\n"
        "print(config.get_option('runner.postScriptGC'), config.get_option('browser.gatherUsageStats'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
