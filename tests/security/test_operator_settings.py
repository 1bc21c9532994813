"""The operator's settings bound what visitors reach; a setting the app cannot use stops it with a
message naming the setting, instead of running with a guess (e.g. without the demo's restrictions)."""

from __future__ import annotations

import pytest

from r2med_core.settings import load_settings

from ..test_app import open_app


def test_an_unusable_setting_is_named_and_nothing_opens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("R2MED_UPLOAD_MAX_MB", "lots")
    at = open_app()
    assert not at.exception
    assert any("R2MED\\_UPLOAD\\_MAX\\_MB" in e.value and "misconfigured" in e.value for e in at.error)
    assert not at.sidebar.radio  # no source, no page


def test_settings_read_from_environment_and_secrets(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {"R2MED_DATA_ROOTS": f"{tmp_path}/a:{tmp_path}/b", "R2MED_LLM_ENDPOINTS": "http://x/v1, http://y/v1"}
    settings = load_settings(env, extra={"R2MED_LLM_ENDPOINTS": ["http://ignored/v1"], "R2MED_DEMO_MODE": "yes"})
    assert settings.data_roots == (tmp_path / "a", tmp_path / "b")
    assert settings.llm_endpoints == ("http://x/v1", "http://y/v1")  # the environment wins over secrets
    assert settings.demo_mode and not settings.model_allowed("org/model")  # demo mode allows no new model
    defaults = load_settings({"R2MED_DATA_DIR": str(tmp_path)})
    assert defaults.data_roots[-1] == tmp_path and defaults.data_roots[0].name == "data"


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5", "9" * 5000, "1001"])
def test_the_judges_per_document_must_be_a_whole_number_from_1_to_1000(value: str) -> None:
    assert load_settings({}).judges_per_document == 2  # two by default: their agreement can be measured
    assert load_settings({"R2MED_JUDGES_PER_DOCUMENT": " 3 "}).judges_per_document == 3
    with pytest.raises(ValueError, match="R2MED_JUDGES_PER_DOCUMENT must be a whole number from 1 to 1000"):
        load_settings({"R2MED_JUDGES_PER_DOCUMENT": value})
