"""`routefit price`: the real console script, its table, its JSON and its exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

ROUTEFIT = shutil.which("routefit") or ""


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [ROUTEFIT] if ROUTEFIT else [sys.executable, "-m", "proxy.cli"]
    return subprocess.run([*cmd, *args], input=stdin, capture_output=True, text=True, timeout=60)


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
