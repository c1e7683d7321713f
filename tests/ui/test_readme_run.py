"""The README's run command, in a fresh clone with no provider keys, gives a proxy a newcomer
can chat with on every wire (the example config's ``sim-gpt-4o`` and ``sim-claude`` routes:
chat, Responses and Anthropic Messages), and a real-provider route without
its key answers ``provider_key_missing`` instead of forwarding keyless.

Slow (a fresh venv and ``pip install -e .``, as the README says); needs the committed tree.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from harness import free_port
from openai import OpenAI

ROOT = Path(__file__).resolve().parents[2]


def _run_command() -> str:
    lines = (ROOT / "README.md").read_text().splitlines()
    marker = lines.index("<!-- run-command -->")
    return lines[marker + 2].strip()


@pytest.mark.slow
def test_readme_run_command_chats_without_provider_keys(tmp_path: Path) -> None:
    command = _run_command()
    assert "routefit serve" in command
    clone = tmp_path / "routefit"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not re.search(r"_API_KEY$|^REDIS_URL$", k)}
    env.pop("ROUTEFIT_REDIS_URL", None)
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        ["bash", "-c", f"{command} --port {port}"],
        cwd=clone,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 900
        while True:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.5)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model="sim-gpt-4o", messages=[{"role": "user", "content": "Hello"}]
        )
        assert reply.choices[0].message.content and reply.usage.prompt_tokens == 8
        # the other wires, as the anthropic SDK / Claude Code and Codex speak them
        claude = anthropic.Anthropic(
            base_url=f"http://127.0.0.1:{port}", api_key="unused", max_retries=0
        )
        for model in ("sim-claude", "sim-gpt-4o"):
            message = claude.messages.create(
                model=model, max_tokens=64, messages=[{"role": "user", "content": "Hello"}]
            )
            assert message.content[0].text and message.usage.input_tokens > 0
            answer = client.responses.create(model=model, input="Hello")
            assert answer.output_text and answer.usage.input_tokens > 0
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "Hello"}]
            )
        assert info.value.status_code == 503
        assert info.value.body["code"] == "provider_key_missing"
        assert "OPENAI_API_KEY" in info.value.body["message"]
        text = (tmp_path / "serve.log").read_text()
        assert re.search(r"WARNING .*'gpt-4o' has no provider key: OPENAI_API_KEY is unset", text)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        log.close()
