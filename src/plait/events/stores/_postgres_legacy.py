"""A PostgreSQL store of an earlier layout, brought to layout 5 once, when it is opened.

This is an internal part of ``PostgresStore``, not part of the public API.

Layouts 1 to 4 kept a row per event in ``events``. Opening such a store moves each of those
rows, as it is, to a row of its own in ``appends`` (``count`` 1, ``prev_hash`` empty: its bytes
hold it), in one transaction that first locks ``events``, so an append of an earlier plait
still running either lands before the move or fails after it, loudly, on a table that is gone
(as does its append function, dropped too). The bytes and hashes are the ones written, so every
hash, signature and witness line goes on verifying; reads tell those rows from rows of
encoding 3 by their first bytes (``plait.events._stored``), and nothing else branches on them.
"""

from __future__ import annotations

__all__ = ["MOVE"]

MOVE = [
    "LOCK TABLE {s}.events IN ACCESS EXCLUSIVE MODE",
    "INSERT INTO {s}.appends (stream, seq, count, position, prev_hash, hash, data) "
    "SELECT stream, seq, 1, position, '\\x'::bytea, hash, data FROM {s}.events",
    "DROP TABLE {s}.events",
    "DROP FUNCTION IF EXISTS {s}.append_v1(text, bigint, bytea, bigint, bigint, text, "
    "text[], integer[], bytea[], bytea[], text[], bigint[], bytea[])",
    "DROP FUNCTION IF EXISTS {s}.append_v2(text, bigint, bytea, bigint, text[], integer[], "
    "bytea[], bytea[], text[], bigint[], bytea[])",
]
"""What moves the ``events`` of an earlier layout to ``appends``, under the schema's advisory
lock and in the transaction that creates ``appends``."""
