"""What a team's dollar quota is charged on deployments with prices of their own — in process.

LiteLLM reads a deployment's own price in ``model_info`` or in ``litellm_params`` (its custom
pricing: "any pricing key from the cost map can be set directly in litellm_params"). routefit
read ``model_info`` alone: a price written in ``litellm_params`` was ignored without a word, so a
team's ``usd_per_month`` was charged the model map's price — or nothing at all for a model the
map does not know (a self-hosted one), a dollar quota that never ran out.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from inprocess import asgi_client

from proxy.config import ConfigError, parse_config
from proxy.sim.app import create_app as create_sim
from proxy.sim.state import SimState
from proxy.transports.mock import asgi_handler

pytestmark = pytest.mark.anyio

ADMIN = "sk-admin-" + "p" * 32
KEY = "sk-team-" + "d" * 32
PRICES = {"input_cost_per_token": 0.001, "output_cost_per_token": 0.004}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _config(where: str, model: str, team: str, extra: dict[str, Any] | None = None) -> Any:
    params: dict[str, Any] = {
        "model": model,
        "api_base": "http://sim.local/v1",
        "api_key": "sk-sim-0123456789abcdef",
    }
    info: dict[str, Any] = {"max_input_tokens": 128_000, "max_output_tokens": 16_384}
    (params if where == "litellm_params" else info).update(PRICES)
    info.update(extra or {})
    return parse_config(
        {
            "model_list": [{"model_name": "m", "litellm_params": params, "model_info": info}],
            "routefit_settings": {
                "store_path": ":memory:",
                "admin_key": ADMIN,
                "teams": [{"id": team, "keys": [KEY], "quotas": {"usd_per_month": 10**6}}],
            },
        },
        "p.yaml",
        environ={},
    )


@pytest.mark.parametrize("where", ["model_info", "litellm_params"])
@pytest.mark.parametrize("model", ["openai/gpt-4o", "hosted_vllm/mystery-1"])
async def test_a_deployments_own_price_is_what_a_dollar_quota_is_charged(
    where: str, model: str
) -> None:
    team = "priced-" + uuid.uuid4().hex[:8]
    sim = asgi_handler(create_sim(SimState()))
    async with asgi_client(_config(where, model, team), sim) as client:
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "Tell me about the weather."}],
            "max_tokens": 40,
        }
        reply = await client.post(
            "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"}
        )
        assert reply.status_code == 200, reply.text
        usage = reply.json()["usage"]
        cost = (
            usage["prompt_tokens"] * PRICES["input_cost_per_token"]
            + usage["completion_tokens"] * PRICES["output_cost_per_token"]
        )
        expected = round(cost * 1e6)  # micro-USD, as the store counts it
        admin = {"authorization": f"Bearer {ADMIN}"}
        for _ in range(200):  # settled after the answer went out
            r = await client.get(f"/routefit/teams/{team}/usage", headers=admin)
            windows = {w["name"]: w for w in r.json()["windows"]}
            if (used := int(windows["usd_per_month"]["used"])) == expected:
                break
            await client.get("/healthz")
        assert used == expected


def test_two_different_prices_for_one_deployment_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"litellm_params\.input_cost_per_token"):
        _config("litellm_params", "openai/gpt-4o", "t", {"input_cost_per_token": 0.002})
