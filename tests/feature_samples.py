"""Calibration samples built from named features, for the tests of the fit (tests/pricing):
a sample's raw parts are what its features say, so a test states only what it varies."""

from __future__ import annotations

from pricing.calibration import FEATURES, Sample

#: Each feature's place in a vector.
INDEX = {name: i for i, name in enumerate(FEATURES)}


def features(**parts: int) -> tuple[int, ...]:
    """A feature vector with the named parts, zero elsewhere."""
    return tuple(parts.get(name, 0) for name in FEATURES)


def sample(vector: tuple[int, ...], actual: int, t: float) -> Sample:
    """A sample of route ``r`` at time ``t`` whose provider counted ``actual``."""
    text = sum(vector[: INDEX["framing"]])
    return Sample(
        "r",
        t,
        text,
        vector[INDEX["framing"]],
        vector[INDEX["images"]] + vector[INDEX["defaulted"]],
        0,
        vector[INDEX["messages"]],
        0,
        False,
        actual,
        0,
        vector,
    )


def liars_window(honest: float, lying: float) -> list[Sample]:
    """30 plain prompts, then 8 with 100 image tokens priced by a default whose provider counts
    ``honest`` tokens per defaulted token — but two of the eight (a quarter) say ``lying``."""
    plain = [sample(features(prose=300 + 50 * i), 300 + 50 * i, i) for i in range(30)]
    dirty = []
    for i in range(8):
        prose = 10_000 + 100 * i
        per_token = lying if i in (3, 6) else honest
        vector = features(prose=prose, defaulted=100)
        dirty.append(sample(vector, prose + round(per_token * 100), 30 + i))
    return plain + dirty
