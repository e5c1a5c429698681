"""plait's version, as the installed package's metadata says it (``plait --version``, and the
server info of ``plait mcp-server``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["VersionAction", "plait_version"]


def plait_version() -> str:
    """The installed ``plait`` package's version (``unknown`` when it runs uninstalled)."""
    from importlib.metadata import PackageNotFoundError, version  # 20 ms: only when asked

    try:
        return version("plait")
    except PackageNotFoundError:
        return "unknown"


class VersionAction(argparse.Action):
    """``--version``: print the version to stdout and exit; the metadata is read only then."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        sys.stdout.write(f"plait {plait_version()}\n")
        parser.exit()
