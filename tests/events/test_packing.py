"""Encoding 3: an append's events packed in one row, and read back checked."""

from __future__ import annotations

import hashlib

import msgspec
import pytest
from support import TickClock

from plait import CorruptEventError, TamperedError
from plait.events import (
    GENESIS_HASH,
    ConversationOpened,
    Event,
    NewEvent,
    SessionStarted,
    ToolCallCompleted,
    TurnAborted,
    TurnStarted,
)
from plait.events._packing import DICTIONARY_ID, Entry, PackedRow, chain, encode_entry, pack, unpack
from plait.events.stores import MemoryStore


def _prepared(n: int = 4, stream: str = "s1", after: int = 0) -> list[Event]:
    """``n`` events of ``stream`` after seq ``after``, prepared as encoding 3 stores them."""
    store = MemoryStore()
    bodies = [NewEvent(SessionStarted(root_conversation_id="root"))]
    bodies += [NewEvent(ConversationOpened(), "root")]
    bodies += [NewEvent(TurnStarted(turn=i), "root", "t1") for i in range(n)]
    prepared = store.prepare(stream, bodies[:n], after, GENESIS_HASH)
    return prepared.events


def _row(events: list[Event]) -> PackedRow:
    entries = [encode_entry(_entry(e)) for e in events]
    return pack(events[-1].seq, events[0].prev_hash, entries, events[-1].hash)


def _entry(e: Event) -> Entry:
    return Entry(e.seq, e.at, e.v, e.body, e.conversation_id, e.task_id)


def test_a_row_reads_back_as_the_events_it_packs() -> None:
    events = _prepared()
    row = _row(events)
    assert (row.seq, row.count, row.prev_hash) == (4, 4, GENESIS_HASH)
    back = unpack("s1", 100, row)
    assert back == [msgspec.structs.replace(e, position=100 + i) for i, e in enumerate(events)]
    assert [e.prev_hash for e in back[1:]] == [e.hash for e in back[:-1]]


def test_each_hash_binds_the_stream_the_previous_hash_and_the_entry() -> None:
    events = _prepared(2)
    entry = encode_entry(_entry(events[1]))
    expected = hashlib.sha256(msgspec.msgpack.encode("s1") + events[0].hash + entry).digest()
    assert events[1].hash == expected == chain("s1")(events[0].hash, entry)


def test_the_frame_names_the_shipped_dictionary() -> None:
    import zstandard

    assert zstandard.get_frame_parameters(_row(_prepared()).data).dict_id == DICTIONARY_ID


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        ({"prev_hash": bytes(31) + b"\x01"}, "do not match the row's hash"),
        ({"hash": bytes(32)}, "do not match the row's hash"),
        ({"count": 3}, "is not the 3 events its count says"),
        ({"count": 0}, "the row's count is 0, no count of events"),
        ({"count": -122}, "the row's count is -122, no count of events"),  # a flipped sign bit
        ({"seq": 5}, "its row places it at seq 2, its bytes at 1"),
    ],
)
def test_a_row_whose_columns_were_edited_is_refused(edit: dict[str, object], reason: str) -> None:
    row = msgspec.structs.replace(_row(_prepared()), **edit)
    with pytest.raises(TamperedError, match=reason):
        unpack("s1", 1, row)


def test_a_row_read_as_another_streams_is_refused() -> None:
    with pytest.raises(TamperedError, match="the row's stream"):
        unpack("s2", 1, _row(_prepared()))


def test_bytes_that_are_not_a_frame_are_named() -> None:
    row = msgspec.structs.replace(_row(_prepared()), data=b"not zstd")
    with pytest.raises(CorruptEventError, match="stream s1 seq 1: cannot decompress the row"):
        unpack("s1", 1, row)


def _stored(stream: str, entries: list[list[object]]) -> PackedRow:
    """A row holding ``entries`` (each an entry's fields, as an older plait may have written
    them), chained as encoding 3 chains."""
    datas = [msgspec.msgpack.encode(fields) for fields in entries]
    prev, link = GENESIS_HASH, chain(stream)
    for data in datas:
        prev = link(prev, data)
    return pack(len(datas), GENESIS_HASH, datas, prev)


def test_an_older_body_version_is_lifted_on_read() -> None:
    at = _prepared(1)[0].at
    v1 = {"type": "TurnAborted", "reason": "interrupted", "detail": "conversation destroyed"}
    (event,) = unpack("s1", 7, _stored("s1", [[1, at, 1, v1, "root", "t1"]]))
    assert isinstance(event.body, TurnAborted)
    assert (event.v, event.body.cause, event.task_id, event.position) == (2, "destroy", "t1", 7)


def test_an_entry_of_no_known_version_is_named() -> None:
    at = _prepared(1)[0].at
    row = _stored("s1", [[1, at, 99, {"type": "TurnStarted", "turn": 1}]])
    with pytest.raises(CorruptEventError, match=r"stream s1 seq 1: .*TurnStarted.* 99"):
        unpack("s1", 1, row)


@pytest.mark.parametrize("check", [True, False])
def test_a_flipped_byte_is_a_corrupt_event_error_or_nothing_read_differently(check: bool) -> None:
    """Checked or not (``plait log --unverified``), a row with any byte flipped reads as it was
    written or stops with ``CorruptEventError``: never another error (text that is not UTF-8
    once was a ``UnicodeDecodeError``)."""
    store = MemoryStore(clock=TickClock())
    bodies = [NewEvent(SessionStarted(root_conversation_id="root"))]
    bodies += [NewEvent(ToolCallCompleted("c1", "une sortie brève"), "root", "t1")]
    events = store.prepare("s1", bodies, 0, GENESIS_HASH).events
    row = _row(events)
    written = unpack("s1", 1, row)
    for at in range(len(row.data)):
        for mask in (0x01, 0x5A, 0x80, 0xFF):
            flipped = bytearray(row.data)
            flipped[at] ^= mask
            try:
                got = unpack(
                    "s1", 1, msgspec.structs.replace(row, data=bytes(flipped)), check=check
                )
            except CorruptEventError:
                continue
            assert not check or got == written, f"byte {at} ^ {mask:#x}"
