"""How ``src/plait/events/zstd-1.dict`` was made: zstd's dictionary for the rows of encoding 3
(docs/event-log.md#encoding-3).

A row is compressed with it, so it can never change: a new dictionary has a new id, which the
frames it compresses name. This script records the appends of short sessions of
``bench/storage.py`` (plain turns, and turns with a tool call), takes each append's entries as
encoding 3 packs them before compression, with the scripted model's name taken out (a real
session's is another: keeping it would flatter the bench), and has zstd train a dictionary of
4 KiB on them. Run from the repository root: ``python bench/zstd_dictionary.py
OUT``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import storage  # bench/storage.py, beside this file
import zstandard

from plait.events import EventStore, PreparedAppend
from plait.events._packing import DICTIONARY_ID

SIZE = 4096
"""Bytes: a row's compression first loads the whole dictionary, and more did not pay
(bench/row_compression.py)."""


def record(kinds: dict[str, list[range]]) -> list[tuple[str, bytes]]:
    """Record sessions of each kind; return each append's stream and entries, end to end,
    the scripted model's name taken out."""
    seen: list[tuple[str, bytes]] = []
    original = EventStore._prepare

    def spy(self: EventStore, stream: str, *args: object) -> PreparedAppend:
        packed = original(self, stream, *args)  # type: ignore[arg-type]
        entries = b"".join(row[3] for row in packed.rows)
        seen.append((stream, entries.replace(storage.MODEL.encode(), b"")))
        return packed

    EventStore._prepare = spy  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for kind, sessions in kinds.items():
                storage.run_plait(Path(tmp, f"{kind}.db"), kind, sessions)
    finally:
        EventStore._prepare = original  # type: ignore[method-assign]
    return seen


def main() -> None:
    kinds = {"plain": [range(40), range(40, 60)], "tool": [range(40), range(40, 60)]}
    samples = [entries for _, entries in record(kinds)]
    trained = zstandard.train_dictionary(SIZE, samples, dict_id=DICTIONARY_ID, level=3)
    Path(sys.argv[1]).write_bytes(trained.as_bytes())
    print(f"{len(trained.as_bytes())} bytes from {len(samples)} appends, id {trained.dict_id()}")


if __name__ == "__main__":
    main()
