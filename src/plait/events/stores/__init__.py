# Part of the events wing: the store backends, in memory, SQLite and PostgreSQL (with psycopg).
# They import the rest of `plait.events` and `plait._errors`; psycopg only for a PostgreSQL URL.
"""Store backends: in memory, SQLite (the embedded default) and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from plait._errors import StoreUnavailableError
from plait._faces import lazy

TYPE_CHECKING = False  # as typing has it, without importing typing

if TYPE_CHECKING:  # what type checkers read; a backend is imported on its first use
    from plait.events._store import EventStore
    from plait.events.stores._memory import MemoryStore
    from plait.events.stores._postgres import PostgresStore
    from plait.events.stores._sqlite import SqliteStore

__all__ = ["MemoryStore", "PostgresStore", "SqliteStore", "open_store"]

_PUBLIC: dict[str, tuple[str, ...]] = {
    "plait.events.stores._memory": ("MemoryStore",),
    "plait.events.stores._postgres": ("PostgresStore",),
    "plait.events.stores._sqlite": ("SqliteStore",),
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy(__name__, _PUBLIC)


def open_store(url: str | Path) -> EventStore:
    """Open a store by URL: ``memory:``, a SQLite path (or ``sqlite:///path``), ``postgresql://...``.

    A PostgreSQL URL may carry ``?schema=NAME`` to keep plait's tables in their own schema.
    """
    text = str(url)
    if text == "memory:":
        from plait.events.stores._memory import MemoryStore

        return MemoryStore()
    if text.startswith(("postgresql://", "postgres://")):
        try:
            from plait.events.stores._postgres import PostgresStore
        except ImportError as exc:  # not installed, or installed without a libpq it can use
            if not (exc.name or "psycopg").startswith("psycopg"):
                raise
            why = (
                "which is not installed"
                if isinstance(exc, ModuleNotFoundError)
                else f"which cannot be loaded ({str(exc).splitlines()[0]})"
            )
            raise StoreUnavailableError(
                f"a PostgreSQL store needs psycopg, {why}: pip install 'plait[postgres]'"
            ) from None
        return PostgresStore(text)
    if text.startswith("sqlite://"):
        text = text.removeprefix("sqlite://")
    if "://" in text:
        raise StoreUnavailableError(
            f"{url}: unknown store URL (expected a SQLite path, sqlite:///PATH, "
            "postgresql://... or memory:)"
        )
    from plait.events.stores._sqlite import SqliteStore

    return SqliteStore(text)
