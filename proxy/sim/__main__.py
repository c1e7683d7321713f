"""``python -m proxy.sim --port P [--model NAME ...]``: the simulator as a standalone server.

Prints ``sim listening on http://HOST:PORT`` (flushed) once it accepts requests, so a parent
process can wait for that line (``--port 0`` picks a free port and the line tells which).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import fields

from proxy.sim.models import BUILTIN_MODELS, SimModel, get_builtin
from proxy.sim.server import serve_forever
from proxy.sim.state import SimConfig


def _model_from_json(text: str) -> SimModel:
    raw = json.loads(text)
    base = raw.pop("base", None)
    known = {f.name for f in fields(SimModel)}
    unknown = set(raw) - known
    if unknown:
        raise SystemExit(f"--model-json: unknown field(s) {sorted(unknown)}")
    if "aliases" in raw:
        raw["aliases"] = tuple(raw["aliases"])
    if base is not None:
        from dataclasses import replace

        return replace(get_builtin(base), **raw)
    return SimModel(**raw)


def add_arguments(parser: argparse.ArgumentParser, default_port: int = 0) -> None:
    """The simulator's options, shared by ``python -m proxy.sim`` and ``routefit sim``."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port", type=int, default=default_port, help=f"0 = a free port (default {default_port})"
    )
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help=f"a built-in model to serve (repeatable; default all: {', '.join(BUILTIN_MODELS)})",
    )
    parser.add_argument(
        "--model-json",
        action="append",
        default=[],
        help='a custom model as JSON SimModel fields, e.g. \'{"base": "gpt-4o", "name": "x", '
        '"context_window": 4096}\' (repeatable)',
    )
    parser.add_argument(
        "--api-key", action="append", default=None, help="require this key (repeatable)"
    )
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between SSE events")
    parser.add_argument(
        "--fetch-loopback-images",
        action="store_true",
        help="fetch image URLs on loopback addresses, as a provider fetches URLs (default: "
        "never fetch; a URL without a #WxH hint is assumed 1024x1024)",
    )
    parser.add_argument("--log-level", default="warning")


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM with the options of :func:`add_arguments`."""
    try:
        models = [get_builtin(name) for name in args.model] + [
            _model_from_json(j) for j in args.model_json
        ]
    except KeyError as exc:
        raise SystemExit(f"--model: {exc.args[0]}") from None
    except (ValueError, TypeError) as exc:
        raise SystemExit(f"--model-json: {exc}") from None
    config = SimConfig(
        api_keys=frozenset(args.api_key) if args.api_key else None,
        chunk_delay=args.chunk_delay,
        fetch_loopback_images=args.fetch_loopback_images,
    )

    def ready(host: str, port: int) -> None:
        try:
            print(f"sim listening on http://{host}:{port}", flush=True)
        except BrokenPipeError:  # nobody reads stdout any more: keep serving, quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    serve_forever(
        models or None,
        host=args.host,
        port=args.port,
        config=config,
        log_level=args.log_level,
        on_ready=ready,
    )
    return 0


def main(
    argv: list[str] | None = None, prog: str = "python -m proxy.sim", default_port: int = 0
) -> int:
    """Also ``routefit sim`` (with its own ``prog`` and a fixed default port)."""
    parser = argparse.ArgumentParser(prog=prog, description="routefit's LLM provider simulator")
    add_arguments(parser, default_port)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
