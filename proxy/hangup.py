"""SIGHUP: what log rotation and operators send to reload. It reloads the config
(``proxy.reload``) and never stops the server.

- One worker (``routefit serve``): the app's lifespan takes SIGHUP on its event loop
  (``on_hangup``) and reloads in process; requests and streams in flight go on undisturbed.
- ``--workers N``: the parent is uvicorn's supervisor, whose own SIGHUP would replace every
  worker (a rolling restart: each old worker drained under the drain deadline, so a stream
  longer than it is cut, and what each worker learnt in memory lost). routefit's supervisor
  (``Supervisor``) passes the signal on to each worker instead, and each reloads in process, as a
  single worker does. A SIGHUP sent to one worker reloads that worker only.
- Before the app has started (and after it stopped), SIGHUP is ignored (``ignore``), never the
  default action that ends the process. A worker still importing when the parent passes a SIGHUP
  on has not ignored it yet and ends; the supervisor starts its replacement, which reads the new
  file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable

from uvicorn import Config
from uvicorn.supervisors import Multiprocess

__all__ = ["Supervisor", "ask_parent", "ignore", "on_hangup", "run_workers"]

log = logging.getLogger("routefit")


def ignore() -> None:
    """SIGHUP does nothing in this process until the app takes it (``on_hangup``)."""
    with contextlib.suppress(ValueError):  # not the main thread: no signals here
        signal.signal(signal.SIGHUP, signal.SIG_IGN)


def on_hangup(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` on the loop at each SIGHUP; returns what puts SIGHUP back to ignored
    (the app's shutdown). Nothing is installed outside the main thread."""
    try:
        loop.add_signal_handler(signal.SIGHUP, callback)
    except (ValueError, RuntimeError, NotImplementedError):
        return lambda: None

    def remove() -> None:
        loop.remove_signal_handler(signal.SIGHUP)
        ignore()

    return remove


def ask_parent() -> None:
    """From a worker of ``--workers N``: have the supervisor pass SIGHUP to every worker."""
    os.kill(os.getppid(), signal.SIGHUP)


class Supervisor(Multiprocess):
    """uvicorn's supervisor, but SIGHUP is passed on to the workers (module doc)."""

    def handle_hup(self) -> None:
        pids = [p.pid for p in self.processes if p.pid is not None]
        log.info("SIGHUP: passed on to %d worker(s), each reloads the config", len(pids))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGHUP)


def run_workers(config: Config) -> None:
    """What ``uvicorn.run`` does for ``workers > 1``, with routefit's supervisor."""
    sock = config.bind_socket()
    with contextlib.suppress(KeyboardInterrupt):
        Supervisor(config, sockets=[sock]).run()
