"""What ``routefit serve``'s flags set inside the server: one frozen record, passed as a value.

The header deadline and size cap (``proxy.protocol``), the body deadline (``proxy.middleware``) and
the drain deadline (``proxy.drain``, read by ``proxy.app``'s lifespan) are ``ServeSettings``
fields; the command line builds the record once and hands it to ``proxy.app.create_app`` and to
the protocol. Nothing reads them from the environment.

One process boundary is in the way: with ``--workers N`` uvicorn spawns each worker afresh and
builds the app there from an import string (``proxy.app:create_app_from_env``), a factory called
with no arguments — a closure over the settings cannot be pickled across the spawn, and uvicorn
refuses anything but an import string when it runs workers. So, and only then, the config's path
and the settings cross as ONE serialised record in ONE variable, written by ``hand_over`` and read
by ``handed_over``, both here. The protocol needs no such crossing: uvicorn pickles its own
``Config`` into each worker, and ``http=`` takes a ``functools.partial`` of the protocol class
with the limits bound (``proxy.protocol.with_limits``). A single worker runs in the command's
own process and gets the record directly, with no variable at all.

Two variables stay environment variables because their readers are libraries that read nothing
else: ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client picks its multiprocess value class from it
when it is first imported, in every process, before any code of ours could hand it a value) and
``LITELLM_LOCAL_MODEL_COST_MAP`` (litellm reads it as it is imported).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from proxy.middleware import ReadLimits

__all__ = ["DEFAULTS", "ServeSettings", "hand_over", "handed_over"]

#: The one variable ``routefit serve --workers N`` hands its workers (see the module doc).
_HANDOVER = "ROUTEFIT_WORKER_HANDOVER"


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """The server's limits on slow and large clients and on its drain (the defaults are the
    ``routefit serve`` flags' defaults: the command reads them from here)."""

    #: Seconds a connection may take to send its request headers (0: no deadline).
    header_timeout: float = 10.0
    #: Bytes of request headers before a 431 (0: no cap).
    max_header_bytes: int = 65536
    #: Seconds of silence allowed while a request body arrives (0: no deadline).
    body_timeout: float = 30.0
    #: Bytes/s a body must average after ``body_timeout`` seconds (0: any rate).
    body_min_rate: float = 1024.0
    #: After SIGTERM, seconds in-flight work may take to finish.
    drain_seconds: float = 30.0
    #: SIGHUP reloads the config (``proxy.reload``, ``proxy.hangup``). Only an app whose event
    #: loop runs in the main thread can take signals: an app served on another thread (a test's)
    #: installs nothing whatever this says.
    reload_on_sighup: bool = True
    #: ``--workers``: a reload asked of one worker (``POST /routefit/reload``) is then handed to
    #: the parent, which passes SIGHUP to every worker (``proxy.hangup``).
    workers: int = 1

    def read_limits(self) -> ReadLimits:
        return ReadLimits(self.body_timeout, self.body_min_rate)


#: What an app built in-process (a test, a benchmark) runs with, and the flags' defaults.
DEFAULTS = ServeSettings()


def hand_over(config_path: str, settings: ServeSettings) -> None:
    """Leave the config's path and the settings for the worker processes uvicorn is about to
    spawn (they inherit this process's environment)."""
    os.environ[_HANDOVER] = json.dumps({"config": config_path, "settings": asdict(settings)})


def handed_over() -> tuple[str, ServeSettings]:
    """In a worker: the config path and settings ``hand_over`` left."""
    raw = os.environ.get(_HANDOVER)
    if raw is None:
        raise RuntimeError(
            f"{_HANDOVER} is unset: proxy.app:create_app_from_env builds the app in the workers "
            "that `routefit serve --workers N` starts (elsewhere call proxy.app.create_app)"
        )
    record = json.loads(raw)
    return str(record["config"]), ServeSettings(**record["settings"])
