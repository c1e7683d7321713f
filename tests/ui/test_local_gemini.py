"""The example config's Gemini simulator route (``sim-gemini``: ``gemini/gemini-2.5-flash`` on
``sim://local``) answers with no provider key: Google's SDK natively (the simulator's Gemini
wire, the model in the URL) and the openai SDK through the translation, in-process over the
example as shipped."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import yaml
from inprocess import InProcess, run_inprocess

genai = pytest.importorskip("google.genai")
from google.genai import types  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "routefit.yaml"


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Iterator[InProcess]:
    data = yaml.safe_load(EXAMPLE.read_text())
    folder = tmp_path_factory.mktemp("example-gemini")
    data["routefit_settings"]["store_path"] = str(folder / "routefit.sqlite3")
    config = folder / "routefit.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    unset = {k: "" for k in os.environ if re.search(r"_API_KEY$", k)}
    with run_inprocess(config, env=unset, timeout=120) as running:
        yield running


def test_google_sdk_reaches_the_simulators_gemini_wire(example: InProcess) -> None:
    client = genai.Client(
        api_key="unused", http_options=types.HttpOptions(base_url=example.base_url)
    )
    reply = client.models.generate_content(model="sim-gemini", contents="Hello")
    assert reply.text and reply.usage_metadata.prompt_token_count > 0
    streamed = "".join(
        chunk.text or ""
        for chunk in client.models.generate_content_stream(model="sim-gemini", contents="Hi")
    )
    assert streamed


def test_openai_sdk_on_the_gemini_route(example: InProcess) -> None:
    client = openai.OpenAI(base_url=example.base_url + "/v1", api_key="unused", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="sim-gemini", messages=[{"role": "user", "content": "Hello"}]
    )
    reply = raw.parse()
    assert reply.choices[0].message.content and reply.usage.prompt_tokens > 0
    assert raw.headers["x-routefit-route"] == "sim-gemini"
