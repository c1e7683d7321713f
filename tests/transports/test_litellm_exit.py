"""A ``routefit serve`` whose litellm route answered ends without a traceback.

litellm's calls run on a loop of its own that lives as long as the process
(``proxy.transports.litellm``), and the SDK clients' sessions with it (``_sdk_session``). Left
open at the exit, each printed "Exception ignored in LiteLLMAiohttpTransport.__del__" and a
traceback as the interpreter tore down (litellm's own exit hook closes its clients on a new
loop, which cannot close sessions of another): an operator read a traceback on every clean
shutdown. Only a real process shows its exit.
"""

from __future__ import annotations

import signal

import httpx
from harness import gateway_config, run_routefit, sim_route


def test_a_worker_that_served_litellm_exits_without_a_traceback(sim, tmp_path) -> None:
    # an OpenAI-wire route litellm serves: through the SDK, over routefit's session
    route = sim_route("via", sim.base_url, "gpt-4o", transport="litellm")
    config = gateway_config(tmp_path / "c.yaml", [route])
    with run_routefit(config, timeout=60) as running:
        body = {"model": "via", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
        r = httpx.post(running.v1 + "/chat/completions", json=body, timeout=60)
        assert r.status_code == 200, r.text
        running.process.send_signal(signal.SIGTERM)
        code = running.process.wait(timeout=60)
        log = running.log()
    assert code == 0, log
    assert "Exception ignored" not in log and "Traceback" not in log, log
