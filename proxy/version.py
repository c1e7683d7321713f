"""routefit's version, as installed: one place for ``routefit --version`` and the health
endpoints, light enough for the CLI to import before it parses its arguments."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["package_version"]


def package_version() -> str:
    """The installed distribution's version (pyproject's ``version``)."""
    try:
        return version("routefit")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"
