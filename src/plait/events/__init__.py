# The events wing: event types, the codec and upcasters, the stores, and projections.
# It imports nothing else of plait but `plait.errors`; every other wing builds on it.
"""The append-only event log that every plait state is a projection of."""

from plait.events.blobs import DEFAULT_BLOB_THRESHOLD
from plait.events.codec import (
    CURRENT_VERSIONS,
    GENESIS_HASH,
    UPCASTERS,
    Upcasters,
    decode_event,
    decode_rows,
    encode_event,
    from_jsonl,
    to_jsonl,
)
from plait.events.store import EventStore, StreamInfo, Subscription, Verification
from plait.events.stores.memory import MemoryStore
from plait.events.stores.sqlite import SqliteStore
from plait.events.types import *  # noqa: F403 - the event types are this wing's vocabulary
from plait.events.types import __all__ as _types_all
from plait.events.values import *  # noqa: F403
from plait.events.values import __all__ as _values_all

__all__ = [
    "CURRENT_VERSIONS",
    "DEFAULT_BLOB_THRESHOLD",
    "GENESIS_HASH",
    "UPCASTERS",
    "EventStore",
    "MemoryStore",
    "SqliteStore",
    "StreamInfo",
    "Subscription",
    "Upcasters",
    "Verification",
    "decode_event",
    "decode_rows",
    "encode_event",
    "from_jsonl",
    "to_jsonl",
    *_types_all,
    *_values_all,
]
