"""Issue 18 through routefit (in-process): image tokens routefit never priced do not poison the
text factors, and after an elision changed a session's tail, the unchanged head still starts
from the provider's count (checkpoint anchors)."""

from __future__ import annotations

import random
import time

import httpx
import openai
from harness import gateway_config, sim_route
from inprocess import run_inprocess

WORDS = (
    "the route counts tokens window provider answer session history plan file change test "
    "result error value line read write build check list item order model parse render"
).split()


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def settle(base_url: str, alias: str, count: int, timeout: float = 20.0) -> dict:
    """The route's calibration once the background writer has recorded ``count`` samples."""
    deadline = time.monotonic() + timeout
    while True:
        route = httpx.get(base_url + "/routefit/calibration").json()["routes"].get(alias, {})
        if route.get("samples", 0) >= count or time.monotonic() > deadline:
            return route
        time.sleep(0.05)


def ask(client: openai.OpenAI, alias: str, messages: list[dict]) -> tuple[int, int, str]:
    raw = client.chat.completions.with_raw_response.create(
        model=alias, messages=messages, max_tokens=64
    )
    reply = raw.parse()
    return (
        int(raw.headers["x-routefit-prompt-tokens"]),
        reply.usage.prompt_tokens,
        raw.headers["x-routefit-actions"],
    )


def test_url_images_of_unknown_size_do_not_poison_plain_prompts(sim, tmp_path):
    """Images by URL (URL sizing off, the default): routefit prices each at the rule's worst
    case; the provider counts each at its real size. A plain prompt afterwards is priced as
    text, not as text inflated by the image tokens routefit never saw."""
    alias = "gpt-4o-mini"
    # the header is what this test measures: the answer waits for a bound's exact count
    config = gateway_config(
        tmp_path / "c.yaml", [sim_route(alias, sim.base_url)], exact_prompt_headers=True
    )
    rng = random.Random(18)
    sizes = [(64, 64), (512, 512), (800, 600), (1600, 1200), (3000, 2000), (300, 4000)]
    with run_inprocess(config) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)
        for i in range(14):
            parts: list[dict] = [{"type": "text", "text": text(rng, rng.randint(20, 400))}]
            # at most two: routefit prices each at the worst case (48k on gpt-4o-mini) until it
            # has learnt what such images really cost
            for j in range(rng.randint(1, 2)):
                w, h = rng.choice(sizes)
                url = f"https://images.example/{i}-{j}.png#{w}x{h}"  # the simulator's truth
                detail = rng.choice(["auto", "low", "high"])
                parts.append({"type": "image_url", "image_url": {"url": url, "detail": detail}})
            ask(client, alias, [{"role": "user", "content": parts}])
            settle(gw.base_url, alias, i + 1)
        learnt = settle(gw.base_url, alias, 14)
        plain = [{"role": "user", "content": text(random.Random(8007), 8000)}]
        estimate, actual, _ = ask(client, alias, plain)
    assert actual > 7500
    assert abs(estimate - actual) / actual <= 0.03, (estimate, actual, learnt)
    assert estimate >= actual  # an exact meter is never corrected below the count
    weights = learnt["weights"]
    assert max(weights[k] for k in ("prose", "code", "structured", "script", "numeric")) <= 1.03


def test_after_a_cut_the_head_is_anchored_on_the_providers_count(sim, tmp_path):
    """A long session on a route whose tokenizer routefit does not know (mystery-3: cl100k
    by content class, its own per-message overhead), fitted to 8k: each cut re-sends a pinned
    head the provider already counted, and the estimate starts from that count."""
    alias = "cut"
    info = {"max_input_tokens": 8192, "max_output_tokens": 1024}
    # every request learnt, and its headers the estimate it went on: a bound-proved turn's
    # count, learning only, may be skipped on a busy machine (``proxy.pace``), and this waits
    # for each turn's sample
    config = gateway_config(
        tmp_path / "c.yaml",
        [sim_route(alias, sim.base_url, "mystery-3", model_info=info)],
        exact_prompt_headers=True,
    )
    rng = random.Random(3)
    messages = [
        {"role": "system", "content": "You are a careful assistant. " + text(rng, 40)},
        {"role": "user", "content": "Task: " + text(rng, 120)},
    ]
    turns: list[tuple[str, int, int]] = []
    with run_inprocess(config) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)
        for n in range(40):
            estimate, actual, actions = ask(client, alias, messages)
            turns.append((actions, estimate, actual))
            settle(gw.base_url, alias, n + 1)
            messages.append({"role": "assistant", "content": text(rng, rng.randint(60, 200))})
            messages.append({"role": "user", "content": text(rng, rng.randint(60, 250))})
        report = settle(gw.base_url, alias, 40)
    cut_turns = [i for i, (actions, _, _) in enumerate(turns) if "elided_messages" in actions]
    # Jumps: the turns where the cut moved (the elided count changed), after the first cut.
    jumps = [
        i
        for i in cut_turns[1:]
        if turns[i][0] != turns[i - 1][0] and i - 1 in cut_turns and i >= 12
    ]
    assert len(cut_turns) >= 10 and jumps, turns
    errors = [(turns[i][1] - turns[i][2]) / turns[i][2] for i in jumps]
    # A jump changes the tail: only what follows the pinned head is estimated.
    assert max(abs(e) for e in errors) <= 0.02, errors
    assert min(errors) >= -0.01, errors
    assert report["anchored_share"] >= 0.9, report


def test_a_head_before_an_image_of_unknown_size_is_anchored_at_no_less_than_its_count(
    sim, tmp_path
):
    """A system prompt, then a URL image of unknown size that routefit prices at the rule's
    worst case (1,445 tokens on gpt-4o) and the provider counts at its real size (255). The
    system prompt was a checkpoint, its share of the count taken over the whole price, the
    image's worst case included: a next session that began with the same system prompt was
    priced from that share, at 271 tokens for the simulator's 624."""
    alias = "gpt-4o"
    config = gateway_config(
        tmp_path / "c.yaml", [sim_route(alias, sim.base_url)], exact_prompt_headers=True
    )
    system = {"role": "system", "content": "You review photos. " + text(random.Random(5), 600)}
    image = {"url": "https://images.example/a.png#512x512", "detail": "high"}
    photo = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": image}]
    with run_inprocess(config) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)
        estimate, actual, _ = ask(client, alias, [system, {"role": "user", "content": photo}])
        assert estimate >= actual  # the image at its worst case
        settle(gw.base_url, alias, 1)
        question = {"role": "user", "content": "Summarise your rules in one line."}
        estimate, actual, _ = ask(client, alias, [system, question])
    assert estimate >= actual, (estimate, actual)
