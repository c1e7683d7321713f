"""Images priced and offloaded as their providers count them, whatever a client sends.

Each test here reproduced a defect found hunting image pricing and offloading (the docstring of
each says which); the provider facts they rely on are in docs/images.md."""

from __future__ import annotations

import base64
import io
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from wires.test_refused_media_fields import Gateway, _chat_body, gw  # noqa: F401 (its fixture)

from pricing.framing import CLAUDE_TOOLS_PREAMBLE, Framing, default_framing
from pricing.images import default_image_rule
from pricing.messages import Message, parse_request
from pricing.meter import measure_message
from pricing.route import ImageLimits, Route
from strategies.fit import fit
from strategies.offload import offload_images, saves_tokens
from strategies.policy import FitPolicy


def _png(width: int, height: int, seed: int = 0) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (seed % 256, 40, 90)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _route(model: str, window: int = 200_000, **fields: Any) -> Route:
    """A vision route of ``model`` with its default image rule (docs/images.md)."""
    framing = (
        Framing(family="generic", tools_preamble=CLAUDE_TOOLS_PREAMBLE)
        if model.startswith("claude")
        else default_framing(model, "o200k_base")
    )
    return Route(
        alias=model,
        model=model,
        context_window=window,
        max_output_tokens=1024,
        tokenizer="o200k_base",
        framing=framing,
        image_rule=default_image_rule(model, True),
        supports_vision=True,
        **fields,
    )


def _user(*images: str, text: str = "look") -> Message:
    content = [{"type": "text", "text": text}]
    content += [{"type": "image_url", "image_url": {"url": url}} for url in images]
    (message,) = parse_request({"messages": [{"role": "user", "content": content}]}).messages
    return message


def _chat_body_to(model: str, image: dict[str, Any]) -> dict[str, Any]:
    """test_refused_media_fields' chat conversation (a system prompt, a tool round, then the
    image) addressed to ``model``."""
    return {**_chat_body(image), "model": model}


def _tokens(message: Message, route: Route) -> int:
    return measure_message(message, route)[0].total


# -- offloading never makes a request bigger -------------------------------------------------

#: Routes whose image rules price small pictures below or above a placeholder's ~15 tokens:
#: Claude ⌈w·h/750⌉ (a 16x16 icon is 1 token), gpt-4o 85 at least, DeepSeek V4.1 184 at least
#: for 100x100 (docs/images.md § Anthropic, § OpenAI tiles, § DeepSeek V4).
_ROUTES = {m: _route(m) for m in ("claude-sonnet-4-5", "gpt-4o", "deepseek-chat")}


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(sorted(_ROUTES)),
    sizes=st.lists(st.tuples(st.integers(1, 160), st.integers(1, 160)), min_size=1, max_size=3),
)
def test_offloading_a_message_never_makes_it_bigger(
    model: str, sizes: list[tuple[int, int]]
) -> None:
    """Defect: the fit replaced every image of an offloaded message by its placeholder, even
    one the route prices below the placeholder's text (a 16x16 icon on Claude: 1 token, its
    placeholder 15), so "making room" made the request bigger. Now an image goes only when its
    placeholder is cheaper, by the route's own prices."""
    route = _ROUTES[model]
    message = _user(*(_png(w, h, i) for i, (w, h) in enumerate(sizes)))
    out = offload_images(message, route)
    assert _tokens(out, route) <= _tokens(message, route)
    for before, after in zip(message.parts, out.parts, strict=True):
        if before in message.images:  # replaced exactly when the placeholder is cheaper
            assert (after is before) != saves_tokens(before, route)


def test_the_fit_keeps_icons_and_offloads_the_pictures_that_make_room() -> None:
    """The conversation of tests/strategies/test_offload_edges.py (a tiny icon every turn on
    Claude) with a 1000x1000 photo (1,334 tokens) beside each icon: the fit offloads photos
    and keeps every icon, and reports only the photos as offloaded."""
    claude = _route("claude-sonnet-4-5", window=12_000)
    icon, messages = _png(16, 16, 1), [{"role": "system", "content": "s"}]
    for i in range(12):
        photo = {"type": "image_url", "image_url": {"url": _png(1000, 1000, i)}}
        look = {"type": "text", "text": "look " + "word " * 100}
        icon_part = {"type": "image_url", "image_url": {"url": icon}}
        messages.append({"role": "user", "content": [look, icon_part, photo]})
        messages.append({"role": "assistant", "content": "seen " + "word " * 100})
    messages.append({"role": "user", "content": "which was first?"})
    result = fit(parse_request({"messages": messages, "max_tokens": 256}), claude, FitPolicy())
    assert result.estimate <= result.report.budget
    icons = sum(p.url == icon for m in result.messages for p in m.images)
    photos = sum(p.url != icon for m in result.messages for p in m.images)
    assert icons == 12  # every icon stayed
    offloaded = result.report.actions["offloaded_images"]
    assert 0 < offloaded.count == 12 - photos


def test_images_over_the_providers_count_limit_go_however_cheap() -> None:
    """Offloading for the provider's image-count limit is not for room: the provider refuses
    the request with one image too many, so a cheap icon goes too."""
    claude = _route("claude-sonnet-4-5", image_limits=ImageLimits(max_images=2))
    icon = {"type": "image_url", "image_url": {"url": _png(16, 16, 1)}}
    messages: list[dict[str, Any]] = []
    for i in range(4):
        messages.append({"role": "user", "content": [{"type": "text", "text": f"{i}"}, icon]})
        messages.append({"role": "assistant", "content": "ok"})
    messages.pop()  # the conversation ends with the user's turn
    result = fit(parse_request({"messages": messages, "max_tokens": 256}), claude, FitPolicy())
    assert sum(len(m.images) for m in result.messages) <= 2


# -- an image URL refused on a translated route is named as the client wrote it ----------------

#: A host no route here may fetch from (no route has an image_fetch policy): refused before any
#: connection is made.
_URL = "https://images.example.com/cat.png"


def _refused(reply: Any) -> str:
    """The message of an OpenAI-shaped ``image_url_not_allowed`` 400, checked for its shape."""
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "image_url_not_allowed"
    return str(error["param"]), str(error["message"])


def test_a_refused_url_names_the_chat_clients_field(gw: Gateway) -> None:  # noqa: F811
    """Defect: routefit fetches image URLs itself for a provider that wants bytes
    (``proxy.inline``), and named a URL it refused by the path in the *translated* chat body,
    always as ``.image_url.url``: a chat client that wrote ``image_url`` as a string was told
    of a field it never sent."""
    image = {"type": "image_url", "image_url": _URL}
    param, message = _refused(gw.post("/v1/chat/completions", _chat_body_to("claude", image)))
    assert param == "messages[4].content[1].image_url"
    assert message.startswith(f"{param}: ") and "image_url.url" not in message


def test_a_refused_url_names_the_responses_item(gw: Gateway) -> None:  # noqa: F811
    """Defect: a Responses client's ``input_image`` was named ``messages[4].content[1]...``: a
    field of a body the client never wrote (instructions, a call's group and its output are
    internal messages of their own)."""
    body = {
        "model": "claude",
        "max_output_tokens": 16,
        "instructions": "Be brief.",
        "store": False,
        "input": [
            {"role": "user", "content": "Look it up."},
            {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "found it"},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "And this?"},
                    {"type": "input_image", "image_url": _URL},
                ],
            },
        ],
    }
    param, message = _refused(gw.post("/v1/responses", body))
    assert param == "input[3].content[1].image_url"
    assert message.startswith(f"{param}: ") and "messages[" not in message


def test_a_refused_url_names_the_gemini_part(gw: Gateway) -> None:  # noqa: F811
    body = {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Look it up."}]},
            {"role": "model", "parts": [{"text": "Looking."}]},
            {
                "role": "user",
                "parts": [
                    {"text": "And this?"},
                    {"fileData": {"mimeType": "image/png", "fileUri": _URL}},
                ],
            },
        ],
    }
    reply = gw.post("/v1beta/models/claude:generateContent", body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["message"].startswith("contents[2].parts[1].fileData.fileUri: "), error


# -- an image routefit inlines is declared as what its bytes are -------------------------------


def _encoded(fmt: str, size: tuple[int, int] = (40, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(buf, fmt)
    return buf.getvalue()


def _inlined(content_type: str, data: bytes) -> Any:
    """What ``inline_images`` makes of a chat body whose one image URL a server on an allowed
    host answers with ``data`` under ``content_type``: the body, or the refusal raised."""
    import asyncio

    import httpx
    import yaml

    from proxy.config import parse_config
    from proxy.errors import ProxyError
    from proxy.fetch import ImageSizer
    from proxy.inline import inline_images

    route = {
        "model_name": "claude",
        "litellm_params": {"model": "anthropic/claude-sim", "api_key": "k"},
        "model_info": {"supports_vision": True},
        "routefit": {"image_fetch": {"allow_hosts": ["images.example.com"]}},
    }
    raw = {"model_list": [route], "routefit_settings": {"store_path": ":memory:"}}
    rc = parse_config(yaml.safe_load(yaml.safe_dump(raw)), "r.yaml", environ={}).routes["claude"]

    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": content_type}, content=data)

    async def resolve(host: str, port: int) -> list[str]:
        return ["93.184.216.34"]  # a public address: the fetcher's own checks pass

    async def run() -> Any:
        async with httpx.AsyncClient(transport=httpx.MockTransport(serve)) as client:
            fetcher = ImageSizer(client, resolver=resolve)
            image = {"type": "image_url", "image_url": {"url": _URL}}
            body = {"messages": [{"role": "user", "content": [image]}]}
            try:
                return await inline_images(body, rc, fetcher)
            except ProxyError as err:
                return err

    return asyncio.run(run())


def test_an_inlined_image_is_declared_by_its_bytes_not_the_servers_content_type() -> None:
    """Defect: routefit fetches an image URL for a provider that needs bytes and declared it
    with the server's ``Content-Type``. Servers say ``image/jpg`` (not a media type) or serve a
    PNG as ``image/jpeg``; Anthropic refuses both, a 400 for a request the client wrote right
    (docs/images.md § URL images: its media types and byte check)."""
    for content_type, fmt, media in [
        ("image/jpg", "JPEG", "image/jpeg"),
        ("image/jpeg", "PNG", "image/png"),
        ("image/png; charset=binary", "WEBP", "image/webp"),
    ]:
        out = _inlined(content_type, _encoded(fmt))
        (image,) = out["messages"][0]["content"]
        assert image["image_url"]["url"].startswith(f"data:{media};base64,"), (content_type, fmt)


def test_an_inlined_url_that_is_no_image_the_provider_takes_is_refused_by_routefit() -> None:
    """An SVG or a BMP is an ``image/*`` no provider here reads: refused with routefit's 400
    naming the part (``image_url_not_allowed``), not forwarded for the provider to refuse."""
    svg = b"<svg xmlns='http://www.w3.org/2000/svg' width='10' height='10'/>"
    for content_type, data in [("image/svg+xml", svg), ("image/bmp", _encoded("BMP"))]:
        err = _inlined(content_type, data)
        assert getattr(err, "status", None) == 400, err
        assert err.code == "image_url_not_allowed"
        assert "unsupported image format" in err.message
