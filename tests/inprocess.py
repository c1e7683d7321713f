"""Serving routefit inside the test process, for end-to-end tests where the process does not matter.

``run_inprocess(config)`` has ``run_routefit``'s interface (an object with ``base_url``, ``v1`` and
``log()``) but serves ``create_app(load_config(config))`` from a uvicorn ``Server`` on a thread
of its own, with its own event loop, on a free loopback port. Clients (the openai and anthropic
SDKs, httpx, raw sockets, the agent CLIs) talk real HTTP to it exactly as they would to
``routefit serve``; what is saved is the process: an interpreter, the imports and the
tokenizer files, seconds per start (tokenizers are loaded once per test run instead).

What stays the same as ``routefit serve``: the app and its lifespan (startup, /readyz after the
tokenizers, shutdown that stops the calibrator and closes the store and transports), uvicorn's
httptools protocol with routefit's header deadline and size cap (``proxy.protocol.with_limits``),
the server's limits as one ``ServeSettings`` value (``settings=``; the flags' defaults unless a
test says otherwise), no ``Server`` header, forwarded headers believed only from
``trusted_proxies``, the default connection limits, and a log in routefit's format
(``LEVEL logger: message``) at INFO.

What only the real process shows, so such tests keep ``harness.run_routefit``: the command
line itself and how its flags become settings and uvicorn options (``--max-connections``,
``--keep-alive``, TLS, ``--forwarded-allow-ips``), ``--workers`` and Prometheus' multiprocess
files, signals (SIGTERM's drain), replicas as separate processes, and whatever the environment
of a fresh process decides.

The provider: by default the routes go wherever the config says (the simulator of
``sim_fixtures``, a thread of this process, over loopback HTTP). ``provider=`` is the one
place to put the provider in-process instead: a function of the ``Config`` giving
``create_app``'s provider argument. ``sim_provider(sim)`` is that function for the simulator
when ``proxy.transports.mock`` has ``asgi_transport`` (an httpx-shaped transport serving
provider requests with the simulator's ASGI app, no socket); ``loopback`` is today's default.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from proxy.app import create_app
from proxy.config import Config, load_config
from proxy.protocol import with_limits
from proxy.serve_settings import DEFAULTS, ServeSettings
from proxy.transports.mock import MockTransport

__all__ = [
    "InProcess",
    "Provider",
    "asgi_client",
    "asgi_provider_available",
    "loopback",
    "run_inprocess",
    "sim_provider",
]

#: The provider side of an app: ``create_app``'s keyword arguments for it, from the config.
Provider = Callable[[Config], Mapping[str, Any]]


@contextlib.asynccontextmanager
async def asgi_client(
    config: Config, provider: Callable[[httpx.Request], Awaitable[httpx.Response]]
) -> AsyncIterator[httpx.AsyncClient]:
    """routefit over ``config`` started (its lifespan) and reached through ASGI, its provider
    ``provider`` (a function of the request, through ``MockTransport``): no socket, no thread,
    for tests where only what routefit answers and charges matters."""
    app = create_app(config, transport=MockTransport(provider))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://routefit", timeout=30
        ) as client,
    ):
        yield client


def loopback(config: Config) -> Mapping[str, Any]:
    """Providers reached over the network as the config says (a simulator thread on loopback)."""
    return {}


def asgi_provider_available() -> bool:
    """Whether ``proxy.transports.mock`` can serve provider requests with an ASGI app."""
    import proxy.transports.mock as mock

    return hasattr(mock, "asgi_transport")


def sim_provider(sim: Any) -> Provider:
    """Every provider request of the app answered in-process by ``sim``'s own ASGI app (the
    same state: the models it serves, the requests ``sim.requests()`` shows), through
    ``proxy.transports.mock.asgi_transport`` and ``create_app(config, transport=...)``.

    What it cannot show, the loopback simulator can: a provider's socket (connection resets,
    timing between stream events as sent), since httpx's ASGI transport hands over whole
    answers."""
    import proxy.transports.mock as mock

    app = sim.server.config.app

    def provider(config: Config) -> Mapping[str, Any]:
        return {"transport": mock.asgi_transport(app)}

    return provider


#: Which in-process app the running code belongs to: set on the app's server thread, inherited
#: by its tasks and by the threads ``asyncio.to_thread`` starts (they copy the context).
_APP: contextvars.ContextVar[str | None] = contextvars.ContextVar("routefit_app", default=None)
_ids = itertools.count(1)

#: The format ``routefit serve`` logs in (proxy/cli.py ``_log_config``).
_FORMAT = "%(levelname)s %(name)s: %(message)s"


class _AppLog(logging.Handler):
    """Every record logged on behalf of one app: on its server thread or executor threads (by
    thread name) or in a task or thread that inherited its context.

    ``routefit serve`` sends every logger to its stderr, so this handler goes on the root logger
    and on each logger that does not propagate to it (uvicorn's, litellm's); a record that
    passes several of them is kept once."""

    def __init__(self, ident: str, access_log: bool) -> None:
        super().__init__(logging.NOTSET)
        self.ident = ident
        self.access_log = access_log
        self.lines: list[str] = []
        self.attached: list[logging.Logger] = []
        self.setFormatter(logging.Formatter(_FORMAT))

    def attach(self) -> None:
        """On the root logger and every logger that does not propagate, as they are now (called
        again once the app has started: its imports may have made new ones). uvicorn's access
        log only when asked for: a handler there turns it on for every server."""
        loggers = [logging.getLogger()] + [
            logger
            for name, logger in logging.Logger.manager.loggerDict.items()
            if isinstance(logger, logging.Logger)
            and not logger.propagate
            and (self.access_log or name != "uvicorn.access")
        ]
        if self.access_log:
            loggers.append(logging.getLogger("uvicorn.access"))
        for logger in loggers:
            if logger not in self.attached:
                logger.addHandler(self)
                self.attached.append(logger)

    def detach(self) -> None:
        for logger in self.attached:
            logger.removeHandler(self)
        self.attached.clear()

    def mine(self, record: logging.LogRecord) -> bool:
        thread = record.threadName or ""
        on_its_threads = thread == self.ident or thread.startswith(self.ident + "-pool")
        return on_its_threads or _APP.get() == self.ident

    def emit(self, record: logging.LogRecord) -> None:
        seen = f"_kept_by_{self.ident}"
        if not self.mine(record) or getattr(record, seen, False):
            return
        setattr(record, seen, True)
        try:
            line = self.format(record)
        except Exception:  # a bad %-format in someone's log call: keep what we can
            line = f"{record.levelname} {record.name}: {record.msg!r}"
        with self.lock or contextlib.nullcontext():
            self.lines.append(line)


class _Levels:
    """``routefit serve`` logs at INFO with httpx at WARNING; the test process does the same
    while at least one in-process app runs, and puts the old levels back after the last."""

    _lock = threading.Lock()
    _users = 0
    _saved: tuple[int, int] = (logging.WARNING, logging.NOTSET)

    @classmethod
    def acquire(cls) -> None:
        with cls._lock:
            if cls._users == 0:
                root, quiet = logging.getLogger(), logging.getLogger("httpx")
                cls._saved = (root.level, quiet.level)
                root.setLevel(logging.INFO)
                quiet.setLevel(logging.WARNING)
            cls._users += 1

    @classmethod
    def release(cls) -> None:
        with cls._lock:
            cls._users -= 1
            if cls._users == 0:
                logging.getLogger().setLevel(cls._saved[0])
                logging.getLogger("httpx").setLevel(cls._saved[1])


@dataclass
class InProcess:
    """A routefit app served on a thread of the test process."""

    base_url: str
    ident: str
    _log: _AppLog
    app: Any = None
    server: uvicorn.Server | None = None
    thread: threading.Thread | None = None
    failure: list[BaseException] = field(default_factory=list)

    @property
    def v1(self) -> str:
        return self.base_url + "/v1"

    def log(self) -> str:
        return "".join(line + "\n" for line in list(self._log.lines))

    def stop(self, timeout: float = 30.0) -> None:
        """Shut down as uvicorn does on exit (new connections refused, idle ones closed, the
        lifespan's shutdown run), then wait for the thread and its loop to end."""
        if self.server is not None:
            self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout)
            if self.thread.is_alive():
                raise RuntimeError(f"in-process routefit {self.ident} did not stop:\n{self.log()}")


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _uvicorn_config(
    app: Any, config: Config, settings: ServeSettings, access_log: bool
) -> uvicorn.Config:
    """``routefit serve``'s uvicorn options (proxy/cli.py ``_serve``), its flags at their
    defaults but for ``settings``; the shutdown waits at most 10 s (not the drain's 30 s: no
    test drains an in-process app, and a test's hung stream must not hold the suite)."""
    trusted = list(config.settings.access.trusted_proxies)
    network: dict[str, Any] = {"proxy_headers": bool(trusted)}
    if trusted:
        network["forwarded_allow_ips"] = trusted
    return uvicorn.Config(
        app,
        http=with_limits(settings.header_timeout, settings.max_header_bytes),
        ws="none",
        lifespan="on",
        log_config=None,  # the test process's logging stays as it is; _AppLog keeps the lines
        log_level="info",
        access_log=access_log,
        server_header=False,
        timeout_keep_alive=5,
        limit_concurrency=2048,
        timeout_graceful_shutdown=min(10.0, settings.drain_seconds),
        **network,
    )


def _serve(
    running: InProcess,
    config: Config,
    provider: Provider,
    settings: ServeSettings,
    access_log: bool,
    sock: socket.socket,
    built: threading.Event,
) -> None:
    """The server thread: build the app here (its store and clients belong to this thread and
    loop), then serve until told to exit; ``asyncio.run`` cancels what is left and joins the
    executor's threads."""
    _APP.set(running.ident)
    try:
        running.app = create_app(config, settings=settings, **provider(config))
        running.server = uvicorn.Server(_uvicorn_config(running.app, config, settings, access_log))
    except BaseException as exc:
        running.failure.append(exc)
        return
    finally:
        built.set()

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(thread_name_prefix=f"{running.ident}-pool"))
        assert running.server is not None
        await running.server.serve(sockets=[sock])

    try:
        asyncio.run(serve())
    except BaseException as exc:
        running.failure.append(exc)


def _environ(env: Mapping[str, str] | None) -> dict[str, str]:
    """What the config's ``os.environ/NAME`` references resolve from: like ``run_routefit``'s
    process, the test run's environment without its Redis URL (a test's config says which store
    it wants), plus ``env``."""
    environ = dict(os.environ)
    environ.pop("ROUTEFIT_REDIS_URL", None)
    environ.pop("REDIS_URL", None)
    environ.update(env or {})
    return environ


@contextlib.contextmanager
def _patched_environ(env: Mapping[str, str] | None) -> Iterator[None]:
    """``env`` in ``os.environ`` while the app runs (libraries read some variables at call
    time, e.g. litellm a provider's key), the previous values back afterwards."""
    saved = {name: os.environ.get(name) for name in env or {}}
    os.environ.update(env or {})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _wait_ready(running: InProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    thread = running.thread
    assert thread is not None
    while True:
        if running.failure or not thread.is_alive():
            raise RuntimeError(
                f"in-process routefit did not start: {running.failure}\n{running.log()}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(running.base_url + "/readyz", timeout=1).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"in-process routefit did not become ready:\n{running.log()}")
        time.sleep(0.01)


@contextlib.contextmanager
def run_inprocess(
    config: Path,
    *,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    provider: Provider = loopback,
    settings: ServeSettings = DEFAULTS,
    access_log: bool = False,
) -> Iterator[InProcess]:
    """``run_routefit(config)`` in this process: yields once /readyz says ready, stops on exit.

    ``env``: set while the app runs, and what the config's ``os.environ/NAME`` resolve from.
    ``provider``: the provider side (default ``loopback``: the real transports, over HTTP).
    ``settings``: the header, body and drain limits ``routefit serve``'s flags would set.
    ``access_log``: uvicorn's access log in ``log()`` (``routefit serve --access-log``)."""
    ident = f"routefit-app-{next(_ids)}"
    sock = _bind(port or 0)
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    capture = _AppLog(ident, access_log)
    running = InProcess(base_url, ident, capture)
    _Levels.acquire()
    capture.attach()
    try:
        with _patched_environ(env):
            loaded = load_config(config, _environ(env))
            built = threading.Event()
            running.thread = threading.Thread(
                target=_serve,
                args=(running, loaded, provider, settings, access_log, sock, built),
                name=ident,
                daemon=True,
            )
            running.thread.start()
            try:
                built.wait(timeout)
                _wait_ready(running, timeout)
                capture.attach()
                yield running
            finally:
                running.stop()
            if running.failure:
                raise RuntimeError(f"in-process routefit failed: {running.failure!r}")
    finally:
        sock.close()
        capture.detach()
        _Levels.release()
