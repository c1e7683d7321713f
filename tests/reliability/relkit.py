"""Helpers shared by the reliability tests and ``bench/reliability.py``.

* ``SCALE`` (env ``RELIABILITY_SCALE``, default 1) multiplies the fuzzing budgets: the default
  test run stays fast, the report script runs more examples.
* ``record(section, **figures)`` appends figures to the JSON-lines file named by
  ``RELIABILITY_FIGURES`` (the report script sets it; a plain pytest run records nothing).
* ``Proc`` reads a process's open file descriptors and resident memory from /proc.
* ``json_values``: any JSON value, the odd ones often (what a fuzzed field is set to);
  ``every_path`` and ``mutate``: a JSON body's fields, and one of them set or removed.
* ``check_error_shape`` is the one definition of "an answer a client can handle": any status
  below 500, OpenAI's error shape on every 4xx, never a traceback.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from hypothesis import strategies as st

SCALE = max(1, int(os.environ.get("RELIABILITY_SCALE", "1") or 1))
_LOCK = threading.Lock()


def record(section: str, **figures: Any) -> None:
    """Append one figures record for the report (no-op unless RELIABILITY_FIGURES is set)."""
    path = os.environ.get("RELIABILITY_FIGURES")
    if not path:
        return
    line = json.dumps({"section": section, "time": time.time(), **figures}, default=str)
    with _LOCK, open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


@dataclass
class Proc:
    pid: int

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def rss(self) -> int:
        """Resident set size in bytes."""
        with open(f"/proc/{self.pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/task"))


def tasks(base_url: str) -> int:
    """Live asyncio tasks in routefit (from /readyz)."""
    return int(httpx.get(base_url + "/readyz", timeout=5).json()["tasks"])


ERROR_KEYS = {"message", "type", "param", "code"}


def check_error_shape(status: int, body: bytes, what: str = "", allow_5xx: bool = False) -> None:
    """Raise AssertionError unless the answer is a non-5xx (unless ``allow_5xx``: a provider
    fault passed on) and, when an error, OpenAI-shaped."""
    text = body.decode("utf-8", "replace")
    assert allow_5xx or status < 500, f"{what}: HTTP {status}: {text[:500]}"
    assert "Traceback" not in text, f"{what}: traceback in the answer: {text[:500]}"
    if status >= 400:
        try:
            data = json.loads(body)
        except ValueError:
            raise AssertionError(
                f"{what}: HTTP {status} answer is not JSON: {text[:300]}"
            ) from None
        assert isinstance(data, dict) and set(data) == {"error"}, f"{what}: {text[:300]}"
        err = data["error"]
        assert isinstance(err, dict) and set(err) == ERROR_KEYS, f"{what}: {text[:300]}"
        assert isinstance(err["message"], str) and err["message"], f"{what}: {text[:300]}"
        assert isinstance(err["type"], str) and err["type"], f"{what}: {text[:300]}"
        for key in ("param", "code"):
            assert err[key] is None or isinstance(err[key], str), f"{what}: {text[:300]}"


@dataclass
class Tally:
    """Statuses and error codes seen, for assertions and the report."""

    statuses: Counter[int] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    slowest: float = 0.0

    def add(self, status: int, body: bytes, elapsed: float) -> None:
        self.statuses[status] += 1
        self.slowest = max(self.slowest, elapsed)
        if status >= 400:
            try:
                code = json.loads(body)["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = None
            self.codes[str(code or status)] += 1

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.total,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "error_codes": dict(self.codes.most_common()),
            "server_errors": sum(v for k, v in self.statuses.items() if k >= 500),
            "slowest_s": round(self.slowest, 3),
        }


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one Prometheus sample (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        key, _, value = line.rpartition(" ")
        metric_name, _, rest = key.partition("{")
        if metric_name != name:
            continue
        got = ",".join(sorted(p for p in rest.rstrip("}").split(",") if p))
        if not labels or got == want:
            total += float(value)
    return total


#: Any JSON value, often an odd one: integers beyond 64 bits, NaN and infinities, the words a
#: field of a chat body holds.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**53, 2**63 - 1, 2**63, 2**64, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["user", "assistant", "system", "tool", "developer", "function", "image_url"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=25,
)


def every_path(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key and index path of a body: the hand-picked lists name fields a body lacks, and
    these are the ones it has (a list picked by hand missed a part's ``type`` that crashed)."""
    out = [at]
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in items:
        out += every_path(child, (*at, key))
    return out


def mutate(body: dict[str, Any], path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    if not path:
        return value
    out = copy.deepcopy(body)
    node: Any = out
    for key in path[:-1]:
        node = node[key]
    if delete and isinstance(node, dict):
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return out
