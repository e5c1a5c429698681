"""How much room a store takes where it lives (``EventStore.space``, ``plait du``)."""

from __future__ import annotations

import msgspec

__all__ = ["Space"]


class Space(msgspec.Struct, frozen=True):
    """How much room a store takes where it lives (``plait du``)."""

    total: int | None
    """Bytes it takes: the SQLite file and its WAL, or the PostgreSQL schema's tables and
    indexes; ``None`` in memory."""
    reclaimable: int | None
    """About how many of them a vacuum would give back; ``None``: not known."""
    vacuum: str = ""
    """What gives them back."""
