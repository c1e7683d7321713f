"""How hard a property searches: its everyday budget, or its deep one under the ``ci`` profile.

Most properties find what they guard within their everyday budget. A few guard a corner that a
generated case reaches rarely (an elided session whose head ends on a thinking turn, a fifth
breakpoint); those take ``examples(everyday, deep)``, and the ``ci`` profile runs them with the
deep budget, enough to find such a bug on every run. The profile is ``HYPOTHESIS_PROFILE``
(.ci/run sets it), else ``ci`` wherever ``CI`` is set (as CI services do), else ``default``.
"""

from __future__ import annotations

import os

PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default")


def examples(everyday: int, deep: int) -> int:
    """The number of examples for this run's profile."""
    return deep if PROFILE == "ci" else everyday
