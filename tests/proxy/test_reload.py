"""Live configuration in process: ``POST /routefit/reload`` reads the config file again and
serves it from the next request on (teams, keys, quotas, routes); a file that does not load is
refused with the loader's message and the running config stays; a request in flight finishes
on the config it started with (``proxy.reload``)."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import gateway_config, sim_route
from inprocess import InProcess, run_inprocess

ADMIN = "sk-admin-" + uuid.uuid4().hex
OLD_KEY = "sk-old-" + uuid.uuid4().hex
NEW_KEY = "sk-new-" + uuid.uuid4().hex
CHAT = [{"role": "user", "content": "Say something long about rivers."}]


def _write(path: Path, sim_url: str, *, teams: list[dict[str, Any]], aliases: list[str]) -> Path:
    routes = [sim_route(alias, sim_url, "gpt-4o") for alias in aliases]
    return gateway_config(path, routes, teams=teams, admin_key=ADMIN)


def _team(team: str, key: str, **quotas: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": team, "keys": [key]}
    if quotas:
        entry["quotas"] = quotas
    return entry


def _chat(base: str, key: str, model: str = "first") -> httpx.Response:
    body = {"model": model, "messages": CHAT, "max_tokens": 8}
    return httpx.post(
        base + "/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )


def _reload(base: str, key: str = ADMIN) -> httpx.Response:
    return httpx.post(
        base + "/routefit/reload", headers={"authorization": f"Bearer {key}"}, timeout=60
    )


def _reloads(base: str, result: str) -> float:
    for line in httpx.get(base + "/metrics", timeout=10).text.splitlines():
        if line.startswith(f'routefit_config_reloads_total{{result="{result}"}}'):
            return float(line.split()[-1])
    return 0.0


@pytest.fixture
def config(tmp_path: Path, sim: Any) -> Path:
    return _write(
        tmp_path / "routefit.yaml",
        sim.base_url,
        teams=[_team("old", OLD_KEY)],
        aliases=["first"],
    )


def test_a_reload_serves_new_keys_routes_and_quotas_and_drops_removed_ones(
    config: Path, sim: Any
) -> None:
    with run_inprocess(config) as running:
        base = running.base_url
        assert _chat(base, NEW_KEY).status_code == 401
        _write(
            config,
            sim.base_url,
            teams=[_team("new", NEW_KEY, tokens_per_day=123456)],
            aliases=["first", "second"],
        )
        answer = _reload(base)
        assert answer.status_code == 200, answer.text
        assert answer.json()["generation"] == 2
        assert answer.json()["routes"] == ["first", "second"]
        assert _chat(base, NEW_KEY, "second").status_code == 200
        assert _chat(base, OLD_KEY).status_code == 401  # its team is gone from the file
        models = httpx.get(
            base + "/v1/models", headers={"authorization": f"Bearer {NEW_KEY}"}, timeout=10
        )
        assert [m["id"] for m in models.json()["data"]] == ["first", "second"]
        usage = httpx.get(
            base + "/routefit/teams/new/usage",
            headers={"authorization": f"Bearer {ADMIN}"},
            timeout=10,
        ).json()
        assert {w["name"]: w["limit"] for w in usage["windows"]} == {"tokens_per_day": 123456}
        assert _reloads(base, "applied") == 1
        assert "config reloaded (POST /routefit/reload)" in running.log()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("model_list: [\n  - model_name: broken\n    litellm_params: {", "line"),
        ("model_list:\n  - model_name: x\n    litellm_params: {model: 7}\n", "model_list"),
    ],
)
def test_a_file_that_does_not_load_is_refused_and_the_running_config_stays(
    config: Path, text: str, says: str
) -> None:
    with run_inprocess(config) as running:
        base = running.base_url
        config.write_text(text)
        answer = _reload(base)
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["code"] == "invalid_config"
        assert str(config) in error["message"] and says in error["message"]
        assert _chat(base, OLD_KEY).status_code == 200
        assert _reloads(base, "refused") == 1
        assert _reloads(base, "applied") == 0
        errors = [line for line in running.log().splitlines() if line.startswith("ERROR")]
        assert any("config reload (POST /routefit/reload) refused" in e for e in errors), errors
        assert "Traceback" not in running.log()


def test_a_file_that_would_open_a_keyed_gateway_is_refused(config: Path, sim: Any) -> None:
    with run_inprocess(config) as running:
        gateway_config(config, [sim_route("first", sim.base_url, "gpt-4o")])
        answer = _reload(running.base_url)
        assert answer.status_code == 422, answer.text
        assert "OPEN" in answer.json()["error"]["message"]
        assert _chat(running.base_url, "sk-anyone").status_code == 401


def test_a_route_whose_tokenizer_cannot_load_is_refused(config: Path, sim: Any) -> None:
    missing = f"hf:{config.parent / 'none.json'}"
    with run_inprocess(config) as running:
        gateway_config(
            config,
            [sim_route("first", sim.base_url, "gpt-4o", tokenizer=missing)],
            teams=[_team("old", OLD_KEY)],
            admin_key=ADMIN,
        )
        answer = _reload(running.base_url)
        assert answer.status_code == 422, answer.text
        assert "route 'first'" in answer.json()["error"]["message"]
        assert _chat(running.base_url, OLD_KEY).status_code == 200


@pytest.mark.parametrize("key", [None, OLD_KEY, "sk-wrong"], ids=["none", "team", "wrong"])
def test_only_the_admin_key_reloads(config: Path, key: str | None) -> None:
    with run_inprocess(config) as running:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        answer = httpx.post(running.base_url + "/routefit/reload", headers=headers, timeout=10)
        assert answer.status_code in (401, 403), answer.text
        assert "error" in answer.json()
        assert _reloads(running.base_url, "applied") == 0


def _stream_lines(base: str, first: threading.Event, lines: list[str]) -> None:
    body = {"model": "first", "messages": CHAT, "max_tokens": 40, "stream": True}
    headers = {"authorization": f"Bearer {OLD_KEY}"}
    with httpx.stream(
        "POST", base + "/v1/chat/completions", json=body, headers=headers, timeout=60
    ) as r:
        lines.append(f"status {r.status_code} route {r.headers.get('x-routefit-route')}")
        for line in r.iter_lines():
            if line:
                lines.append(line)
                first.set()


def test_a_stream_in_flight_finishes_on_the_config_it_started_with(config: Path, sim: Any) -> None:
    sim.state.config.chunk_delay = 0.05
    try:
        with run_inprocess(config) as running:
            base = running.base_url
            first, lines = threading.Event(), []
            reader = threading.Thread(target=_stream_lines, args=(base, first, lines))
            reader.start()
            assert first.wait(30)
            # the stream's team and route leave the file; a new team and route come
            _write(config, sim.base_url, teams=[_team("new", NEW_KEY)], aliases=["renamed"])
            assert _reload(base).status_code == 200
            assert _held(running) == 2  # the stream holds the old generation
            reader.join(60)
            assert _chat(base, OLD_KEY, "renamed").status_code == 401
            assert _chat(base, NEW_KEY, "renamed").status_code == 200
            assert _held(running) == 1  # its last request over, the old generation retired
    finally:
        sim.state.config.chunk_delay = 0.0
    assert lines[0] == "status 200 route first"
    assert lines[-1] == "data: [DONE]"
    assert sum('"content"' in line for line in lines) > 5
    assert "Traceback" not in running.log()


def _held(running: InProcess) -> int:
    """Generations the app still holds: the current one and the retired ones in use."""
    return len(running.app.state.routefit.live.every())


def test_a_route_litellm_serves_through_the_openai_sdk_answers_across_reloads(
    tmp_path: Path, sim: Any
) -> None:
    """litellm keeps an OpenAI SDK client an hour, built around the HTTP client routefit hands
    it (``proxy.transports.litellm._sdk_session``): a reload retires the generation that first
    called, and the SDK client it left in litellm's cache must still reach the provider."""
    routes = [sim_route("first", sim.base_url, "gpt-4o", transport="litellm")]
    config = gateway_config(
        tmp_path / "routefit.yaml", routes, teams=[_team("old", OLD_KEY)], admin_key=ADMIN
    )
    with run_inprocess(config) as running:
        base = running.base_url
        for _ in range(3):
            r = _chat(base, OLD_KEY)
            assert r.status_code == 200, r.text
            answer = _reload(base)
            assert answer.status_code == 200, answer.text
