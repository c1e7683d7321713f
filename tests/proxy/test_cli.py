"""`routefit price`: the real console script, its table, its JSON and its exit codes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from harness import free_port, routefit_command


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*routefit_command(), *args], input=stdin, capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def request_file(example_config):
    return example_config.parent / "request.json"


def test_price_json_gives_the_published_total(example_config, request_file):
    out = run("price", str(request_file), "--config", str(example_config), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    # OpenAI cookbook: this weather-tool request is 101 prompt tokens on gpt-4o.
    assert data["route"] == "gpt-4o"
    assert data["total"] == 101
    assert (
        data["total"] == sum(m["total"] for m in data["messages"]) + data["tools"] + data["priming"]
    )
    assert [m["role"] for m in data["messages"]] == ["system", "user"]
    assert set(data["messages"][0]) == {"index", "role", "text", "framing", "images", "total"}
    assert data["image_details"] == []


def test_price_table_and_model_override(example_config, request_file):
    out = run("price", str(request_file), "--config", str(example_config), "--model", "gpt-4")
    assert out.returncode == 0, out.stderr
    assert "route gpt-4 -> openai/gpt-4" in out.stdout
    assert "total 105 tokens" in out.stdout  # the cookbook's figure for gpt-4


def test_price_reads_stdin(example_config, request_file):
    out = run(
        "price", "-", "--config", str(example_config), "--json", stdin=request_file.read_text()
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["total"] == 101


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("{not json", "invalid JSON"),
        ('{"model": "gpt-4o"}', "messages must be a non-empty list"),
        ('{"model": "gpt-4o", "messages": [{"role": "robot", "content": "x"}]}', "role"),
        (
            '{"model": "gpt-4o", "messages": [{"role": "user", "content": [{"type": "video"}]}]}',
            "not a supported content part type",
        ),
        (
            '{"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}',
            "unknown model alias 'gpt-9'",
        ),
        # issue 32: "unknown model alias ''"; the gateway's words on every wire
        ('{"messages": [{"role": "user", "content": "x"}]}', "model is required"),
    ],
)
def test_bad_input_exits_2_with_one_line(example_config, body, reason):
    out = run("price", "-", "--config", str(example_config), stdin=body)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if "warning" not in line]
    assert len(lines) == 1 and reason in lines[0]


def test_unreadable_file_and_bad_config_exit_2(example_config, tmp_path):
    out = run("price", str(tmp_path / "nope.json"), "--config", str(example_config))
    assert out.returncode == 2 and "cannot read" in out.stderr and "Traceback" not in out.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("model_list: []\n")
    out = run("price", "-", "--config", str(bad), stdin="{}")
    assert out.returncode == 2 and "model_list" in out.stderr


def _png_url(width: int, height: int) -> str:
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (10, 20, 30)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def test_price_json_details_each_image_by_the_route_rule(example_config):
    body = {
        "model": "gpt-4o",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "compare"},
                    {
                        "type": "image_url",
                        "image_url": {"url": _png_url(1024, 1024), "detail": "high"},
                    },
                    {
                        "type": "image_url",
                        "image_url": {"url": _png_url(300, 200), "detail": "low"},
                    },
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                ],
            }
        ],
    }
    out = run("price", "-", "--config", str(example_config), "--json", stdin=json.dumps(body))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    details = data["image_details"]
    assert [(d["width"], d["height"], d["sized"]) for d in details] == [
        (1024, 1024, True),
        (300, 200, True),
        (None, None, False),
    ]
    # OpenAI's published figures for gpt-4o: 1024x1024 high = 765, any size low = 85
    assert [d["tokens"] for d in details[:2]] == [765, 85]
    assert details[2]["tokens"] >= 765  # an unsized URL image is priced at the worst case
    assert data["messages"][0]["images"] == sum(d["tokens"] for d in details)


def _agent_body(turns: int) -> dict:
    messages = [{"role": "system", "content": "agent"}, {"role": "user", "content": "task"}]
    for t in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{t}",
                        "type": "function",
                        "function": {"name": "sh", "arguments": "{}"},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{t}", "content": "out " * 400})
    messages.append({"role": "user", "content": "and?"})
    return {"model": "gpt-4", "messages": messages, "max_tokens": 500}


def test_fit_json_gives_the_body_to_send_and_its_report(example_config):
    out = run(
        "fit", "-", "--config", str(example_config), "--json", stdin=json.dumps(_agent_body(30))
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    report = data["report"]
    assert report["estimate_after"] <= report["budget"] < report["estimate_before"]
    acts = report["actions"]  # old tool outputs are masked before turns are elided
    assert acts["masked"]["messages"] + acts["elided_messages"]["messages"] > 0
    sent = data["request"]["messages"]
    assert sent[0]["content"] == "agent" and sent[-1]["content"] == "and?"
    assert data["request"]["max_tokens"] == 500
    table = run("fit", "-", "--config", str(example_config), stdin=json.dumps(_agent_body(30)))
    assert table.returncode == 0 and "actions: masked=" in table.stdout


def test_fit_that_cannot_fit_exits_2(example_config):
    body = {"model": "gpt-4", "messages": [{"role": "user", "content": "word " * 20000}]}
    out = run("fit", "-", "--config", str(example_config), stdin=json.dumps(body))
    assert out.returncode == 2
    assert "context_length_exceeded" in out.stderr and "Traceback" not in out.stderr


# --- routefit check ------------------------------------------------------------------------

_TEAMS_CONFIG = """\
model_list:
  - model_name: fast
    litellm_params: {model: openai/gpt-4o-mini, api_key: sk-route-secret}
    routefit:
      output_reserve: 512
      image_fetch: {allow_hosts: [img.example.com]}
  - model_name: local
    litellm_params: {model: hosted_vllm/my-model, api_base: http://127.0.0.1:8000/v1}
    model_info: {max_input_tokens: 32768, max_output_tokens: 2048}
    routefit: {tokenizer: "heuristic:3.5", framing: generic, image_rule: "flat:600"}
routefit_settings:
  redis_url: redis://routefit:hunter2@10.0.0.7:6380/3
  budget_failure_mode: closed
  admin_key: admin-secret-key
  teams:
    - id: search
      keys: [team-secret-key-1, team-secret-key-2]
      routes: [fast]
      quotas: {tokens_per_minute: 1000, usd_per_month: 5}
      fit: {pin_fraction: 0.25}
"""


def test_check_json_resolves_routes_teams_and_store_without_secrets(tmp_path):
    config = tmp_path / "routefit.yaml"
    config.write_text(_TEAMS_CONFIG)
    out = run("check", "--config", str(config), "--json")
    assert out.returncode == 0, out.stderr
    for secret in ("sk-route-secret", "hunter2", "admin-secret-key", "team-secret-key"):
        assert secret not in out.stdout
    data = json.loads(out.stdout)
    fast, local = data["routes"]["fast"], data["routes"]["local"]
    assert (fast["model"], fast["transport"], fast["api_base"]) == (
        "openai/gpt-4o-mini",
        "openai",
        "https://api.openai.com/v1",
    )
    assert (fast["tokenizer"], fast["framing"]["family"], fast["supports_vision"]) == (
        "o200k_base",
        "openai",
        True,
    )
    assert fast["fit"]["output_reserve"] == 512 and fast["api_key_set"] is True
    assert fast["image_fetch"]["allow_hosts"] == ["img.example.com"]
    assert (local["context_window"], local["max_output_tokens"]) == (32768, 2048)
    assert (local["tokenizer"], local["framing"]["family"]) == ("heuristic:3.5", "generic")
    assert local["image_rule"] == {"kind": "flat", "tokens": 600}
    assert local["api_base"] == "http://127.0.0.1:8000/v1"
    assert data["teams"] == [
        {
            "id": "search",
            "keys": 2,
            "routes": ["fast"],
            "quotas": {"tokens_per_minute": 1000, "usd_per_month": 5},
            "fit": {"pin_fraction": 0.25},
        }
    ]
    assert data["store"] == {
        "kind": "redis",
        "url": "redis://routefit:***@10.0.0.7:6380/3",
        "budget_failure_mode": "closed",
    }


def test_check_prints_the_example_config_for_a_person(example_config):
    out = run("check", "--config", str(example_config))
    assert out.returncode == 0, out.stderr
    assert "route claude-sonnet -> anthropic/claude-sonnet-4-5" in out.stdout
    assert "transport anthropic" in out.stdout
    assert "window 131,072" in out.stdout  # deepseek-chat's model_info override
    assert "teams: none" in out.stdout
    assert "store " in out.stdout


@pytest.mark.parametrize(
    ("snippet", "reason"),
    [
        (
            "    routefit: {tokeniser: o200k_base}\n",
            "model_list[0].routefit.tokeniser: unknown key (did you mean 'tokenizer'?)",
        ),
        (
            "routefit_settings: {teams: [{id: a, keys: [k], quota: {}}]}\n",
            "routefit_settings.teams[0].quota: unknown key (did you mean 'quotas'?)",
        ),
        ("    routefit: {tokenizer: 'hf:/nonexistent/tokenizer.json'}\n", "does not exist"),
    ],
)
def test_check_refuses_an_invalid_config_with_exit_2(tmp_path, snippet, reason):
    config = tmp_path / "bad.yaml"
    config.write_text(
        "model_list:\n  - model_name: m\n    litellm_params: {model: openai/gpt-4o}\n" + snippet
    )
    out = run("check", "--config", str(config))
    assert out.returncode == 2
    assert out.stdout == "" and "Traceback" not in out.stderr
    assert reason in out.stderr and str(config) in out.stderr


_WINDOWS_CONFIG = """\
model_list:
  - model_name: tiny
    litellm_params: {{model: openai/gpt-4o, api_key: sk-x}}
    model_info: {{max_input_tokens: {window}, max_output_tokens: 16384}}
{extra}"""


def test_check_refuses_a_route_whose_window_cannot_hold_its_reserve_and_margin(tmp_path):
    # issue 31: a 500-token window was "valid" though every request to it failed
    config = tmp_path / "tiny.yaml"
    config.write_text(_WINDOWS_CONFIG.format(window=500, extra=""))
    out = run("check", "--config", str(config))
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert str(config) in out.stderr and "route 'tiny'" in out.stderr
    # the numbers: the window, the reserve's floor, the margin, the minimal prompt
    for figure in ("window of 500 tokens", "at least 1,024", "margin (32)", "1,072 tokens"):
        assert figure in out.stderr


def test_check_takes_a_small_reserve_and_a_teams_override_into_account(tmp_path):
    config = tmp_path / "small.yaml"
    config.write_text(
        _WINDOWS_CONFIG.format(window=500, extra="    routefit: {output_reserve: 200}\n")
    )
    out = run("check", "--config", str(config), "--json")
    assert out.returncode == 0, out.stderr
    output = json.loads(out.stdout)["routes"]["tiny"]["output"]
    assert output == {
        "reserve": 200,
        "min_reserve": 200,
        "safety_margin": 32,
        "minimum_window": 248,
    }
    teams = (
        "routefit_settings:\n  teams:\n    - id: big-replies\n      keys: [k]\n"
        "      fit: {output_reserve: 4000}\n"
    )
    config.write_text(
        _WINDOWS_CONFIG.format(window=500, extra="    routefit: {output_reserve: 200}\n" + teams)
    )
    out = run("check", "--config", str(config))
    assert out.returncode == 2 and "route 'tiny' for team 'big-replies'" in out.stderr


def test_check_warns_when_the_window_holds_only_the_shrunk_reserve(tmp_path):
    config = tmp_path / "cramped.yaml"
    config.write_text(_WINDOWS_CONFIG.format(window=3000, extra=""))
    out = run("check", "--config", str(config))
    assert out.returncode == 0, out.stderr
    assert "warning: route 'tiny': its context window of 3,000 tokens" in out.stdout
    assert "output reserve 4,096 (shrinks to 1,024)  safety margin 32" in out.stdout


def test_fit_shows_the_output_cap_it_would_send(tmp_path, example_config):
    body = tmp_path / "claude-code.json"
    body.write_text(
        json.dumps(
            {
                "model": "sim-gpt-4o",
                "max_tokens": 32000,
                "messages": [{"role": "user", "content": "Hi"}],
            }
        )
    )
    out = run("fit", str(body), "--config", str(example_config), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["request"]["max_tokens"] == 16384
    assert data["report"]["output"] == {
        "requested": 32000,
        "route_limit": 16384,
        "reserve": 16384,
        "sent": 16384,
    }
    text = run("fit", str(body), "--config", str(example_config)).stdout
    assert "output cap 32000->16384" in text


# --- manners (issue 32): closed pipes, the store's path, the port, the order of the log ------


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--config", "{config}", "--json"],
        ["price", "{request}", "--config", "{config}"],
        ["fit", "{request}", "--config", "{config}", "--json"],
        ["version"],
    ],
    ids=["check", "price", "fit", "version"],
)
def test_output_into_a_closed_pipe_ends_quietly(example_config, request_file, args):
    """``routefit check --json | head -1``: the reader is gone before the command writes (the
    read end is closed at once, so the write always meets a closed pipe)."""
    args = [a.format(config=example_config, request=request_file) for a in args]
    read, write = os.pipe()
    process = subprocess.Popen(
        [*routefit_command(), *args], stdout=write, stderr=subprocess.PIPE, text=True
    )
    os.close(write)
    os.close(read)
    _, err = process.communicate(timeout=120)
    assert err == ""  # no BrokenPipeError traceback, no "Exception ignored"
    assert process.returncode == 141  # 128 + SIGPIPE, as a shell reports for any tool


_SIM_CONFIG = """\
model_list:
  - model_name: local
    litellm_params: {model: openai/gpt-4o, api_base: "sim://local"}
"""


def _embedded() -> dict[str, str]:
    """The environment without the tests' Redis (``REDIS_URL`` stands in for ``redis_url``)."""
    return {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "ROUTEFIT_REDIS_URL")}


def _serve(config: Path, cwd: Path, port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*routefit_command(), "serve", "--config", str(config), "--port", str(port)],
        cwd=cwd,
        env=_embedded(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_ready(process: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[0]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError("routefit did not become ready")


def _served_one_chat(config: Path, cwd: Path) -> str:
    """``routefit serve`` started, asked one chat completion of route ``local``, stopped by
    SIGTERM (the calibrator flushes its queue on the way out): its log, once it exited 0."""
    port = free_port()
    process = _serve(config, cwd, port)
    try:
        _wait_ready(process, port)
        body = {"model": "local", "messages": [{"role": "user", "content": "Hello"}]}
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 200, r.text
    finally:
        process.send_signal(signal.SIGTERM)
        log = process.communicate(timeout=60)[0]
    assert process.returncode == 0, log
    return log


def test_the_embedded_store_is_beside_the_config_wherever_commands_run(tmp_path):
    """serve run from one folder and calibration from another read one database: the one
    beside the config file (its path printed at start), and neither creates another."""
    conf, serve_dir, other_dir = (tmp_path / d for d in ("conf", "serve-here", "elsewhere"))
    for d in (conf, serve_dir, other_dir):
        d.mkdir()
    config = conf / "routefit.yaml"
    config.write_text(_SIM_CONFIG)  # no store_path: the default, routefit.sqlite3
    store = conf / "routefit.sqlite3"
    log = _served_one_chat(config, serve_dir)
    assert f"store: sqlite {store}" in log
    out = subprocess.run(
        [*routefit_command(), "calibration", "--config", str(config), "--json"],
        cwd=other_dir,
        env=_embedded(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert f"store sqlite {store}" in out.stderr
    assert json.loads(out.stdout)["local"]["samples"] == 1
    assert store.exists()
    assert not list(serve_dir.iterdir()) and not list(other_dir.iterdir())


def test_calibration_without_a_database_creates_none(tmp_path):
    config = tmp_path / "routefit.yaml"
    config.write_text(_SIM_CONFIG)
    out = subprocess.run(
        [*routefit_command(), "calibration", "--config", str(config), "--json"],
        env=_embedded(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "does not exist: nothing learnt yet" in out.stderr
    assert json.loads(out.stdout)["local"]["samples"] == 0
    assert not (tmp_path / "routefit.sqlite3").exists()


def test_a_port_in_use_is_the_only_complaint_and_nothing_says_ready(tmp_path):
    config = tmp_path / "routefit.yaml"
    config.write_text(_SIM_CONFIG + "routefit_settings: {store_path: ':memory:'}\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run("serve", "--config", str(config), "--port", str(port))
    assert out.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in out.stderr
    assert "routefit ready" not in out.stderr and "Traceback" not in out.stderr


def test_routefit_sim_into_a_closed_pipe_keeps_serving_quietly():
    """A parent that stops reading before the "listening" line (``routefit sim | true``)."""
    port = free_port()
    read, write = os.pipe()
    process = subprocess.Popen(
        [*routefit_command(), "sim", "--port", str(port)],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write)
    os.close(read)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()[1]
            try:
                body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}
                url = f"http://127.0.0.1:{port}/v1/chat/completions"
                if httpx.post(url, json=body, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "routefit sim did not answer"
            time.sleep(0.05)
        time.sleep(0.5)  # the "listening" line is written once the server runs
    finally:
        process.send_signal(signal.SIGINT)
        err = process.communicate(timeout=30)[1]
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_serve_starts_and_names_a_route_whose_window_cannot_hold_its_reserve(tmp_path):
    """What ``check`` refuses (every request to the 500-token route that sets no smaller cap
    fails) serve says at start-up, naming the route, and still serves the other routes."""
    config = tmp_path / "routefit.yaml"
    config.write_text(
        _SIM_CONFIG
        + "  - model_name: tiny\n"
        + '    litellm_params: {model: openai/gpt-4o, api_base: "sim://local"}\n'
        + "    model_info: {max_input_tokens: 500, max_output_tokens: 16384}\n"
    )
    log = _served_one_chat(config, tmp_path)
    warning = next(line for line in log.splitlines() if line.startswith("routefit: warning:"))
    assert "route 'tiny'" in warning and "window of 500 tokens" in warning
    assert "route 'local'" not in log


def test_check_lists_the_host_names_routefit_answers(tmp_path):
    """``allowed_hosts`` decides which ``Host`` a request may name (proxy/origin.py): check says
    what the file made of it, lower-cased and without a trailing dot."""
    config = tmp_path / "hosts.yaml"
    config.write_text(
        _WINDOWS_CONFIG.format(
            window=128000,
            extra="routefit_settings:\n  allowed_hosts: [Routefit.Internal., '*.svc']\n",
        )
    )
    out = run("check", "--config", str(config), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["allowed_hosts"] == ["routefit.internal", "*.svc"]
