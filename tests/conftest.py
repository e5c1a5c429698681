"""Fixtures shared by every wing's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import BACKENDS, StoreFactory

from plait.events.store import EventStore
from plait.testing import ScriptedModelServer


@pytest.fixture(params=["sqlite", "postgres"])
def durable_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory of stores of each durable backend."""
    factory = StoreFactory(request.param, tmp_path)
    yield factory
    factory.close()


@pytest.fixture(params=BACKENDS)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory of stores of each backend, cleaned up after the test."""
    factory = StoreFactory(request.param, tmp_path)
    yield factory
    factory.close()


@pytest.fixture
def store(stores: StoreFactory) -> EventStore:
    """An empty store of each backend."""
    return stores.open()


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    """A scripted model server; tests push the steps they need."""
    with ScriptedModelServer() as server:
        yield server
