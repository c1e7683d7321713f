"""Encodings shared by the store implementations: samples, anchors, reservation tokens.

Values are compact JSON arrays in dataclass field order (``Sample`` without its route, which is
part of the key). Decoding tolerates arrays shorter than the dataclass (fields added later with
defaults) and longer ones (fields dropped later), so stored history survives such changes.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields
from typing import Any

import orjson

from pricing.calibration import Anchor, Sample
from proxy.store.base import MONTH, PERIODS, BudgetWindow

__all__ = [
    "BUCKET_SLACK",
    "MAX_AMOUNT",
    "ReservedBucket",
    "check_amounts",
    "check_kind",
    "decode_anchor",
    "decode_sample",
    "decode_token",
    "encode_anchor",
    "encode_sample",
    "encode_token",
    "new_token_id",
    "settle_deltas",
]

_SAMPLE_FIELDS = tuple(f.name for f in fields(Sample))[1:]  # without ``route``
_ANCHOR_FIELDS = tuple(f.name for f in fields(Anchor))
assert fields(Sample)[0].name == "route"  # layout invariant of the encoding

#: Seconds a bucket is kept after its window ended, so that a late ``settle`` still finds it.
BUCKET_SLACK: dict[str, int] = {"minute": 60, "day": 3_600, MONTH: 3_600}


def check_kind(kind: str) -> None:
    if kind not in PERIODS and kind != MONTH:
        raise ValueError(f"unknown budget window kind {kind!r}")


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _fields_json(obj: Any, names: Sequence[str]) -> str:
    """Shallow: a sample or anchor holds numbers and tuples of numbers, and ``astuple``'s deep
    copy cost more than the rest of a calibration write (written for every request)."""
    return orjson.dumps([getattr(obj, name) for name in names]).decode()


def encode_sample(sample: Sample) -> str:
    return _fields_json(sample, _SAMPLE_FIELDS)


def decode_sample(route: str, data: str | bytes) -> Sample:
    values = json.loads(data)
    if not isinstance(values, list):
        raise ValueError("sample: not an array")
    return Sample(route, **dict(zip(_SAMPLE_FIELDS, values, strict=False)))


def encode_anchor(anchor: Anchor) -> str:
    return _fields_json(anchor, _ANCHOR_FIELDS)


def decode_anchor(data: str | bytes) -> Anchor:
    values = json.loads(data)
    if not isinstance(values, list):
        raise ValueError("anchor: not an array")
    return Anchor(**dict(zip(_ANCHOR_FIELDS, values, strict=False)))


@dataclass(frozen=True, slots=True)
class ReservedBucket:
    """One window bucket a reservation charged: ``amount`` in bucket ``bucket`` of window
    ``name``; the bucket lives until unix second ``expires_at`` (window end + slack)."""

    name: str
    bucket: int
    amount: int
    expires_at: int


def new_token_id() -> str:
    return secrets.token_hex(8)


def encode_token(token_id: str, buckets: Sequence[ReservedBucket]) -> str:
    """``{"i": id, "w": [[name, bucket, amount, expires_at], ...]}``."""
    return _dumps({"i": token_id, "w": [astuple(b) for b in buckets]})


def decode_token(token: str) -> tuple[str, list[ReservedBucket]]:
    try:
        data = json.loads(token)
        token_id = data["i"]
        buckets = [ReservedBucket(str(n), int(b), int(a), int(e)) for n, b, a, e in data["w"]]
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"not a reservation token: {token!r}") from e
    if not isinstance(token_id, str) or not token_id:
        raise ValueError(f"not a reservation token: {token!r}")
    return token_id, buckets


#: The most one reservation or settlement may charge a window: far above any real request, far
#: below a 64-bit counter's range (SQLite's and Redis's integers), so no sum of them overflows.
MAX_AMOUNT = 2**50


def check_amounts(windows: Sequence[tuple[BudgetWindow, int]]) -> None:
    """Reject what no store can honour: unknown kinds, negative amounts, a window named twice
    (two windows sharing one counter would each be checked against the same old value)."""
    names = set()
    for window, amount in windows:
        check_kind(window.kind)
        if amount < 0:
            raise ValueError(f"negative amount {amount} for window {window.name!r}")
        if amount > MAX_AMOUNT:
            raise ValueError(f"amount {amount} for window {window.name!r} above {MAX_AMOUNT}")
        if window.name in names:
            raise ValueError(f"window {window.name!r} given twice")
        names.add(window.name)


def settle_deltas(
    buckets: Sequence[ReservedBucket], actual: Sequence[tuple[BudgetWindow, int]]
) -> list[tuple[ReservedBucket, int]]:
    """Pair each reserved bucket with ``actual - reserved`` for the windows named in
    ``actual`` (matched by window name). Buckets of windows not named keep their reservation;
    windows the reservation did not charge are ignored. Zero deltas are dropped."""
    amounts = {window.name: amount for window, amount in actual}
    out = []
    for b in buckets:
        if b.name in amounts and amounts[b.name] != b.amount:
            out.append((b, amounts[b.name] - b.amount))
    return out
