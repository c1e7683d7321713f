"""`routefit serve`'s settings as one value: the flags build it, spawned workers get it back whole,
and the protocol's limits survive the pickling that carries uvicorn's config into a worker."""

from __future__ import annotations

import pickle

import pytest

from proxy.cli import _serve_settings, build_parser
from proxy.protocol import HeaderDeadlineProtocol, with_limits
from proxy.serve_settings import DEFAULTS, ServeSettings, hand_over, handed_over


def test_the_flags_defaults_are_the_settings_defaults():
    args = build_parser().parse_args(["serve", "--config", "c.yaml"])
    assert _serve_settings(args) == DEFAULTS


def test_every_flag_reaches_its_field():
    flags = ["--header-timeout", "1.5", "--max-header-bytes", "2048", "--body-timeout", "2.5"]
    flags += ["--body-min-rate", "0", "--drain-seconds", "4"]
    args = build_parser().parse_args(["serve", "--config", "c.yaml", *flags])
    assert _serve_settings(args) == ServeSettings(
        header_timeout=1.5,
        max_header_bytes=2048,
        body_timeout=2.5,
        body_min_rate=0.0,
        drain_seconds=4.0,
    )


def test_workers_get_the_record_back_whole(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("os.environ", dict())  # this process's environment stays untouched
    settings = ServeSettings(
        header_timeout=1.5, max_header_bytes=2048, body_timeout=0, body_min_rate=7, drain_seconds=4
    )
    hand_over("/etc/routefit/routefit.yaml", settings)
    assert handed_over() == ("/etc/routefit/routefit.yaml", settings)


def test_a_factory_outside_a_served_worker_says_why(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("os.environ", dict())
    with pytest.raises(RuntimeError, match="routefit serve --workers N"):
        handed_over()


def test_the_protocol_keeps_its_limits_through_a_spawn():
    # uvicorn pickles its Config, `http=` included, into every spawned worker.
    bound = pickle.loads(pickle.dumps(with_limits(1.5, 2048)))
    assert bound.func is HeaderDeadlineProtocol
    assert bound.keywords == {"header_timeout": 1.5, "max_header_bytes": 2048}


def test_the_body_guard_reads_the_body_fields():
    limits = ServeSettings(body_timeout=3.0, body_min_rate=10.0).read_limits()
    assert (limits.body_timeout, limits.min_rate) == (3.0, 10.0)
