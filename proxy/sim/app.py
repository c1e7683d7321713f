"""The simulator's ASGI app: provider endpoints, fault injection and the ``/sim/*`` controls."""

from __future__ import annotations

import json
import secrets
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.sim.counting import anthropic_prompt, openai_prompt
from proxy.sim.ctx import Ctx, Handler
from proxy.sim.errors import SimError, anthropic_error, fault_error, openai_error
from proxy.sim.faults import FaultRule
from proxy.sim.state import SimState
from proxy.sim.steps import chunk_delay, decode_body, log_request, plan_request_faults
from proxy.sim.streaming import DisconnectWatch, DropConnection
from proxy.sim.wire_anthropic import collect_pictures as anthropic_pictures
from proxy.sim.wire_anthropic import image_key
from proxy.sim.wire_anthropic import messages as anthropic_messages
from proxy.sim.wire_anthropic import validate as validate_anthropic
from proxy.sim.wire_gemini import gemini_routes
from proxy.sim.wire_openai import chat_completions, embeddings, validate_chat
from proxy.sim.wire_openai import collect_pictures as openai_pictures
from proxy.sim.wire_responses import responses

__all__ = ["SimApp", "create_app"]


def _check_auth(state: SimState, request: Request, wire: str) -> SimError | None:
    keys = state.config.api_keys
    if keys is None:
        return None
    if wire == "anthropic":
        key = request.headers.get("x-api-key")
        if key is None and request.headers.get("authorization", "").startswith("Bearer "):
            key = request.headers["authorization"][7:]
        if not key:
            return SimError(401, "x-api-key header is required", "authentication_error")
        if key not in keys:
            return SimError(401, "invalid x-api-key", "authentication_error")
        return None
    auth = request.headers.get("authorization", "")
    if not auth.startswith("Bearer ") or not auth[7:].strip():
        return SimError(
            401,
            "You didn't provide an API key. You need to provide your API key in an Authorization "
            "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            "invalid_request_error",
        )
    key = auth[7:].strip()
    if key not in keys:
        shown = f"{key[:3]}*****{key[-4:]}" if len(key) > 8 else "*****"
        return SimError(
            401,
            f"Incorrect API key provided: {shown}. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            "invalid_request_error",
            code="invalid_api_key",
        )
    return None


def _check_headers(state: SimState, request: Request, wire: str) -> None:
    err = _check_auth(state, request, wire)
    if err is not None:
        raise err
    needs_version = wire == "anthropic" and state.config.require_anthropic_version
    if needs_version and "anthropic-version" not in request.headers:
        raise SimError(400, "anthropic-version: header is required")


def _unparsable(wire: str, parse_error: str) -> SimError:
    """Each provider's own words for a body that is not JSON."""
    if wire == "anthropic":
        return SimError(400, f"There was an error parsing the body of your request: {parse_error}")
    return SimError(
        400,
        "We could not parse the JSON body of your request. (HINT: This likely means "
        "you aren't using your HTTP library correctly. The OpenAI API expects a JSON "
        "payload, but what was sent was not valid JSON. If you have trouble figuring "
        "out how to fix this, please open an issue at "
        "https://github.com/openai/openai-python.)",
    )


def _provider_endpoint(
    state: SimState, wire: str, handler: Handler
) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a wire's handler in what every provider request goes through, in the providers'
    order: logged, then auth, then injected faults, then the body's JSON, then the handler."""
    render = anthropic_error if wire == "anthropic" else openai_error

    async def endpoint(request: Request) -> Response:
        number = state.next_id()
        raw = await request.body()
        watch: DisconnectWatch = request.scope["sim.watch"]
        watch.start()  # the body is read: from now on receive() only reports a disconnect
        body, parse_error = decode_body(raw)
        entry = log_request(state, request, number, raw, body, parse_error)
        try:
            _check_headers(state, request, wire)
            plan = plan_request_faults(state, request, entry)
            if plan.delay and await watch.sleep(plan.delay):
                return DropConnection()  # the client gave up while we were "thinking"
            if plan.reset:
                return DropConnection()
            if plan.status is not None:
                raise fault_error(wire, plan.status)
            if parse_error is not None:
                raise _unparsable(wire, parse_error)
            ctx = Ctx(state, request, body, number, plan, chunk_delay(state, request), entry)
            return await handler(ctx)
        except SimError as exc:
            return render(exc, f"req_sim{number:06d}")

    return endpoint


def _json_body(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except json.JSONDecodeError as exc:
        raise SimError(400, f"invalid JSON: {exc}") from None


def _bad_control(exc: Exception) -> Response:
    return JSONResponse({"error": {"message": str(exc), "type": "invalid_request_error"}}, 400)


async def _image(request: Request) -> Response:
    """A generated image of any size, for image-URL tests (``/sim/images/640x480.png``)."""
    import io

    from PIL import Image

    width, height = request.path_params["width"], request.path_params["height"]
    fmt = request.path_params["fmt"].lower()
    formats = {"png": "PNG", "jpg": "JPEG", "jpeg": "JPEG", "gif": "GIF", "webp": "WEBP"}
    if fmt not in formats or not (0 < width <= 8192 and 0 < height <= 8192):
        return JSONResponse({"error": {"message": "no such image"}}, 404)
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (width % 256, height % 256, 128)).save(buf, formats[fmt])
    media = "image/jpeg" if formats[fmt] == "JPEG" else f"image/{fmt}"
    return Response(buf.getvalue(), media_type=media)


async def _health(request: Request) -> Response:
    return JSONResponse({"ok": True})


def _fault_rules(raw: Any) -> tuple[list[FaultRule], bool]:
    """(the rules in a ``POST /sim/faults`` body, whether they replace the queue)."""
    replace = False
    if isinstance(raw, dict):
        replace = bool(raw.get("replace"))
        raw = raw.get("faults")
    if not isinstance(raw, list):
        raise ValueError('expected a list of faults or {"faults": [...]}')
    return [FaultRule.from_json(r) for r in raw], replace


class _Controls:
    """The endpoints that are not a provider's: model listing and the ``/sim/*`` controls."""

    def __init__(self, state: SimState) -> None:
        self.state = state

    async def models(self, request: Request) -> Response:
        data = [
            {
                "id": m.name,
                "object": "model",
                "created": 0,
                "owned_by": m.owned_by,
                "context_window": m.context_window,
                "max_output_tokens": m.max_output,
                "wire": m.wire,
            }
            for m in self.state.models.values()
        ]
        return JSONResponse({"object": "list", "data": data})

    async def model(self, request: Request) -> Response:
        name = request.path_params["name"]
        m = self.state.model(name)
        if m is None:
            return openai_error(
                SimError(
                    404, f"The model '{name}' does not exist", param="model", code="model_not_found"
                )
            )
        return JSONResponse({"id": m.name, "object": "model", "created": 0, "owned_by": m.owned_by})

    async def image(self, request: Request) -> Response:
        """``_image``, logged like a provider request: a test that says nobody fetched an
        image URL (an image host refused by routefit's fetch policy) can then fail."""
        log_request(self.state, request, self.state.next_id(), b"", None, None)
        return await _image(request)

    async def requests(self, request: Request) -> Response:
        limit = request.query_params.get("limit")
        path = request.query_params.get("path")
        return JSONResponse({"requests": self.state.requests(int(limit) if limit else None, path)})

    async def stats(self, request: Request) -> Response:
        return JSONResponse(self.state.stats_json())

    async def reset(self, request: Request) -> Response:
        self.state.reset()
        return JSONResponse({"ok": True})

    async def faults(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.state.faults.clear()
        elif request.method == "POST":
            try:
                rules, replace = _fault_rules(_json_body(await request.body()))
            except (ValueError, SimError) as exc:
                return _bad_control(exc)
            if replace:
                self.state.faults.clear()
            self.state.faults.add(rules)
        return JSONResponse({"faults": self.state.faults.as_json()})

    async def config(self, request: Request) -> Response:
        if request.method == "POST":
            try:
                values = _json_body(await request.body())
                if not isinstance(values, dict):
                    raise ValueError("expected a JSON object")
                self.state.config.update(values)
            except (ValueError, TypeError, SimError) as exc:
                return _bad_control(exc)
        return JSONResponse(self.state.config.as_json())

    async def count(self, request: Request) -> Response:
        """The prompt size the simulator would bill, without answering or touching the cache."""
        state = self.state
        try:
            body = _json_body(await request.body())
            m = state.model(body.get("model", "")) if isinstance(body, dict) else None
            if m is None:
                raise SimError(404, "unknown or missing model", code="model_not_found")
            if m.wire == "anthropic":
                validate_anthropic(body, strict=state.config.strict_params)
                pics = await anthropic_pictures(state, body, m)
                prompt = anthropic_prompt(body, m, lambda b: pics[image_key(b)])
            else:
                validate_chat(body, strict=state.config.strict_params)
                urls = await openai_pictures(state, body, m)
                prompt = openai_prompt(body, m, lambda part: urls[part["image_url"]["url"]])
        except SimError as exc:
            return openai_error(exc)
        return JSONResponse(
            {"model": m.name, "prompt_tokens": prompt.total, "breakdown": prompt.breakdown}
        )


def _control_routes(state: SimState) -> list[Route]:
    c = _Controls(state)
    return [
        Route("/v1/models", c.models, methods=["GET"]),
        Route("/v1/models/{name:path}", c.model, methods=["GET"]),
        Route("/sim/health", _health, methods=["GET"]),
        Route("/sim/images/{width:int}x{height:int}.{fmt}", c.image, methods=["GET"]),
        Route("/sim/requests", c.requests, methods=["GET"]),
        Route("/sim/stats", c.stats, methods=["GET"]),
        Route("/sim/reset", c.reset, methods=["POST"]),
        Route("/sim/faults", c.faults, methods=["GET", "POST", "DELETE"]),
        Route("/sim/config", c.config, methods=["GET", "POST"]),
        Route("/sim/count", c.count, methods=["POST"]),
    ]


class SimApp:
    """The outer ASGI layer: hands handlers the connection (transport, disconnect watch),
    counts requests in flight and records each response's status."""

    def __init__(self, state: SimState, app: ASGIApp) -> None:
        self.state = state
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        owner = getattr(receive, "__self__", None)
        scope["sim.transport"] = getattr(owner, "transport", None)
        watch = DisconnectWatch(receive)
        scope["sim.watch"] = watch
        state = self.state
        counted = not scope["path"].startswith("/sim/")
        # a provider's edge sets a cookie on a client that sent none (``_edge_cookie``)
        new_client = counted and not any(name == b"cookie" for name, _ in scope["headers"])

        async def tracking_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                entry = scope.get("sim.entry")
                if entry is not None:
                    entry["status"] = message["status"]
                if new_client:
                    message = {**message, "headers": [*message["headers"], _edge_cookie()]}
                if counted:
                    with state.lock:
                        state.stats.by_status[message["status"]] += 1
            await send(message)

        if counted:
            with state.lock:
                state.stats.requests_total += 1
                state.stats.in_flight += 1
        try:
            await self.app(scope, receive, tracking_send)
        finally:
            watch.stop()
            if counted:
                with state.lock:
                    state.stats.in_flight -= 1


def _edge_cookie() -> tuple[bytes, bytes]:
    """The cookie a provider's edge sets on a client that sent none (api.openai.com's
    Cloudflare sets ``__cf_bm`` so), each one new: a client that keeps cookies sends it back."""
    value = f"__cf_bm={secrets.token_hex(16)}; path=/; HttpOnly; SameSite=None"
    return b"set-cookie", value.encode()


async def _server_error(request: Request, exc: Exception) -> Response:
    detail = "".join(traceback.format_exception(exc))[-2000:]
    return JSONResponse(
        {
            "error": {
                "message": f"sim internal error: {exc!r}\n{detail}",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        },
        status_code=500,
    )


def create_app(state: SimState | None = None) -> SimApp:
    """The ASGI app for a state (a fresh one with the built-in models by default)."""
    state = state or SimState()
    routes = [
        Route(
            "/v1/chat/completions",
            _provider_endpoint(state, "openai", chat_completions),
            methods=["POST"],
        ),
        Route(
            "/v1/embeddings",
            _provider_endpoint(state, "openai", embeddings),
            methods=["POST"],
        ),
        Route(
            "/v1/responses",
            _provider_endpoint(state, "openai", responses),
            methods=["POST"],
        ),
        Route(
            "/v1/messages",
            _provider_endpoint(state, "anthropic", anthropic_messages),
            methods=["POST"],
        ),
        *gemini_routes(state),
        *_control_routes(state),
    ]
    app = Starlette(routes=routes, exception_handlers={Exception: _server_error})
    return SimApp(state, app)
