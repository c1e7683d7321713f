"""Denial of service by one team or client, through a real socket to an in-process routefit: what
a body that is cheap to send costs the gateway, in errors and in memory.

- A megabyte of one whitespace character before a word made tiktoken's pre-tokenizer regex give
  up (its backtracking stops at a million steps): every count on an OpenAI or Anthropic route
  raised, and the request was a 500 — the dry run, ``count_tokens`` and the chat alike.
- Anyone could post a body of any size to the dashboard's login, read whole before any key was
  looked at: 1 GiB of it took the worker to 2.2 GB. It is read within 64 KiB now (a 413).
- A gzip body of 30 KB inflates to 30 MB, and a request keeps its body until its answer is
  done: twenty such requests of one team (585 KB on the wire) held 3.5 GB of the worker. Each
  team's decoded body bytes in flight are now bounded (``body_bytes_in_flight_per_team``); past
  its share a request is a 429 in the wire's shape, while other teams are served.

No timing is asserted: statuses, counts of answers, and what the tokenizer counts.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import claude_route, gateway_config, sim_route
from inprocess import InProcess, run_inprocess
from relkit import check_error_shape

from pricing.tokenizers import get_tokenizer

KEYS = {name: f"sk-{name}-" + uuid.uuid4().hex for name in ("flood", "calm")}
ADMIN = "sk-admin-" + uuid.uuid4().hex
#: The limits under test: a lone body up to 2 MiB, 3 MiB of a team's bodies in flight.
MAX_BODY = 2 * 1024 * 1024
IN_FLIGHT = 3 * 1024 * 1024
#: What each of the flooding team's bodies inflates to: two fit in its share, three do not.
INFLATED = 1_200_000
#: A run of whitespace longer than tiktoken's regex can backtrack through (a million steps).
LONG_RUN = 1_100_000


@pytest.fixture(scope="module")
def gw(sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    routes = [sim_route("gpt-4o", sim.base_url), claude_route("claude", sim.base_url)]
    teams = [{"id": name, "keys": [key]} for name, key in KEYS.items()]
    config = gateway_config(
        tmp_path_factory.mktemp("dos") / "c.yaml",
        routes,
        teams=teams,
        admin_key=ADMIN,
        max_body_bytes=MAX_BODY,
        body_bytes_in_flight_per_team=IN_FLIGHT,
        count_requests_per_minute=1000,
    )
    with run_inprocess(config) as running:
        yield running


def _auth(team: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[team]}", "anthropic-version": "2023-06-01"}


def _chat(model: str, text: str) -> dict[str, Any]:
    return {"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": text}]}


# -- a long whitespace run ------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["o200k_base", "cl100k_base", "anthropic-legacy"])
@pytest.mark.parametrize("space", [" ", "\t", "\u3000"])
def test_a_megabyte_of_whitespace_is_counted(spec: str, space: str) -> None:
    tok = get_tokenizer(spec, scope=uuid.uuid4().bytes)  # a scope of its own: nothing memoised
    whole = tok.count(space * LONG_RUN + "x")
    half = tok.count(space * (LONG_RUN // 2) + "x")
    # the run counted, not refused: about twice its half (a cut may move a token per 64K)
    assert abs(whole - (2 * half - tok.count("x"))) <= LONG_RUN // 65536 + 2


@pytest.mark.parametrize("model", ["gpt-4o", "claude"])
def test_a_megabyte_of_spaces_is_priced_on_every_endpoint_not_a_500(
    gw: InProcess, model: str
) -> None:
    text = " " * LONG_RUN + "x"
    with httpx.Client(headers=_auth("calm"), timeout=120) as client:
        fit = client.post(gw.base_url + "/routefit/fit", json=_chat(model, text))
        check_error_shape(fit.status_code, fit.content, f"{model} dry run")
        assert fit.status_code == 200, fit.text[:300]
        assert int(fit.headers["x-routefit-prompt-tokens"]) > 0
        if model == "claude":
            count = client.post(gw.v1 + "/messages/count_tokens", json=_chat(model, text))
            assert count.status_code == 200, count.text[:300]
            assert count.json()["input_tokens"] > 0
    assert "Traceback" not in gw.log()


# -- the dashboard's login ------------------------------------------------------------------


def test_an_anonymous_login_body_is_read_within_a_bound(gw: InProcess) -> None:
    """A chunked body of 64 MiB to ``POST /routefit/ui/session``: refused once its first 64 KiB
    are in, not read whole."""
    head = (
        b"POST /routefit/ui/session HTTP/1.1\r\nhost: routefit\r\n"
        b"content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    piece = b" " * (1 << 16)
    sent = 0
    with socket.create_connection(_address(gw), timeout=30) as s:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(head)
            while sent < 1024 * len(piece) and not select.select([s], [], [], 0)[0]:
                s.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                sent += len(piece)
            if sent >= 1024 * len(piece):
                s.sendall(b'6\r\n"key"}\r\n0\r\n\r\n')  # read whole: the key's 400
        answer = _until_closed(s)
    status, _, body = _parsed(answer)
    assert status == 413, answer[:300]
    assert sent < 1024 * len(piece)  # answered long before the end of the body
    check_error_shape(status, body, "login")


# -- bodies in flight -----------------------------------------------------------------------


def _address(gw: InProcess) -> tuple[str, int]:
    host, port = gw.base_url.removeprefix("http://").split(":")
    return host, int(port)


def _unfinished_gzip_post(gw: InProcess, team: str) -> socket.socket:
    """A chat POST whose gzip body has sent what inflates to ``INFLATED`` bytes, and no more."""
    gz = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    start = b'{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"'
    sent = gz.compress(start + b"a" * INFLATED) + gz.flush(zlib.Z_SYNC_FLUSH)
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: routefit\r\n"
        f"authorization: Bearer {KEYS[team]}\r\ncontent-type: application/json\r\n"
        "content-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n"
    ).encode()
    s = socket.create_connection(_address(gw), timeout=30)
    s.sendall(head + f"{len(sent):x}\r\n".encode() + sent + b"\r\n")
    return s


def _answers(socks: list[socket.socket], expected: int, wait: float = 20.0) -> dict[int, bytes]:
    """Which sockets were answered (index → the whole answer) once ``expected`` were,
    and a second more for any other, or after ``wait`` seconds."""
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        waiting = [s for i, s in enumerate(socks) if i not in got]
        ready, _, _ = select.select(waiting, [], [], 0.2)
        for s in ready:
            got[socks.index(s)] = _until_closed(s)
        if len(got) >= expected:
            deadline = min(deadline, time.monotonic() + 1.0)
    return got


def _until_closed(s: socket.socket) -> bytes:
    """What the server sends until it closes the connection (a refusal says ``close``)."""
    out = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := s.recv(65536):
            out += chunk
    return out


def _parsed(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def test_one_teams_inflated_bodies_hold_no_more_than_its_share(gw: InProcess) -> None:
    flood = [_unfinished_gzip_post(gw, "flood") for _ in range(6)]
    try:
        answered = _answers(flood, expected=4)
        # two bodies fit the team's share and wait for the rest of themselves; four are refused
        assert len(answered) == 4, answered
        for raw in answered.values():
            status, headers, body = _parsed(raw)
            assert status == 429, raw[:300]
            assert headers["retry-after"] == "1"
            assert headers["connection"] == "close"
            check_error_shape(status, body, "refused body")
            assert json.loads(body)["error"]["code"] == "request_bytes_in_flight"
        # meanwhile another team is served, and the flooding team's small requests too
        for team in ("calm", "flood"):
            r = httpx.post(
                gw.v1 + "/chat/completions", json=_chat("gpt-4o", "hi"), headers=_auth(team)
            )
            assert r.status_code == 200, r.text[:300]
        # a body whose Content-Length alone passes the share is refused before it is read,
        # in the wire's own shape (Anthropic's here)
        big = _chat("claude", "b" * INFLATED)
        r = httpx.post(gw.v1 + "/messages", json=big, headers=_auth("flood"), timeout=30)
        assert r.status_code == 429, r.text[:300]
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "rate_limit_error"
    finally:
        for s in flood:
            s.close()
    # the two held bodies' clients left: their share is let go, and the same body is read and
    # priced (too long for the route's window: a 400 of its own, not a refusal of its bytes)
    for _ in range(100):
        r = httpx.post(gw.v1 + "/messages", json=big, headers=_auth("flood"), timeout=60)
        if r.status_code != 429:
            break
        time.sleep(0.1)
    assert r.status_code == 400 and "prompt is too long" in r.text, r.text[:300]
    assert "Traceback" not in gw.log()


def test_a_lone_body_up_to_the_size_limit_always_fits(tmp_path: Path, sim: Any) -> None:
    # a share smaller than the body limit still admits one body of the limit's size
    config = gateway_config(
        tmp_path / "c.yaml",
        [claude_route("claude", sim.base_url)],
        teams=[{"id": "flood", "keys": [KEYS["flood"]]}],
        max_body_bytes=MAX_BODY,
        body_bytes_in_flight_per_team=1024,
    )
    with run_inprocess(config) as running:
        big = _chat("claude", "word " * 100_000)
        r = httpx.post(running.v1 + "/messages", json=big, headers=_auth("flood"), timeout=60)
        assert r.status_code == 200, r.text[:300]
