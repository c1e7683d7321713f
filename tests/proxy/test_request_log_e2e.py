"""The request log through ``routefit serve``: one ``routefit.access`` line per request (refusals
included) and the same record in the store, read back through ``GET /routefit/requests`` — on
the embedded store and on Redis."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from harness import Running, gateway_config, run_routefit, sim_route

from proxy.teams import fingerprint, hash_key

ALPHA, BETA, TIGHT = "alpha", "beta", "tight"
KEYS = {team: f"sk-{team}-{uuid.uuid4().hex}" for team in (ALPHA, BETA, TIGHT)}
ADMIN = "sk-admin-" + uuid.uuid4().hex
KEEP = 5
IN_COST, OUT_COST = 2e-6, 8e-6


def config_for(sim_url: str, path: Any, **settings: Any) -> Any:
    routes = [
        sim_route(
            "priced",
            sim_url,
            "gpt-4o",
            model_info={"input_cost_per_token": IN_COST, "output_cost_per_token": OUT_COST},
        ),
        sim_route(
            "small",
            sim_url,
            "gpt-4o-small",
            model_info={"max_input_tokens": 2048, "max_output_tokens": 256},
        ),
        {
            "model_name": "claude",
            "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5",
                "api_base": sim_url,
                "api_key": "sk-ant-sim",
            },
        },
    ]
    teams = [
        {"id": ALPHA, "keys": [KEYS[ALPHA]]},
        {"id": BETA, "keys": [KEYS[BETA]]},
        {"id": TIGHT, "keys": [KEYS[TIGHT]], "quotas": {"tokens_per_minute": 500}},
    ]
    return gateway_config(path, routes, teams=teams, admin_key=ADMIN, **settings)


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def gw(request: pytest.FixtureRequest, sim: Any, tmp_path_factory: Any) -> Iterator[Running]:
    folder = tmp_path_factory.mktemp("reqlog")
    store: dict[str, Any] = {"store_path": str(folder / "routefit.sqlite3")}
    if request.param == "redis":
        store = {"redis_url": request.getfixturevalue("redis_url")}
    path = config_for(sim.base_url, folder / "c.yaml", request_log={"keep": KEEP}, **store)
    with run_routefit(path) as running:
        yield running


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def chat(gw: Running, key: str, **body: Any) -> httpx.Response:
    body.setdefault("messages", [{"role": "user", "content": "Say something short."}])
    return httpx.post(gw.v1 + "/chat/completions", json=body, headers=auth(key), timeout=30)


def lines(gw: Running) -> list[dict[str, Any]]:
    """The access lines written so far, whole: the server may be halfway through the last one
    (a line is whole once its newline is written)."""
    marker = "routefit.access: "
    whole = gw.log().rpartition("\n")[0]
    return [json.loads(line.split(marker, 1)[1]) for line in whole.splitlines() if marker in line]


def eventually(find: Callable[[], Any]) -> Any:
    """What ``find`` returns once it is not None (records are written after the response)."""
    deadline = time.monotonic() + 15
    while True:
        found = find()
        if found is not None:
            return found
        assert time.monotonic() < deadline, "the record never arrived"
        time.sleep(0.05)


def read(gw: Running, key: str, **params: Any) -> httpx.Response:
    return httpx.get(gw.base_url + "/routefit/requests", params=params, headers=auth(key))


def newest_line(gw: Running, seen: int, **fields: Any) -> dict[str, Any]:
    """The first access line after the first ``seen`` that has ``fields``."""

    def find() -> dict[str, Any] | None:
        for line in lines(gw)[seen:]:
            if all(line.get(k) == v for k, v in fields.items()):
                return line
        return None

    found: dict[str, Any] = eventually(find)
    return found


def stored(gw: Running, record_id: str, team: str) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        data = read(gw, ADMIN, team=team).json()["data"]
        return next((r for r in data if r["id"] == record_id), None)

    found: dict[str, Any] = eventually(find)
    return found


def test_an_answer_is_logged_and_recorded_with_tokens_cost_and_no_key(gw: Running) -> None:
    seen = len(lines(gw))
    reply = chat(gw, KEYS[ALPHA], model="priced")
    assert reply.status_code == 200
    usage = reply.json()["usage"]
    line = newest_line(gw, seen, team=ALPHA, status=200)
    assert line["kind"] == "serve" and line["wire"] == "chat" and line["route"] == "priced"
    assert line["model"] == "openai/gpt-4o" and line["stream"] is False
    assert line["deployment"] == reply.headers["x-routefit-deployment"]
    assert line["key_id"] == fingerprint(hash_key(KEYS[ALPHA]))
    assert line["prompt_tokens"] == usage["prompt_tokens"]
    assert line["output_tokens"] == usage["completion_tokens"]
    assert line["prompt_estimate"] == int(reply.headers["x-routefit-prompt-tokens"])
    assert line["budget"] == int(reply.headers["x-routefit-budget"])
    expected = usage["prompt_tokens"] * IN_COST + usage["completion_tokens"] * OUT_COST
    assert line["cost_usd"] == pytest.approx(expected)
    assert line["actions"] == {} and line["error_code"] is None
    assert line["upstream_ms"] is not None and line["latency_ms"] >= line["upstream_ms"]
    assert [p[0] for p in line["phases"]] == ["fit", "budget", "provider"]
    assert "contents" not in line
    assert KEYS[ALPHA] not in gw.log()
    assert stored(gw, line["id"], ALPHA) == line


def test_a_stream_is_logged_once_it_ends(gw: Running) -> None:
    seen = len(lines(gw))
    client = openai.OpenAI(base_url=gw.v1, api_key=KEYS[ALPHA], max_retries=0)
    messages = [{"role": "user", "content": "Stream a short answer."}]
    chunks = list(client.chat.completions.create(model="priced", messages=messages, stream=True))
    assert chunks
    line = newest_line(gw, seen, team=ALPHA, stream=True)
    assert line["status"] == 200 and line["output_tokens"] > 0 and line["prompt_tokens"] > 0
    assert line["cost_usd"] is not None
    assert stored(gw, line["id"], ALPHA) == line


def test_a_wrong_key_is_logged_without_a_team(gw: Running) -> None:
    seen = len(lines(gw))
    wrong = "sk-wrong-" + uuid.uuid4().hex
    assert chat(gw, wrong, model="priced").status_code == 401
    line = newest_line(gw, seen, status=401)
    assert line["team"] is None and line["error_code"] == "invalid_api_key"
    assert line["key_id"] == fingerprint(hash_key(wrong)) and wrong not in gw.log()
    # kept under the anonymous team, which only the admin reads
    assert stored(gw, line["id"], "-") == line
    assert read(gw, KEYS[ALPHA], team="-").status_code == 403


def test_a_quota_refusal_is_logged_on_its_route(gw: Running) -> None:
    seen = len(lines(gw))
    # over the minute's whole limit (500): the client's 400, logged as a quota refusal
    assert chat(gw, KEYS[TIGHT], model="priced", max_tokens=1000).status_code == 400
    line = newest_line(gw, seen, team=TIGHT, status=400)
    assert line["route"] == "priced" and line["error_code"] == "request_over_quota"
    assert line["prompt_tokens"] is None and line["cost_usd"] is None
    assert stored(gw, line["id"], TIGHT) == line


def test_a_fit_refusal_is_logged_with_its_estimate(gw: Running) -> None:
    seen = len(lines(gw))
    huge = [{"role": "user", "content": "word " * 20000}]
    reply = chat(gw, KEYS[ALPHA], model="small", messages=huge)
    assert reply.status_code == 400
    line = newest_line(gw, seen, team=ALPHA, status=400)
    assert line["route"] == "small" and line["error_code"] == "context_length_exceeded"
    assert stored(gw, line["id"], ALPHA) == line


def test_what_the_fit_did_is_in_the_record(gw: Running) -> None:
    seen = len(lines(gw))
    messages: list[dict[str, str]] = []
    for turn in range(60):
        messages.append({"role": "user", "content": f"turn {turn}: " + "tell me more " * 30})
        messages.append({"role": "assistant", "content": f"answer {turn}: " + "more words " * 30})
    messages.append({"role": "user", "content": "and finally?"})
    reply = chat(gw, KEYS[ALPHA], model="small", messages=messages, max_tokens=64)
    assert reply.status_code == 200
    header = reply.headers["x-routefit-actions"]
    assert header != "none"
    line = newest_line(gw, seen, team=ALPHA, route="small", status=200)
    counted = dict(item.split("=") for item in header.split(","))
    assert {name: str(a["count"]) for name, a in line["actions"].items()} == counted
    assert all(a["tokens_removed"] > 0 for a in line["actions"].values())
    assert line["prompt_estimate"] <= line["budget"]
    assert stored(gw, line["id"], ALPHA) == line


def test_a_count_is_its_own_kind(gw: Running) -> None:
    seen = len(lines(gw))
    reply = httpx.post(
        gw.base_url + "/v1/messages/count_tokens",
        json={"model": "claude", "messages": [{"role": "user", "content": "count me"}]},
        headers={"x-api-key": KEYS[ALPHA], "anthropic-version": "2023-06-01"},
    )
    assert reply.status_code == 200
    line = newest_line(gw, seen, team=ALPHA, kind="count")
    assert line["wire"] == "messages" and line["route"] == "claude"
    assert line["prompt_estimate"] == reply.json()["input_tokens"]


def test_a_key_in_the_url_is_recorded_by_its_fingerprint_only(gw: Running) -> None:
    seen = len(lines(gw))
    hello = {"contents": [{"role": "user", "parts": [{"text": "hello there"}]}]}
    url = gw.base_url + "/v1beta/models/priced:generateContent"
    reply = httpx.post(url, params={"key": KEYS[ALPHA]}, json=hello, timeout=30)
    assert reply.status_code == 200
    line = newest_line(gw, seen, team=ALPHA, wire="gemini")
    assert line["key_id"] == fingerprint(hash_key(KEYS[ALPHA])) and line["status"] == 200
    assert line["prompt_tokens"] == reply.json()["usageMetadata"]["promptTokenCount"]
    assert KEYS[ALPHA] not in json.dumps(stored(gw, line["id"], ALPHA))


def test_a_dry_run_is_its_own_kind_and_forwards_nothing(gw: Running) -> None:
    seen = len(lines(gw))
    body = {"model": "priced", "messages": [{"role": "user", "content": "dry"}]}
    reply = httpx.post(gw.base_url + "/routefit/fit", json=body, headers=auth(KEYS[ALPHA]))
    assert reply.status_code == 200
    line = newest_line(gw, seen, team=ALPHA, kind="fit")
    assert line["route"] == "priced" and line["status"] == 200
    assert line["prompt_tokens"] is None and line["upstream_ms"] is None
    assert line["prompt_estimate"] == int(reply.headers["x-routefit-prompt-tokens"])


def test_team_keys_read_their_own_records_the_admin_any(gw: Running) -> None:
    assert chat(gw, KEYS[BETA], model="priced").status_code == 200
    mine = eventually(lambda: read(gw, KEYS[BETA]).json()["data"] or None)
    assert {r["team"] for r in mine} == {BETA}
    assert read(gw, KEYS[BETA], team=ALPHA).status_code == 403
    assert read(gw, KEYS[BETA], team=BETA).status_code == 200
    assert httpx.get(gw.base_url + "/routefit/requests").status_code == 401
    everyone = read(gw, ADMIN, limit=100).json()["data"]
    assert {BETA, ALPHA} <= {r["team"] for r in everyone}
    times = [r["time"] for r in everyone]
    assert times == sorted(times, reverse=True)
    # the filters
    refused = read(gw, ADMIN, status="4xx").json()["data"]
    assert refused and all(400 <= r["status"] < 500 for r in refused)
    small = read(gw, ADMIN, route="small").json()["data"]
    assert small and all(r["route"] == "small" for r in small)
    assert read(gw, ADMIN, since=time.time() + 60).json()["data"] == []
    assert len(read(gw, ADMIN, limit=1).json()["data"]) == 1
    assert read(gw, ADMIN, limit="many").status_code == 400


def test_a_teams_records_stay_bounded(gw: Running) -> None:
    for _ in range(KEEP + 3):
        assert chat(gw, KEYS[BETA], model="priced").status_code == 200
    seen = len(lines(gw))
    last = chat(gw, KEYS[BETA], model="priced", messages=[{"role": "user", "content": "last"}])
    assert last.status_code == 200
    newest = newest_line(gw, seen, team=BETA)
    stored(gw, newest["id"], BETA)
    assert len(read(gw, ADMIN, team=BETA, limit=1000).json()["data"]) == KEEP


def test_wrong_keys_are_admin_key_guesses_and_braked(gw: Running) -> None:
    """Last in the module: it locks this client out of the admin doors for a while."""
    statuses = [read(gw, f"sk-guess-{i}").status_code for i in range(8)]
    assert statuses[:5] == [401] * 5 and 429 in statuses, statuses
    # the brake is the admin doors' one: the usage endpoint is locked too, even for the admin
    usage = httpx.get(gw.base_url + f"/routefit/teams/{ALPHA}/usage", headers=auth(ADMIN))
    assert usage.status_code == 429


def test_contents_only_when_the_operator_opts_in_and_redacted(sim: Any, tmp_path: Any) -> None:
    path = config_for(sim.base_url, tmp_path / "c.yaml", request_log={"contents": True})
    secret = "sk-live-" + uuid.uuid4().hex
    with run_routefit(path) as running:
        text = f"my key is {secret}, please keep it"
        body = {"model": "priced", "messages": [{"role": "user", "content": text}]}
        reply = httpx.post(
            running.v1 + "/chat/completions", json=body, headers=auth(KEYS[ALPHA]), timeout=30
        )
        assert reply.status_code == 200
        line = newest_line(running, 0, status=200)
        assert line["contents"]["messages"][0]["content"] == "my key is [redacted], please keep it"
        assert secret not in running.log()
        # never in the store
        record = stored(running, line["id"], ALPHA)
        assert "contents" not in record
