"""The codec round-trips every event exactly, and reads old versions through upcasters."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from strategies import events

from plait._errors import CorruptEventError, UnknownEventTypeError
from plait.events import (
    GENESIS_HASH,
    Event,
    ToolCallCompleted,
    Upcasters,
    decode_event,
    decode_rows,
    encode_event,
    from_jsonl,
    to_jsonl,
)
from plait.events._codec import CURRENT_VERSIONS, EventMap


def _decode(data: bytes, like: Event) -> Event:
    """Decode by both paths: the fast one every read takes, and the careful one."""
    # Any hash and columns: decoding, not checking, is tested.
    rows = [(like.position, data, like.hash, like.stream, like.seq, "?", like.v)]
    (fast,) = decode_rows(rows, check=False)
    careful = decode_event(
        data, stream=like.stream, seq=like.seq, position=like.position, hash=like.hash
    )
    assert fast == careful
    return fast


@settings(max_examples=300)
@given(events())
def test_msgpack_round_trips_every_event(event: Event) -> None:
    data = encode_event(event)
    assert _decode(data, event) == event
    assert encode_event(_decode(data, event)) == data  # same bytes, so the same hash


@settings(max_examples=300)
@given(events())
def test_jsonl_round_trips_every_event(event: Event) -> None:
    lines = list(to_jsonl([event]))
    assert len(lines) == 1 and lines[0].endswith(b"\n")
    assert list(from_jsonl(lines)) == [event]


def test_stored_bytes_leave_out_position_and_hash() -> None:
    event = Event("s", 1, datetime(2026, 1, 1, tzinfo=UTC), 1, ToolCallCompleted("c", "o"), b"p")
    placed = msgspec.structs.replace(event, position=42, hash=b"h" * 32)
    assert encode_event(placed) == encode_event(event)


# An imagined history: ToolCallCompleted v1 named its output `result` and had no outcome.
OLD = {"ToolCallCompleted": 2}


def _v1_event() -> dict[str, Any]:
    return {
        "stream": "s1",
        "seq": 4,
        "at": datetime(2026, 1, 1, tzinfo=UTC),
        "v": 1,
        "body": {"type": "ToolCallCompleted", "call_id": "c1", "result": "42", "failed": True},
        "prev_hash": GENESIS_HASH,
    }


def _upcasters() -> Upcasters:
    registry = Upcasters({**CURRENT_VERSIONS, **OLD})

    @registry.register("ToolCallCompleted", 1)
    def upcast_v1_v2(body: dict[str, Any]) -> dict[str, Any]:
        failed = body.pop("failed", False)
        return {**body, "output": body.pop("result"), "outcome": "error" if failed else "ok"}

    return registry


def test_old_versions_are_read_through_upcasters() -> None:
    data = msgspec.msgpack.encode(_v1_event())
    event = decode_event(
        data,
        stream="s1",
        seq=4,
        position=9,
        hash=b"",
        upcasters=_upcasters(),
    )
    assert event.v == 2
    assert event.body == ToolCallCompleted(call_id="c1", output="42", outcome="error")
    assert event.position == 9


def test_old_versions_in_jsonl_are_upcast_too() -> None:
    line = msgspec.json.encode(_v1_event())
    (event,) = from_jsonl([line], upcasters=_upcasters())
    assert event.body == ToolCallCompleted(call_id="c1", output="42", outcome="error")


def test_a_version_without_upcaster_is_a_clear_error() -> None:
    data = msgspec.msgpack.encode(_v1_event())
    registry = Upcasters({**CURRENT_VERSIONS, **OLD})
    with pytest.raises(UnknownEventTypeError, match=r"stream s1 seq 4: .*'ToolCallCompleted'"):
        decode_event(
            data,
            stream="s1",
            seq=4,
            position=1,
            hash=b"",
            upcasters=registry,
        )


def test_bad_jsonl_lines_name_the_line() -> None:
    good = next(to_jsonl([Event("s", 1, datetime(2026, 1, 1, tzinfo=UTC), 1,
                                ToolCallCompleted("c", "o"), GENESIS_HASH)]))  # fmt: skip
    with pytest.raises(CorruptEventError, match=r"log.jsonl line 2: not JSON"):
        list(from_jsonl([good, b"{nope\n"], source="log.jsonl"))
    with pytest.raises(CorruptEventError, match=r"log.jsonl line 1 seq 1: not a valid event"):
        list(from_jsonl([good.replace(b'"call_id":"c",', b"")], source="log.jsonl"))
    with pytest.raises(CorruptEventError, match="one JSON object"):
        list(from_jsonl([b"[1, 2]"], source="log.jsonl"))


def test_a_row_holding_another_event_is_caught() -> None:
    event = Event("s", 3, datetime(2026, 1, 1, tzinfo=UTC), 1, ToolCallCompleted("c", "o"), b"p")
    with pytest.raises(
        CorruptEventError, match="stream s seq 4: row holds the event of stream s seq 3"
    ):
        decode_event(
            encode_event(event, 1),  # an earlier plait's bytes name their stream and seq
            stream="s",
            seq=4,
            position=1,
            hash=b"",
        )


def test_the_map_form_of_an_event_has_its_fields() -> None:
    """JSON Lines and encoding 1 hold an ``Event`` as ``EventMap``: the same fields, in the
    same order, of the same types and defaults."""
    assert msgspec.structs.fields(EventMap) == msgspec.structs.fields(Event)
