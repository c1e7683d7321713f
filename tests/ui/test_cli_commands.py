"""``routefit sim`` and ``routefit fit``'s table, as a user runs them; the progress line."""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess

from harness import routefit_command
from openai import OpenAI

from proxy.cli import Progress


def test_routefit_sim_serves_the_openai_wire_without_a_key() -> None:
    process = subprocess.Popen(
        [*routefit_command(), "sim", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.match(r"sim listening on (http://127\.0\.0\.1:\d+)", line)
        assert found, line
        client = OpenAI(base_url=found.group(1) + "/v1", api_key="anything", max_retries=0)
        reply = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Hello"}]
        )
        assert reply.choices[0].message.content and reply.usage.prompt_tokens == 8
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=15)


def test_routefit_sim_help_is_the_simulators() -> None:
    out = subprocess.run(
        [*routefit_command(), "sim", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "routefit sim" in out.stdout and "--model" in out.stdout


def _agent_body(turns: int) -> dict:
    messages = [{"role": "system", "content": "agent"}, {"role": "user", "content": "the task"}]
    for t in range(turns):
        messages.append({"role": "assistant", "content": f"step {t} " + "out " * 400})
        messages.append({"role": "user", "content": f"next {t}"})
    messages.append({"role": "user", "content": "and?"})
    return {"model": "gpt-4", "messages": messages, "max_tokens": 500}


def test_fit_prints_the_request_to_send_as_a_table(example_config) -> None:
    body = json.dumps(_agent_body(30))
    args = [*routefit_command(), "fit", "-", "--config", str(example_config)]
    table = subprocess.run(args, input=body, capture_output=True, text=True, timeout=120)
    data = subprocess.run(
        [*args, "--json"], input=body, capture_output=True, text=True, timeout=120
    )
    assert table.returncode == 0 and data.returncode == 0, table.stderr
    sent = json.loads(data.stdout)["request"]["messages"]
    rows = [line for line in table.stdout.splitlines() if re.match(r"\s+\d+\s{2}\w", line)]
    assert len(rows) == len(sent) < len(body)
    first = rows[0].split()
    assert (first[1], first[-1]) == ("system", "agent") and int(first[2]) > 0
    assert rows[-1].endswith("and?") and f"request to send ({len(sent)} messages" in table.stdout
    # No progress line when stderr is not a terminal.
    assert table.stderr == ""


def test_progress_overwrites_one_line_and_clears_it() -> None:
    stream = io.StringIO()
    progress = Progress(stream, enabled=True)
    progress("loading tokenizer o200k_base")
    progress("pricing 3 message(s)")
    progress.done()
    text = stream.getvalue()
    assert "\rroutefit: loading tokenizer o200k_base" in text
    assert text.endswith("\r") and "\n" not in text
    quiet = io.StringIO()
    Progress(quiet, enabled=False)("anything")
    assert quiet.getvalue() == ""
