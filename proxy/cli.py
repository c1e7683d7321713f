"""The ``routefit`` command.

Every failure a user can cause (unreadable file, invalid JSON, bad config, unknown model alias)
ends with exit status 2 and one line on stderr naming the cause — never a traceback; output
into a closed pipe ends quietly (``main``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

if TYPE_CHECKING:
    from proxy.serve_settings import ServeSettings

__all__ = ["Progress", "fit_table", "main"]

#: ``routefit sim``'s default port (``routefit serve`` defaults to 4000).
SIM_PORT = 4001


class UsageError(Exception):
    """A mistake on the command line or in an input file: exit 2 with this message."""


def _fail(message: str) -> NoReturn:
    print(f"routefit: {message}", file=sys.stderr)
    raise SystemExit(2)


class Progress:
    """One status line on stderr while a command works on something slow (loading a
    tokenizer, reading the store route by route); silent when stderr is not a terminal, so
    scripts and CI logs see only the result."""

    def __init__(self, stream: Any = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.width = 0

    def __call__(self, message: str) -> None:
        if self.enabled:
            line = f"routefit: {message}"
            self.stream.write("\r" + line.ljust(self.width))
            self.stream.flush()
            self.width = max(self.width, len(line))

    def done(self) -> None:
        if self.enabled and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def _read_body(path: str) -> Any:
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: invalid JSON: {exc.msg} at line {exc.lineno}") from None


def _load(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(config, route config, parsed request) for ``price`` / ``fit``, with the route's
    tokenizer loaded (the slow part, shown as progress)."""
    from pricing.messages import RequestError, parse_request
    from pricing.tokenizers import get_tokenizer
    from proxy.config import ConfigError, load_config

    progress = Progress()
    progress(f"loading {args.config}")
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    for warning in config.warnings:
        print(f"routefit: warning: {warning}", file=sys.stderr)
    body = _read_body(args.file)
    try:
        request = parse_request(body)
    except RequestError as exc:
        raise UsageError(f"{args.file}: {exc.message}") from None
    alias = args.model or request.model
    if not alias:  # as the gateway says it on every wire (param "model")
        raise UsageError(f'{args.file}: model is required (the body\'s "model", or --model)')
    rc = config.route(alias)
    if rc is None:
        known = ", ".join(sorted(config.routes))
        raise UsageError(f"unknown model alias {alias!r} (configured: {known})")
    progress(f"loading tokenizer {rc.route.tokenizer}")
    get_tokenizer(rc.route.tokenizer).count("warm up")
    progress(f"pricing {len(request.messages)} message(s) for {alias}")
    progress.done()
    return config, rc, request


def _price(args: argparse.Namespace) -> int:
    from pricing.messages import RequestError
    from pricing.meter import measure

    _, rc, request = _load(args)
    try:
        pressure = measure(request, rc.route)
    except RequestError as exc:
        raise UsageError(f"{args.file}: {exc.message}") from None
    if args.json:
        print(json.dumps(pressure_json(pressure), indent=2))
    else:
        print(pressure_table(pressure, rc.route))
    return 0


def _fit(args: argparse.Namespace) -> int:
    from pricing.messages import RequestError
    from proxy.wires.base import capped_output
    from strategies.fit import FitError
    from strategies.output import fit_output

    _, rc, request = _load(args)
    try:
        result = fit_output(request, rc.route, rc.policy)
    except RequestError as exc:
        raise UsageError(f"{args.file}: {exc.message}") from None
    except FitError as exc:
        raise UsageError(f"context_length_exceeded: {exc}") from None
    if args.json:
        body = capped_output(result.body, result, ("max_completion_tokens", "max_tokens"))
        print(json.dumps({"request": body, "report": result.report.as_dict()}, indent=2))
        return 0
    print(fit_table(result, len(request.messages)))
    return 0


def _log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging config with routefit's format (``LEVEL logger: message``) on the root
    logger: applied in every worker process (``logging.basicConfig`` in the parent would reach
    only the parent, and ``--workers N`` lost the prefix)."""
    from uvicorn.config import LOGGING_CONFIG

    config = json.loads(json.dumps(LOGGING_CONFIG))
    config["formatters"]["routefit"] = {"format": "%(levelname)s %(name)s: %(message)s"}
    config["handlers"]["routefit"] = {
        "formatter": "routefit",
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
    }
    config["root"] = {"handlers": ["routefit"], "level": level.upper()}
    # One line per image fetch is noise.
    config["loggers"]["httpx"] = {"level": "WARNING"}
    return dict(config)


def _serve_settings(args: argparse.Namespace) -> ServeSettings:
    """The flags the app and its protocol read, as one value (``proxy.serve_settings``)."""
    from proxy.serve_settings import ServeSettings

    return ServeSettings(
        header_timeout=args.header_timeout,
        max_header_bytes=args.max_header_bytes,
        body_timeout=args.body_timeout,
        body_min_rate=args.body_min_rate,
        drain_seconds=args.drain_seconds,
        workers=args.workers,
    )


def _share_metrics(workers: int) -> None:
    """Each worker is its own process with its own counters; prometheus_client's multiprocess
    mode shares them through files, so /metrics shows all workers. The library reads only
    ``PROMETHEUS_MULTIPROC_DIR``, as it is imported in each worker: an environment variable."""
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        import atexit
        import shutil
        import tempfile

        metrics_dir = tempfile.mkdtemp(prefix="routefit-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        atexit.register(shutil.rmtree, metrics_dir, ignore_errors=True)


def _app_for_uvicorn(path: str, config: Any, settings: ServeSettings, workers: int) -> Any:
    """uvicorn's ``app`` (a factory): one worker builds the app here from the config already
    loaded and the settings as values; spawned workers need an import string, and get the
    config path and settings as one record (``proxy.serve_settings``)."""
    if workers > 1:
        from proxy.serve_settings import hand_over

        hand_over(path, settings)
        return "proxy.app:create_app_from_env"
    import functools

    from proxy.app import create_app

    return functools.partial(create_app, config, settings=settings)


def _check_tls(cert: str, key: str, password: str | None) -> None:
    """Load the certificate and key as the server will: a file that is not PEM, a key that is
    not the certificate's or a wrong password is a one-line error before anything starts, not
    uvicorn's ``ssl.SSLError`` traceback after "serving ... on https" was printed."""
    import ssl

    for path in (cert, key):
        if not os.path.isfile(path):
            raise UsageError(f"{path}: no such file")
    try:
        # No password given: an encrypted key is refused here, never an OpenSSL prompt on the
        # terminal (a container has none; `check` must not wait on one).
        given = password if password is not None else (lambda: "")
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key, given)
    except ssl.SSLError as exc:
        raise UsageError(
            f"TLS certificate {cert} and key {key} cannot be loaded: {exc.reason or exc} "
            "(both PEM, the key the certificate's, its password given if it is encrypted)"
        ) from None
    except OSError as exc:
        raise UsageError(f"TLS {cert} / {key}: cannot read: {exc.strerror or exc}") from None


def _tls_and_proxies(args: argparse.Namespace, config: Any) -> dict[str, Any]:
    """uvicorn's TLS and forwarded-header options: the command line's, else the config's
    (``routefit_settings.tls`` / ``trusted_proxies``). Forwarded headers are believed only from
    the listed peers: from anyone else they would let a client pick its own address (and so
    escape the login throttle) or claim https."""
    from proxy.config.access import check_proxy_entry

    access = config.settings.access
    cert = args.ssl_certfile or access.tls_certfile
    key = args.ssl_keyfile or access.tls_keyfile
    if (cert is None) != (key is None):
        raise UsageError("--ssl-certfile and --ssl-keyfile go together")
    password = args.ssl_keyfile_password or access.tls_keyfile_password
    if cert is not None and key is not None:
        _check_tls(cert, key, password)
    trusted = list(access.trusted_proxies)
    if args.forwarded_allow_ips is not None:
        try:
            trusted = [
                check_proxy_entry(i) for i in args.forwarded_allow_ips.split(",") if i.strip()
            ]
        except ValueError as exc:
            raise UsageError(f"--forwarded-allow-ips: {exc}") from None
    options: dict[str, Any] = {"proxy_headers": bool(trusted)}
    if trusted:
        options["forwarded_allow_ips"] = trusted
    if cert is not None:
        options.update(
            ssl_certfile=cert,
            ssl_keyfile=key,
            ssl_keyfile_password=password,
        )
    return options


def _warn_windows(config: Any) -> None:
    """What ``routefit check`` refuses a config for, said at start-up too: a route whose window
    cannot hold its own reservation and margin refuses every request that sets no smaller cap,
    but the others serve, so serve starts and says which route will fail."""
    from proxy.config.describe import window_problems

    errors, _ = window_problems(config)
    for error in errors:
        print(f"routefit: warning: {error}", file=sys.stderr)


def _serve(args: argparse.Namespace) -> int:
    import logging.config
    import signal

    import uvicorn

    from proxy import hangup
    from proxy.config import ConfigError, load_config
    from proxy.protocol import with_limits

    hangup.ignore()  # a SIGHUP before the app takes it (a reload) must not end the server
    path = os.path.abspath(args.config)
    try:
        config = load_config(path)  # fail here, with exit 2, rather than in every worker
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    _warn_windows(config)
    network = _tls_and_proxies(args, config)
    settings = _serve_settings(args)
    _share_metrics(args.workers)
    log_config = _log_config(args.log_level)
    logging.config.dictConfig(log_config)
    scheme = "https" if "ssl_certfile" in network else "http"
    auth = "OPEN (no keys configured)" if config.open else "keys required"
    # One worker: bound before the app starts (``_listen``), so a port in use is the first
    # and only complaint. Several: uvicorn binds in this process before spawning them.
    sock = _listen(args.host, args.port) if args.workers == 1 else None
    print(
        f"routefit: serving {len(config.routes)} route(s) on {scheme}://{args.host}:{args.port} "
        f"with {args.workers} worker(s); auth: {auth}; store: {_store_where(config.settings)}",
        file=sys.stderr,
    )
    # uvicorn re-raises the SIGTERM it drained on once it is done; a drained shutdown is a
    # clean exit (status 0), not a death by signal.
    signal.signal(signal.SIGTERM, lambda sig, frame: None)
    options: dict[str, Any] = dict(
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        http=with_limits(settings.header_timeout, settings.max_header_bytes),
        ws="none",  # no WebSocket routes: uvicorn's websockets stack stays unimported (1.3 MiB)
        log_level=args.log_level,
        log_config=log_config,
        access_log=args.access_log,
        server_header=False,
        timeout_keep_alive=args.keep_alive,
        limit_concurrency=args.max_connections or None,
        # typed int by uvicorn, used as asyncio.timeout's seconds: a float is what it takes
        timeout_graceful_shutdown=settings.drain_seconds,
        **network,
    )
    app = _app_for_uvicorn(path, config, settings, args.workers)
    if sock is None:
        # uvicorn.run's own supervisor, but SIGHUP passed on to each worker (proxy.hangup)
        hangup.run_workers(uvicorn.Config(app, **options))
        return 0
    return _serve_one(app, sock, options)


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the app starts: its start-up logs "routefit ready",
    which must not precede a port-in-use error (with one worker, uvicorn would bind only after
    the app's start-up)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def _serve_one(app: Any, sock: socket.socket, options: dict[str, Any]) -> int:
    """One worker on a socket bound first (``_listen``); what ``uvicorn.run`` does otherwise."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, **options))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0 if server.started else 3  # 3: uvicorn's start-up failure


def _store_where(settings: Any) -> str:
    """Which store a command uses, for its first lines: the embedded file's absolute path, or
    the Redis URL without its password."""
    from proxy.config.describe import redact_url

    store = settings.store
    if store.uses_redis:
        url = redact_url(store.redis_url) if store.redis_url else "(sentinels)"
        return f"redis {url} ({store.redis_mode})"
    return f"sqlite {store.store_path}"


def _calibration(args: argparse.Namespace) -> int:
    import asyncio
    import dataclasses

    from pricing.calibration import fit_correction
    from proxy.calibrator import summarize
    from proxy.config import ConfigError, load_config
    from proxy.store import StoreUnavailable, connect_store

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    settings = config.settings
    policy = settings.calibration
    store_settings = settings.store
    print(f"routefit: store {_store_where(settings)}", file=sys.stderr)
    path = store_settings.store_path
    if not store_settings.uses_redis and path != ":memory:" and not os.path.exists(path):
        # Reading must not create: an empty database here would hide where the real one is.
        print(f"routefit: {path} does not exist: nothing learnt yet", file=sys.stderr)
        store_settings = dataclasses.replace(store_settings, store_path=":memory:")

    progress = Progress()

    async def collect() -> dict[str, Any]:
        store = connect_store(store_settings)
        try:
            out = {}
            for i, (alias, rc) in enumerate(config.routes.items(), 1):
                progress(f"reading calibration {i}/{len(config.routes)}: {alias}")
                samples = await store.recent_samples(alias, policy.window)
                correction = fit_correction(
                    samples, policy, rc.route.exact_text, rc.route.tokenizer
                )
                out[alias] = summarize(samples, correction)
            return out
        except StoreUnavailable as exc:
            raise UsageError(f"store {store.name} is unavailable: {exc}") from None
        finally:
            progress.done()
            await store.close()

    routes = asyncio.run(collect())
    if args.json:
        print(json.dumps(routes, indent=2))
        return 0
    print(
        f"{'route':<24}{'samples':>8}{'text':>8}{'framing':>9}{'images':>8}"
        f"{'err p50':>9}{'err p95':>9}"
    )
    for alias, r in routes.items():
        f, e = r["factors"], r["relative_error"] or {}
        p50 = f"{e['p50']:+.1%}" if e else "-"
        p95 = f"{e['p95']:+.1%}" if e else "-"
        print(
            f"{alias:<24}{r['samples']:>8}{f['text']:>8.3f}{f['framing']:>9.3f}"
            f"{f['images']:>8.3f}{p50:>9}{p95:>9}"
        )
    return 0


def _preview(message: Any, width: int = 60) -> str:
    """A one-line glimpse of a wire message: its text, images and tool calls."""
    content = message.get("content")
    bits: list[str] = []
    if isinstance(content, str):
        bits.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                bits.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                bits.append(f"[{part.get('type', 'part')}]")
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {} if isinstance(call, dict) else {}
        bits.append(f"-> {function.get('name', '?')}()")
    text = " ".join(" ".join(bits).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def fit_table(result: Any, sent_before: int) -> str:
    """``routefit fit`` without --json: the report, then the request to send, message by
    message (tokens as the route counts them, and a glimpse of each)."""
    r = result.report
    lines = [
        f"route {r.route}  budget {r.budget:,}  estimate {r.estimate_before:,} -> "
        f"{r.estimate_after:,}",
        f"actions: {r.actions.header()}",
    ]
    if r.output is not None and r.output.lowered:
        lines.append(f"  output cap {r.output.describe()} (docs/fitting.md, Output limits)")
    lines += [f"  {action.describe()}" for action in r.actions.taken()]
    wire = list(result.body.get("messages") or [])
    lines.append(f"messages: {sent_before} -> {len(wire)}")
    lines.append(f"request to send ({len(wire)} messages; --json prints the body):")
    lines.append(f"{'#':>4}  {'role':<10}{'tokens':>8}  content")
    totals = {m.index: m.total for m in result.pressure.messages}
    for i, message in enumerate(wire):
        tokens = totals.get(i)
        shown = f"{tokens:,}" if tokens is not None else "-"
        lines.append(f"{i:>4}  {message.get('role', '?'):<10}{shown:>8}  {_preview(message)}")
    other = {k: v for k, v in result.body.items() if k not in ("messages", "model")}
    if other:
        lines.append("other fields: " + ", ".join(sorted(other)))
    return "\n".join(lines)


def _check(args: argparse.Namespace) -> int:
    from pricing.tokenizers import TokenizerError, get_tokenizer
    from proxy.config import ConfigError, load_config
    from proxy.config.describe import describe, window_problems

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    for rc in config.every_deployment():  # what serve would fail on at start-up
        try:
            get_tokenizer(rc.route.tokenizer)
        except TokenizerError as exc:
            where = f"{rc.route.alias}@{rc.deployment_id}"
            raise UsageError(f"{config.path}: route {where!r}: {exc}") from None
    access = config.settings.access
    if access.tls_certfile is not None and access.tls_keyfile is not None:
        _check_tls(access.tls_certfile, access.tls_keyfile, access.tls_keyfile_password)
    errors, _ = window_problems(config)  # what every request to a route would fail on
    if errors:
        raise UsageError("\nroutefit: ".join(errors))
    info = describe(config)
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print(check_text(info))
    return 0


def check_text(info: dict[str, Any]) -> str:
    """``routefit check`` for a person: one block per route, one line per team."""
    lines = [f"{info['config']}: valid, {len(info['routes'])} route(s)"]
    for alias, r in info["routes"].items():
        rule = r["image_rule"]["kind"]
        fetch = ", ".join(r["image_fetch"]["allow_hosts"]) or "off"
        fit, out = r["fit"], r["output"]
        lines += [
            f"route {alias} -> {r['model']}",
            f"  transport {r['transport']}  api base {r['api_base'] or '(the provider default)'}"
            f"  key {'set' if r['api_key_set'] else 'unset'}",
            f"  window {r['context_window']:,}  max output {r['max_output_tokens']:,}"
            f"  tokenizer {r['tokenizer']}  framing {r['framing']['family']}",
            f"  images {rule}  vision {'yes' if r['supports_vision'] else 'no'}  fetch {fetch}",
            f"  fit strategies {','.join(fit['strategies'])}  output reserve "
            f"{out['reserve']:,} (shrinks to {out['min_reserve']:,})  safety margin "
            f"{out['safety_margin']:,}  pin {fit['pin_fraction']}  low water {fit['low_water']}",
        ]
        others = info.get("deployments", {}).get(alias, [])
        for d in [r, *others] if others else []:  # an alias's deployments, when several
            lines.append(
                f"  deployment {d['deployment_id']} -> {d['model']}  api base "
                f"{d['api_base'] or '(the provider default)'}  window {d['context_window']:,}"
                f"  tokenizer {d['tokenizer']}  weight {d['weight']:g}"
                + (f"  rpm {d['rpm']}" if d["rpm"] else "")
                + (f"  tpm {d['tpm']}" if d["tpm"] else "")
                + (f"  order {d['order']}" if d["order"] is not None else "")
            )
    if not info["teams"]:
        lines.append(f"teams: none, {info['mode']}")
    for team in info["teams"]:
        routes = team["routes"] if team["routes"] == "all" else ",".join(team["routes"])
        quotas = " ".join(f"{k}={v}" for k, v in team["quotas"].items()) or "no quotas"
        lines.append(f"team {team['id']}: {team['keys']} key(s)  routes {routes}  {quotas}")
    store = info["store"]
    where = store.get("url") or store.get("path")
    lines.append(
        f"store {store['kind']} {where}  budget failure mode {store['budget_failure_mode']}"
        f"  admin key {'set' if info['admin_key_set'] else 'unset'}"
    )
    lines += [f"warning: {w}" for w in info["warnings"]]
    lines += [f"unset: {m}" for m in info["missing_env"]]
    return "\n".join(lines)


def pressure_json(pressure: Any) -> dict[str, Any]:
    return {
        "route": pressure.route,
        "total": pressure.total,
        "tools": pressure.tools,
        "priming": pressure.priming,
        "exact": pressure.exact,
        "messages": [
            {
                "index": m.index,
                "role": m.role,
                "text": m.text,
                "framing": m.framing,
                "images": m.images,
                "total": m.total,
            }
            for m in pressure.messages
        ],
        "image_details": [
            {
                "message": d.message,
                "part": d.part,
                "rule": d.rule,
                "detail": d.detail,
                "width": d.width,
                "height": d.height,
                "tokens": d.tokens,
                "sized": d.sized,
                **({"placeholder": d.placeholder} if d.placeholder is not None else {}),
            }
            for d in pressure.image_details
        ],
    }


def pressure_table(pressure: Any, route: Any) -> str:
    exact = "exact" if pressure.exact else "approximate (calibration corrects it)"
    lines = [
        f"route {route.alias} -> {route.model}  tokenizer {route.tokenizer}  "
        f"framing {route.framing.family}  images {route.image_rule.kind}  [{exact}]",
        f"{'#':>4}  {'role':<10}{'text':>9}{'framing':>9}{'images':>9}{'total':>9}",
    ]
    for m in pressure.messages:
        lines.append(
            f"{m.index:>4}  {m.role:<10}{m.text:>9,}{m.framing:>9,}{m.images:>9,}{m.total:>9,}"
        )
    for d in pressure.image_details:
        size = f"{d.width}x{d.height}" if d.width is not None else "unknown size"
        how = "" if d.sized else " (worst case)"
        lines.append(
            f"      image m{d.message}.p{d.part}: {size} detail={d.detail} "
            f"{d.rule} -> {d.tokens:,}{how}"
        )
    lines.append(f"tools {pressure.tools:,}  priming {pressure.priming:,}")
    lines.append(f"total {pressure.total:,} tokens")
    return "\n".join(lines)


def _port(text: str) -> int:
    """A TCP port: out of range, ``bind`` raised OverflowError, a traceback."""
    port = _count(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return port


def _count(text: str) -> int:
    """A whole number >= 0 (a size, a limit where 0 means none)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def _workers(text: str) -> int:
    """At least one: 0 or fewer started a supervisor that serves nothing."""
    value = _count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 1 worker")
    return value


def _seconds(text: str) -> float:
    """A finite number >= 0: a negative deadline or rate was taken as given ("draining for up
    to -1 s") and ``nan`` failed in uvicorn's shutdown with a traceback."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number >= 0")
    return value


def _add_serve(serve: argparse.ArgumentParser) -> None:
    """``routefit serve``'s options: where to listen, and the limits on slow or many clients."""
    from proxy.serve_settings import DEFAULTS

    serve.add_argument(
        "--config", required=True, help="routefit / LiteLLM YAML config (SIGHUP reloads it)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=4000, help="port (default 4000)")
    serve.add_argument("--workers", type=_workers, default=1, help="worker processes (default 1)")
    serve.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    serve.add_argument("--access-log", action="store_true", help="log every request")
    limits = serve.add_argument_group("connection limits (per worker)")
    for flag, default, helps in (
        (
            "--header-timeout",
            DEFAULTS.header_timeout,
            "seconds a connection may take to send its request headers",
        ),
        (
            "--body-timeout",
            DEFAULTS.body_timeout,
            "seconds of silence allowed while a request body arrives",
        ),
        (
            "--body-min-rate",
            DEFAULTS.body_min_rate,
            "bytes/s a body must average after --body-timeout (0: any)",
        ),
        ("--keep-alive", 5.0, "seconds an idle kept-alive connection stays open"),
        (
            "--drain-seconds",
            DEFAULTS.drain_seconds,
            "after SIGTERM, seconds in-flight requests may take to finish",
        ),
    ):
        limits.add_argument(
            flag, type=_seconds, default=default, help=f"{helps} (default {default:g})"
        )
    limits.add_argument(
        "--max-header-bytes",
        type=_count,
        default=DEFAULTS.max_header_bytes,
        help="size of a request's headers before it gets 431 "
        f"(default {DEFAULTS.max_header_bytes})",
    )
    limits.add_argument(
        "--max-connections",
        type=_count,
        default=2048,
        help="connections plus requests in flight before new requests get 503 (0: no limit)",
    )
    net = serve.add_argument_group(
        "TLS and proxies (default: routefit_settings.tls / trusted_proxies)"
    )
    net.add_argument("--ssl-certfile", help="serve HTTPS with this certificate (PEM)")
    net.add_argument("--ssl-keyfile", help="the certificate's private key (PEM)")
    net.add_argument("--ssl-keyfile-password", help="the private key's password, if any")
    net.add_argument(
        "--forwarded-allow-ips",
        help="comma-separated proxy addresses or networks ('*': any) whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed (default: none)",
    )
    serve.set_defaults(run=_serve)


def _version_line() -> str:
    from proxy.version import package_version

    return f"routefit {package_version()}"


def _version(args: argparse.Namespace) -> int:
    print(_version_line())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="routefit",
        description="OpenAI-compatible gateway that prices and fits requests per route.",
    )
    parser.add_argument("--version", action="version", version=_version_line())
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print routefit's version").set_defaults(run=_version)

    for name, run, helps, json_help in (
        (
            "price",
            _price,
            "price a chat request the way its route counts it",
            "machine-readable output",
        ),
        (
            "fit",
            _fit,
            "compile a chat request to fit its route's budget",
            '{"request": ..., "report": ...}',
        ),
    ):
        cmd = sub.add_parser(name, help=helps)
        cmd.add_argument("file", help="an OpenAI chat-completions request body (JSON), or -")
        cmd.add_argument("--config", required=True, help="routefit / LiteLLM YAML config")
        cmd.add_argument("--model", help="model alias (default: the body's model)")
        cmd.add_argument("--json", action="store_true", help=json_help)
        cmd.set_defaults(run=run)

    cal = sub.add_parser("calibration", help="what routefit has learnt per route, from the store")
    cal.add_argument("--config", required=True, help="routefit / LiteLLM YAML config")
    cal.add_argument("--json", action="store_true", help="machine-readable output")
    cal.set_defaults(run=_calibration)

    check = sub.add_parser(
        "check", help="validate a config and print the routes, teams and store it resolves to"
    )
    check.add_argument("--config", required=True, help="routefit / LiteLLM YAML config")
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.set_defaults(run=_check)

    _add_serve(sub.add_parser("serve", help="run the proxy"))

    # `routefit sim ...` is handed to the simulator's own parser (see main); listed here for help.
    sub.add_parser(
        "sim",
        help="run the packaged provider simulator: OpenAI and Anthropic wires, no keys, "
        "no network (routefit sim --help)",
        add_help=False,
    )
    return parser


def _sim(argv: list[str]) -> int:
    from proxy.sim.__main__ import main as sim_main

    try:
        return sim_main(argv, prog="routefit sim", default_port=SIM_PORT)
    except KeyboardInterrupt:
        return 130


def _run(given: list[str]) -> int:
    if given[:1] == ["sim"]:
        return _sim(given[1:])
    parser = build_parser()
    args = parser.parse_args(given)
    try:
        result: int = args.run(args)
    except UsageError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        return 130
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """A reader that stops early (``routefit check --json | head -1``) closes the pipe: the
    command ends quietly with 141 (128 + SIGPIPE, what a shell reports for any tool killed by
    a closed pipe), never a BrokenPipeError traceback."""
    given = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            return _run(given)
        finally:
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except BrokenPipeError:
        # What is still buffered would fail again when Python flushes at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    raise SystemExit(main())
