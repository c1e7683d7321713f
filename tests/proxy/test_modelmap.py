"""litellm's model map read for a config: every entry as the whole file says, one read a config.

The map is litellm's 3 MB price file; routefit reads the entries its routes name and lets the rest
go (proxy/modelmap.py says why each read decodes the file and keeps only what was asked).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from proxy import modelmap
from proxy.config import load_config

pytestmark = pytest.mark.skipif(modelmap.model_map_path() is None, reason="litellm's map absent")


def _whole_map() -> dict[str, object]:
    path = modelmap.model_map_path()
    assert path is not None
    data: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    return data


def test_every_entry_is_what_the_whole_map_says() -> None:
    whole = _whole_map()
    keys = [*whole, "no-such-model", "openai/no-such-model"]
    found = modelmap._entries(keys)
    assert set(found) == set(keys)
    for key in keys:
        expected = whole.get(key)
        assert found[key] == (expected if isinstance(expected, dict) else None), key


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every opening of the model map's file from now on, seen by an audit hook (hooks stay for
    the interpreter's life: this one records only while the list is the test's)."""
    path = str(modelmap.model_map_path())
    seen: list[str] = []
    active = [True]

    def hook(event: str, args: tuple[object, ...]) -> None:
        if active[0] and event == "open" and str(args[0]) == path:
            seen.append(path)

    sys.addaudithook(hook)
    monkeypatch.setattr(modelmap, "_probed", {})
    yield seen
    active[0] = False


def test_a_config_reads_the_map_once_however_many_routes(tmp_path: Path, reads: list[str]) -> None:
    models = ["openai/gpt-4o", "openai/gpt-4o-mini", "anthropic/claude-sonnet-4-5", "gpt-4.1"]
    config = tmp_path / "routefit.yaml"
    entries = [
        {"model_name": f"m{i}", "litellm_params": {"model": m, "api_key": "sk-unused"}}
        for i, m in enumerate(models)
    ]
    config.write_text(yaml.safe_dump({"model_list": entries}))
    whole = _whole_map()
    reads.clear()
    loaded = load_config(config)
    assert len(reads) == 1
    for alias, model in zip(("m0", "m1", "m2", "m3"), models, strict=True):
        bare = model.rsplit("/", 1)[-1]
        entry = whole.get(model) or whole.get(bare)
        assert isinstance(entry, dict), model
        assert loaded.routes[alias].route.context_window == entry["max_input_tokens"]
    # A model asked later (a route's at request time) is answered without another read.
    assert modelmap.lookup("gpt-4o-mini", "openai") == whole["gpt-4o-mini"]
    assert len(reads) == 1
