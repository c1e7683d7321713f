"""docs/configuration.md lists every key the loader accepts, and only those: its "Every key"
section is read back block by block and compared with the sets the readers check
(``proxy.config.schema``), so the page cannot drift from the code either way."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from proxy.config import ConfigError, load_config, parse_config
from proxy.config.schema import BLOCKS, RULE_KEYS, image_rule_constants

DOC = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
_BLOCK_PATH = re.compile(
    r"`((?:model_list|routefit_settings|general_settings|router_settings|litellm_settings)[^`]*)`"
)
_FIRST_CELL = re.compile(r"^\|\s*`([^`]+)`\s*\|")


def _every_key_section() -> str:
    start = DOC.index("\n## Every key\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end != -1 else None]


def _subsections() -> list[tuple[str, str]]:
    """(heading, body) of each ``###`` subsection of "Every key"."""
    parts = re.split(r"^### (.+)$", _every_key_section(), flags=re.M)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def _rows(body: str) -> dict[str, str]:
    """First cell (a backticked name) → the whole row, for each table row of ``body``."""
    rows = {}
    for line in body.splitlines():
        found = _FIRST_CELL.match(line)
        if found:
            rows[found.group(1)] = line
    return rows


def documented() -> dict[str, set[str]]:
    """Block path → the keys its tables list ("The top level" is ``""``)."""
    out: dict[str, set[str]] = {}
    for heading, body in _subsections():
        if "kinds" in heading:
            continue  # the image rule constants, checked below
        paths = _BLOCK_PATH.findall(heading) or ([""] if "top level" in heading else [])
        assert paths, f"a subsection of 'Every key' names no block: {heading!r}"
        for path in paths:
            assert path not in out, f"{path!r} is documented twice"
            out[path] = set(_rows(body))
    return out


def test_every_block_of_the_loader_is_documented_with_exactly_its_keys() -> None:
    doc = documented()
    assert set(doc) == set(BLOCKS)
    for path, keys in BLOCKS.items():
        missing, extra = keys - doc[path], doc[path] - keys
        assert not missing, f"{path or 'top level'}: undocumented keys {sorted(missing)}"
        assert not extra, (
            f"{path or 'top level'}: documented keys the loader refuses {sorted(extra)}"
        )


def test_every_image_rule_kind_is_documented_with_its_constants() -> None:
    [body] = [body for heading, body in _subsections() if "kinds" in heading]
    rows = _rows(body)
    constants = image_rule_constants()
    assert set(rows) == set(constants)
    for kind, keys in constants.items():
        cells = rows[kind].split("|")[2]
        listed = set(re.findall(r"`([^`]+)`", cells))
        assert listed == set(keys), f"image rule {kind!r}: {sorted(listed ^ set(keys))}"


def test_the_named_promises_are_kept() -> None:
    """What issue 32 found missing: model_info, max_input_tokens, sim://local."""
    section = _every_key_section()
    for needle in ("`model_info`", "`max_input_tokens`", "`sim://local`"):
        assert needle in section


def test_each_documented_key_is_accepted_without_complaint() -> None:
    """The other direction, through the loader itself: a config that writes every documented
    routefit-owned key loads (no unknown-key error), and every documented model_info key is
    read (no "not used" warning)."""
    doc = documented()
    fit = {"output_reserve": 1000}
    data = {
        "model_list": [
            {
                "model_name": "m",
                "litellm_params": {"model": "openai/gpt-4o", "api_key": "sk-x"},
                "model_info": {
                    k: "openai/gpt-4o" if k == "base_model" else 1
                    for k in doc["model_list[].model_info"]
                },
                "routefit": {"fit": fit, "context_window": 128000},
            }
        ],
        "routefit_settings": {
            "calibration": {k: _calibration_value(k) for k in doc["routefit_settings.calibration"]},
            "teams": [{"id": "t", "keys": ["k"], "fit": fit, "quotas": {"tokens_per_day": 9}}],
        },
    }
    config = parse_config(yaml.safe_load(yaml.safe_dump(data)), "doc.yaml", environ={})
    assert not [w for w in config.warnings if "model_info" in w]
    assert doc["model_list[].routefit.image_rule"] >= RULE_KEYS


def _calibration_value(key: str) -> object:
    values: dict[str, object] = {"model": "features", "min_samples": 8, "window": 200}
    return values.get(key, 1.0 if key not in ("low", "quantile") else 0.9)


# --- what listing every key found -------------------------------------------------------------

_ROUTE = {"model_name": "m", "litellm_params": {"model": "openai/gpt-4o", "api_key": "sk-x"}}


def test_model_info_prices_are_read_not_warned_about() -> None:
    route = {**_ROUTE, "model_info": {"input_cost_per_token": 2e-6, "output_cost_per_token": 8e-6}}
    config = parse_config({"model_list": [route]}, "c.yaml", environ={})
    assert config.routes["m"].input_cost_per_token == 2e-6
    assert config.warnings == ()  # was: "not used by routefit; ignored" (usd quotas use them)


def test_the_calibration_model_can_be_chosen() -> None:
    data = {"model_list": [_ROUTE], "routefit_settings": {"calibration": {"model": "classes"}}}
    config = parse_config(data, "c.yaml", environ={})
    assert config.settings.calibration.model == "classes"  # was: "must be a positive number"


def test_a_store_key_is_refused_rather_than_silently_ignored() -> None:
    data = {"model_list": [_ROUTE], "routefit_settings": {"store": "redis"}}
    with pytest.raises(ConfigError, match=r"routefit_settings\.store: unknown key"):
        parse_config(data, "c.yaml", environ={})


def test_a_relative_store_path_is_beside_the_config_file(tmp_path: Path) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    config = folder / "routefit.yaml"
    for written, expected in (
        (None, folder / "routefit.sqlite3"),
        ("data/rf.sqlite3", folder / "data" / "rf.sqlite3"),
        (str(tmp_path / "abs.sqlite3"), tmp_path / "abs.sqlite3"),
        (":memory:", ":memory:"),
    ):
        settings = {} if written is None else {"store_path": written}
        config.write_text(yaml.safe_dump({"model_list": [_ROUTE], "routefit_settings": settings}))
        loaded = load_config(os.path.relpath(config), environ={})
        assert loaded.settings.store_path == str(expected)
        assert loaded.settings.store.store_path == str(expected)
