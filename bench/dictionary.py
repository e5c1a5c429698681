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

_DROPPED = re.compile(rb"(?<=\xc1\x01)[\x00-\xff]{32}|(?<=\xc1\x02)[\x00-\xff]{16}|scripted-model")
"""Ids and digests, as a row holds them (binary, after their marks: random, so useless to
refer back to), and the scripted model's name (a real session's is another: keeping it
would flatter the bench)."""
LIMIT = 6_000
"""Bytes at most: each row's compression first reads the whole dictionary."""


def main() -> None:
    seen: list[bytes] = []
    original = sqlite_writes.Writes._as_written

    def spy(self, stream, rows):  # type: ignore[no-untyped-def]
        prev = self._heads.get(stream, (0, bytes(32)))[1]
        seen.append(sqlite_groups.pack(rows, prev)[1])  # what a row's deflate compresses
        return original(self, stream, rows)

    sqlite_writes.Writes._as_written = spy  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        storage.run_plait(Path(tmp, "plain.db"), "plain", [range(8)])
        storage.run_plait(Path(tmp, "tool.db"), "tool", [range(8)])
    shapes: Counter[tuple[str, ...]] = Counter()
    example: dict[tuple[str, ...], bytes] = {}
    for data in seen:
        scrubbed = _DROPPED.sub(b"", data)
        size = int.from_bytes(data[:4], "big")
        shape = tuple(t for t, *_ in msgspec.msgpack.decode(data[4 : 4 + size]))  # its types
        shapes[shape] += 1
        example.setdefault(shape, scrubbed)
    out = b"".join(example[shape] for shape, _ in reversed(shapes.most_common()))
    Path(sys.argv[1]).write_bytes(out[-LIMIT:])
    print(f"{len(out[-LIMIT:])} bytes from {len(seen)} appends of {len(shapes)} shapes")


if __name__ == "__main__":
    main()
