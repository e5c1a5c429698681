"""plait's version, as the installed package's metadata says it."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["plait_version"]


def plait_version() -> str:
    """The installed ``plait`` package's version (``unknown`` when it runs uninstalled)."""
    try:
        return version("plait")
    except PackageNotFoundError:
        return "unknown"
