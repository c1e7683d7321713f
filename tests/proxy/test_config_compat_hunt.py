"""LiteLLM proxy configs brought as they are: each key means what it means in LiteLLM's proxy,
or is refused at load naming it, never loaded as something else.

Each test is one key an operator's LiteLLM ``config.yaml`` writes that routefit loaded with
another meaning (or refused where LiteLLM takes it), loaded through the real loader.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_operator_hunt import write

from proxy.config import Config, ConfigError, load_config

_ENTRY = """
model_list:
  - model_name: a
    litellm_params: {model: openai/gpt-4o, api_base: "http://127.0.0.1:9"}
"""


def loaded(tmp_path: Path, *parts: str, environ: dict[str, str] | None = None) -> Config:
    return load_config(write(tmp_path, *parts), environ=environ or {})


def refused(tmp_path: Path, *parts: str, environ: dict[str, str] | None = None) -> str:
    path = write(tmp_path, *parts)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ or {})
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    return message


# -- a null deployment fact is an unwritten one -------------------------------------------------


@pytest.mark.parametrize(
    "written",
    [
        "litellm_params: {model: openai/gpt-4o, rpm: null, tpm: null, weight: null}",
        "rpm: null\n    tpm: null\n    litellm_params: {model: openai/gpt-4o}",
    ],
)
def test_a_null_rpm_tpm_or_weight_is_unset_as_in_litellm(tmp_path, written):
    """LiteLLM reads ``rpm: null`` as no limit (``Optional[int] = None``); routefit refused
    it ("must be an integer >= 1"), and a null beside a value counted as written twice."""
    text = f"model_list:\n  - model_name: a\n    {written}\n"
    rc = loaded(tmp_path, text).routes["a"]
    assert (rc.rpm, rc.tpm, rc.weight) == (None, None, 1.0)
    both = "model_list:\n  - model_name: a\n    rpm: 7\n"
    both += "    litellm_params: {model: openai/gpt-4o, rpm: null}\n"
    assert loaded(tmp_path, both).routes["a"].rpm == 7


# -- the entry's own rpm/tpm from the environment ---------------------------------------------


def test_an_entry_level_rpm_and_tpm_may_come_from_the_environment(tmp_path):
    """``rpm: os.environ/RPM`` beside ``litellm_params`` (LiteLLM's older place for it) was not
    resolved: read as the text ``os.environ/RPM``, refused as no integer. An unset name is no
    limit, noted as every unset reference is."""
    text = (
        "model_list:\n  - model_name: a\n    rpm: os.environ/RPM\n    tpm: os.environ/TPM\n"
        "    litellm_params: {model: openai/gpt-4o}\n"
    )
    config = loaded(tmp_path, text, environ={"RPM": "60", "TPM": "90000"})
    assert (config.routes["a"].rpm, config.routes["a"].tpm) == (60, 90000)
    unset = loaded(tmp_path, text, environ={"RPM": "60"})
    assert unset.routes["a"].tpm is None
    assert any("model_list[0].tpm (TPM)" in m for m in unset.missing_env)
