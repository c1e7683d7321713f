"""The count-rate bucket (``proxy.fairness``): whatever the arrival times, a caller is admitted
at most its burst plus the rate times the time elapsed, and a refusal names a wait after which
it is admitted again. And which requests are priced off the loop."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pricing.messages import ChatRequest, ImagePart, Message, TextPart
from proxy.errors import ProxyError
from proxy.fairness import THREAD_ABOVE, Fairness, work_size


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 120),
    st.lists(st.floats(0, 5, allow_nan=False), min_size=1, max_size=200),
)
def test_admitted_never_exceeds_burst_plus_rate(per_minute: int, gaps: list[float]):
    fair = Fairness(1, per_minute)
    now, admitted = 1000.0, 0
    start = now
    for gap in gaps:
        now += gap
        try:
            fair.admit_count("team:a", now)
            admitted += 1
        except ProxyError as err:
            assert err.status == 429 and err.code == "rate_limit_exceeded"
            wait = int(err.headers["retry-after"])
            assert wait >= 1
            fair.admit_count("team:a", now + wait)  # admitted once the named wait passed
            now += wait
            admitted += 1
    assert admitted <= per_minute + (now - start) * per_minute / 60 + 1e-6


def test_callers_have_their_own_buckets():
    fair = Fairness(1, 2)
    fair.admit_count("team:a", 0.0)
    fair.admit_count("team:a", 0.0)
    with pytest.raises(ProxyError):
        fair.admit_count("team:a", 0.0)
    fair.admit_count("team:b", 0.0)


def test_a_body_carrying_a_pdf_is_priced_off_the_loop_whatever_its_size():
    """Reading a PDF costs ~5 ms a page: a small body of PDFs is heavy work (pricing.documents)."""
    pdf = "data:application/pdf;base64,JVBERi0xLjQK"
    png = "data:image/png;base64,iVBORw0KGgo="
    with_pdf = ChatRequest(
        "m", (Message("user", (TextPart("read"), ImagePart(pdf))),), (), None, {}
    )
    with_image = ChatRequest("m", (Message("user", (ImagePart(png),)),), (), None, {})
    assert work_size(with_pdf, 2_000) > THREAD_ABOVE
    assert work_size(with_image, 2_000) == 2_000
    assert work_size(with_pdf, 9_000_000) == 9_000_000
