"""SIGHUP to ``routefit serve`` reloads the config (``proxy.hangup``): a real process, since only
it has signals. A stream in flight completes intact; a key added to the file works afterwards; a
file that does not load leaves the running config serving; with ``--workers 2`` the parent
passes the signal on and every worker reloads."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from harness import Running, gateway_config, run_routefit, sim_route

ADMIN = "sk-admin-" + uuid.uuid4().hex
FIRST = "sk-first-" + uuid.uuid4().hex
SECOND = "sk-second-" + uuid.uuid4().hex
CHAT = [{"role": "user", "content": "Tell me about the sea."}]
#: Seconds to wait for something a signal started (never a timing assertion: a deadline).
WAIT = 30.0


def _config(path: Path, sim_url: str, keys: list[str]) -> Path:
    teams = [{"id": f"team-{i}", "keys": [key]} for i, key in enumerate(keys)]
    return gateway_config(
        path, [sim_route("gpt-4o", sim_url)], teams=teams, admin_key=ADMIN, store_path=":memory:"
    )


def _chat(base: str, key: str) -> int:
    body = {"model": "gpt-4o", "messages": CHAT, "max_tokens": 8}
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(
        base + "/v1/chat/completions", json=body, headers=headers, timeout=30
    ).status_code


def _until(what: Any, deadline: float = WAIT) -> None:
    end = time.monotonic() + deadline
    while not what():
        assert time.monotonic() < end, "not within the deadline"
        time.sleep(0.05)


def _stream(base: str, first: threading.Event, lines: list[str]) -> None:
    body = {"model": "gpt-4o", "messages": CHAT, "max_tokens": 40, "stream": True}
    headers = {"authorization": f"Bearer {FIRST}"}
    with httpx.stream(
        "POST", base + "/v1/chat/completions", json=body, headers=headers, timeout=60
    ) as r:
        lines.append(f"status {r.status_code}")
        for line in r.iter_lines():
            if line:
                lines.append(line)
                first.set()


def _hup(running: Running) -> None:
    running.process.send_signal(signal.SIGHUP)


def test_sighup_reloads_without_cutting_a_stream_and_refuses_a_broken_file(
    sim: Any, tmp_path: Path
) -> None:
    path = _config(tmp_path / "c.yaml", sim.base_url, [FIRST])
    sim.state.config.chunk_delay = 0.05
    try:
        with run_routefit(path) as running:
            base = running.base_url
            assert _chat(base, SECOND) == 401
            first, lines = threading.Event(), []
            reader = threading.Thread(target=_stream, args=(base, first, lines))
            reader.start()
            assert first.wait(WAIT)
            _config(path, sim.base_url, [FIRST, SECOND])
            _hup(running)
            _until(lambda: "config reloaded (SIGHUP)" in running.log())
            assert reader.is_alive()  # the stream outlived the reload ...
            reader.join(60)
            assert _chat(base, SECOND) == 200  # ... and the new key works
            path.write_text("model_list: [\n  - {model_name: broken, litellm_params: {")
            _hup(running)
            _until(lambda: "config reload (SIGHUP) refused" in running.log())
            assert _chat(base, SECOND) == 200  # the running config stays
            assert running.process.poll() is None
            log = running.log()
    finally:
        sim.state.config.chunk_delay = 0.0
    assert lines[0] == "status 200"
    assert lines[-1] == "data: [DONE]"
    assert sum('"content"' in line for line in lines) > 5
    refused = [line for line in log.splitlines() if "config reload (SIGHUP) refused" in line]
    assert refused and refused[0].startswith("ERROR") and str(path) in refused[0]
    assert "Traceback" not in log


def test_with_workers_every_worker_reloads(sim: Any, tmp_path: Path) -> None:
    path = _config(tmp_path / "c.yaml", sim.base_url, [FIRST])
    with run_routefit(path, workers=2) as running:
        base = running.base_url
        # both workers serve: each has answered a request (a new connection each time)
        _config(path, sim.base_url, [FIRST, SECOND])
        _hup(running)
        _until(lambda: running.log().count("config reloaded (SIGHUP)") == 2)
        assert all(_chat(base, SECOND) == 200 for _ in range(6))
        # the endpoint in one worker checks the file, then every worker reloads
        _config(path, sim.base_url, [SECOND])
        answer = httpx.post(
            base + "/routefit/reload", headers={"authorization": f"Bearer {ADMIN}"}, timeout=30
        )
        assert answer.status_code == 202, answer.text
        _until(lambda: running.log().count("config reloaded (SIGHUP)") == 4)
        assert all(_chat(base, FIRST) == 401 for _ in range(6))
        assert running.process.poll() is None
        assert "Traceback" not in running.log()
