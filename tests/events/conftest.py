"""Fixtures of the event log's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from plait.events import generate_key


@pytest.fixture
def key(tmp_path: Path) -> Path:
    """A signing key made for the test: ``audit.key``, its public half ``audit.key.pub``."""
    path = tmp_path / "audit.key"
    generate_key(path)
    return path
