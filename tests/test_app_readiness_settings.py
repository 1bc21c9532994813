"""The readiness check reads the operator's one Settings, secrets included (issue 37).

``R2MED_COMPUTE_SECONDS`` set only in ``.streamlit/secrets.toml`` used to be ignored by ``is_ready``
and ``_rerank_ready``, which called ``load_settings()`` on the environment alone; the app's workbench is
made from ``serving.settings()`` (secrets included).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from r2med_app.views import serving, work
from r2med_core.compute.workbench import Memo
from r2med_core.data import load_demo


def test_compute_seconds_in_secrets_changes_what_is_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("R2MED_COMPUTE_SECONDS", raising=False)
    monkeypatch.setenv("R2MED_CACHE_DIR", str(tmp_path))  # nothing on disk: readiness is the estimate alone
    dataset = load_demo()
    # A run another test left in this process's memory is ready whatever the threshold: none here.
    monkeypatch.setattr(work, "_memo", Memo)  # an empty memory at every look
    monkeypatch.setattr(serving, "_secrets", lambda: {})
    assert work.ready(dataset, "bm25")  # a fraction of a second: under the default 2 s
    monkeypatch.setattr(serving, "_secrets", lambda: {"R2MED_COMPUTE_SECONDS": "0.01"})
    assert not work.ready(dataset, "bm25")  # the operator's lower threshold asks for a click
