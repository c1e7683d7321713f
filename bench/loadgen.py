"""A small, fast HTTP/1.1 load generator (run as its own process).

    python bench/loadgen.py SPEC.json  → one JSON object on stdout

Why not httpx: at the request rates a passthrough proxy reaches on two cores, an httpx client
costs more CPU per request than the proxy under test, and the client would be what is measured.
This one writes a prebuilt request (only a per-request nonce substituted into the body) on
keep-alive connections over asyncio streams (uvloop when installed) and parses just enough of the
response: status line, Content-Length or chunked framing. Its own CPU time is reported so a run
can show that it was not the bottleneck.

SPEC: ``url`` (http://host:port/path), ``body`` (str, may contain ``@@NONCE@@``), ``headers``
(dict), ``concurrency``, ``duration`` (seconds of measurement), ``warmup`` (seconds, discarded),
``max_requests`` (optional cap), ``stream`` (bool: the reply is SSE; time to first body byte is
recorded too), ``stream_end`` (what the last event contains; default ``[DONE]``).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from collections.abc import Awaitable, Callable
from itertools import count
from urllib.parse import urlsplit

NONCE = b"@@NONCE@@"


class Conn:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def ensure(self) -> None:
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(
                self.host, self.port, limit=1 << 22
            )

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, data: bytes) -> tuple[int, bytes, float]:
        """(status, body, seconds to the first body byte)."""
        await self.ensure()
        assert self.reader is not None and self.writer is not None
        t0 = time.perf_counter()
        self.writer.write(data)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = -1
        chunked = False
        keep = True
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and b"close" in value.lower():
                keep = False
        first = 0.0
        if chunked:
            parts = []
            while True:
                size_line = await self.reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0], 16)
                if not first:
                    first = time.perf_counter() - t0
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    break
                parts.append(await self.reader.readexactly(size + 2))
            body = b"".join(p[:-2] for p in parts)
        elif length >= 0:
            body = await self.reader.readexactly(length)
            first = time.perf_counter() - t0
        else:
            body = await self.reader.read()
            first = time.perf_counter() - t0
            keep = False
        if not keep:
            self.close()
        return status, body, first


def build_request(url: str, body: bytes, headers: dict[str, str]) -> tuple[str, int, bytes, bytes]:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or 80
    head = [f"POST {parts.path or '/'} HTTP/1.1", f"Host: {host}:{port}"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    head.append("Content-Type: application/json")
    return host, port, ("\r\n".join(head) + "\r\n").encode(), body


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


async def run(spec: dict) -> dict:
    body = spec["body"].encode()
    host, port, head, body = build_request(spec["url"], body, spec.get("headers", {}))
    has_nonce = NONCE in body
    concurrency = int(spec["concurrency"])
    duration = float(spec["duration"])
    warmup = float(spec.get("warmup", 0.5))
    max_requests = spec.get("max_requests")
    stream = bool(spec.get("stream"))
    stream_end = spec.get("stream_end", "[DONE]").encode()
    total = 0
    serial = count(1)

    def payload() -> bytes:
        b = body.replace(NONCE, b"%09d" % next(serial)) if has_nonce else body
        return head + b"Content-Length: %d\r\n\r\n" % len(b) + b

    latencies: list[float] = []
    firsts: list[float] = []
    statuses: dict[int, int] = {}
    errors: list[str] = []
    sample: list[str] = []
    start = time.perf_counter()
    measure_from = start + warmup
    stop_at = measure_from + duration
    done = 0
    stopped = asyncio.Event()

    async def worker() -> None:
        nonlocal done, total
        conn = Conn(host, port)
        try:
            while not stopped.is_set():
                t0 = time.perf_counter()
                if t0 >= stop_at:
                    break
                try:
                    status, reply, first = await conn.request(payload())
                except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                    conn.close()
                    errors.append(type(exc).__name__)
                    if len(errors) > 100:
                        stopped.set()
                    continue
                t1 = time.perf_counter()
                total += 1
                if t0 < measure_from:
                    continue
                statuses[status] = statuses.get(status, 0) + 1
                if status != 200 and len(sample) < 3:
                    sample.append(reply[:400].decode("utf-8", "replace"))
                if stream and status == 200 and stream_end not in reply[-300:]:
                    errors.append("stream-incomplete")
                latencies.append(t1 - t0)
                firsts.append(first)
                done += 1
                if max_requests and done >= max_requests:
                    stopped.set()
        finally:
            conn.close()

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    end = time.perf_counter()
    elapsed = max(1e-9, min(end, stop_at) - measure_from) if done else 0.0
    latencies.sort()
    firsts.sort()
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {
        "requests": done,
        "total_requests": total,
        "seconds": elapsed,
        "rps": done / elapsed if elapsed else 0.0,
        "statuses": {str(k): v for k, v in statuses.items()},
        "errors": len(errors),
        "error_kinds": sorted(set(errors)),
        "error_samples": sample,
        "p50_ms": percentile(latencies, 0.50) * 1e3,
        "p90_ms": percentile(latencies, 0.90) * 1e3,
        "p99_ms": percentile(latencies, 0.99) * 1e3,
        "mean_ms": (sum(latencies) / len(latencies) * 1e3) if latencies else float("nan"),
        "ttfb_p50_ms": percentile(firsts, 0.50) * 1e3,
        "ttfb_p99_ms": percentile(firsts, 0.99) * 1e3,
        "client_cpu_s": cpu,
        "client_cpu_per_request_ms": cpu / max(1, done) * 1e3,
    }


def run_spec_file(run: Callable[[dict], Awaitable[dict]]) -> int:
    """A load generator's process: its spec from the JSON file named by argv[1], its result as
    JSON on stdout, on uvloop when installed (as the servers are)."""
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    json.dump(asyncio.run(run(spec)), sys.stdout)
    return 0


def main() -> int:
    return run_spec_file(run)


if __name__ == "__main__":
    raise SystemExit(main())
