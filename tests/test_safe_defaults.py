"""Safe by default (issue 36): the Quick start's app, which has no sign-in unless configured, answers
this machine only, and an offline machine sees no alarming "Did not auto detect external IP"."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _non_loopback_address() -> str | None:
    """An address of this machine other than loopback (a UDP connect sends nothing), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_the_quick_start_app_listens_on_loopback_only(tmp_path: Path) -> None:
    """``streamlit run streamlit_app.py`` as the README writes it (only the port chosen, through the
    environment): it answers on 127.0.0.1, refuses the machine's other address, prints no Network URL."""
    port = _free_port()
    env = {**os.environ, "STREAMLIT_SERVER_PORT": str(port), "STREAMLIT_SERVER_HEADLESS": "true"}
    log = tmp_path / "streamlit.log"
    command = [sys.executable, "-m", "streamlit", "run", "streamlit_app.py"]
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5) as reply:
                    assert reply.read() == b"ok"
                break
            except OSError:
                time.sleep(1)
        text = log.read_text(errors="replace")
        assert f"127.0.0.1:{port}" in text and "Network URL" not in text, text
        assert "Did not auto detect external IP" not in text, text
        other = _non_loopback_address()
        if other is None:
            pytest.skip("this machine has no non-loopback address to try")
        with pytest.raises(OSError), socket.create_connection((other, port), timeout=5):
            pass
    finally:
        for stop in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, stop)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=20)
                break
