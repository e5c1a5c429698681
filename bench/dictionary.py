"""How ``src/plait/events/stores/dictionary-1.bin`` was made: deflate's preset dictionary
for the rows of layout 4 (docs/storage.md#one-row-per-append).

A row's bytes are compressed with it, so it can never change: a new dictionary is a new
format byte in ``sqlite_groups.py``. This script records the appends of a few short sessions
of ``bench/storage.py`` (plain turns, and turns with a tool call), takes what is packed of each
before compression, drops what is random in it (ids and digests: useless to refer back to),
and keeps one append of each shape, the commonest last (deflate refers most cheaply to the
nearest bytes). Run from the repository root: ``python bench/dictionary.py OUT``.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

import msgspec
import storage  # bench/storage.py, beside this file

from plait.events.stores import sqlite_groups, sqlite_writes

_DROPPED = re.compile(
    rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{64}|scripted-model"
)
"""Ids and hex digests (random, so useless to refer back to), and the scripted model's name
(a real session's is another: keeping it would flatter the bench)."""
LIMIT = 6_000
"""Bytes at most: each row's compression first reads the whole dictionary."""


def main() -> None:
    seen: list[bytes] = []
    original = sqlite_writes.Writes._as_written

    def spy(self, stream, rows):  # type: ignore[no-untyped-def]
        prev = self._heads.get(stream, (0, bytes(32)))[1]
        items = []
        for _, type_name, v, data, digest in rows:
            items.append(sqlite_groups.item(type_name, v, data, prev))
            prev = digest
        seen.append(msgspec.msgpack.encode(items))  # what ``pack_items`` compresses
        return original(self, stream, rows)

    sqlite_writes.Writes._as_written = spy  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        storage.run_plait(Path(tmp, "plain.db"), "plain", [range(8)])
        storage.run_plait(Path(tmp, "tool.db"), "tool", [range(8)])
    shapes: Counter[tuple[str, ...]] = Counter()
    example: dict[tuple[str, ...], bytes] = {}
    for data in seen:
        scrubbed = _DROPPED.sub(b"", data)
        shape = tuple(item[0] for item in msgspec.msgpack.decode(data))  # its events' types
        shapes[shape] += 1
        example.setdefault(shape, scrubbed)
    out = b"".join(example[shape] for shape, _ in reversed(shapes.most_common()))
    Path(sys.argv[1]).write_bytes(out[-LIMIT:])
    print(f"{len(out[-LIMIT:])} bytes from {len(seen)} appends of {len(shapes)} shapes")


if __name__ == "__main__":
    main()
