"""Hypothesis strategies built from the event types themselves, so a new type is covered at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import msgspec
from hypothesis import strategies as st

from plait.events import AnyBody, Event, NewEvent
from plait.events.codec import BODY_TYPES

texts = st.text(max_size=30)
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


def _from_info(info: msgspec.inspect.Type) -> st.SearchStrategy[Any]:  # noqa: PLR0911
    mi = msgspec.inspect
    if isinstance(info, mi.StrType):
        return texts
    if isinstance(info, mi.IntType):
        return st.integers(min_value=-(2**40), max_value=2**40)
    if isinstance(info, mi.FloatType):
        return st.floats(allow_nan=False, allow_infinity=False)
    if isinstance(info, mi.BoolType):
        return st.booleans()
    if isinstance(info, mi.NoneType):
        return st.none()
    if isinstance(info, mi.BytesType):
        return st.binary(max_size=40)
    if isinstance(info, mi.DateTimeType):
        return times
    if isinstance(info, mi.LiteralType):
        return st.sampled_from(info.values)
    if isinstance(info, mi.ListType):
        return st.lists(_from_info(info.item_type), max_size=3)
    if isinstance(info, mi.DictType):
        return st.dictionaries(_from_info(info.key_type), _from_info(info.value_type), max_size=3)
    if isinstance(info, mi.UnionType):
        return st.one_of([_from_info(t) for t in info.types])
    if isinstance(info, mi.StructType):
        return struct_strategy(info.cls)
    raise NotImplementedError(f"no strategy for {info!r}")


@cache
def struct_strategy(cls: type[msgspec.Struct]) -> st.SearchStrategy[Any]:
    """Any instance of ``cls`` (recursively, with every optional field sometimes set)."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    fields = {f.name: st.deferred(lambda f=f: _from_info(f.type)) for f in info.fields}
    return st.builds(cls, **fields)


bodies: st.SearchStrategy[Any] = st.one_of([struct_strategy(cls) for cls in BODY_TYPES.values()])
"""Any persisted body of any type."""


@st.composite
def events(draw: st.DrawFn) -> Event:
    """Any stored event, with its envelope fields as a store would set them."""
    body = draw(bodies)
    return Event(
        stream=draw(texts),
        seq=draw(st.integers(1, 2**40)),
        at=draw(times),
        v=type(body).VERSION,
        body=body,
        prev_hash=draw(st.binary(min_size=32, max_size=32)),
        conversation_id=draw(st.none() | texts),
        task_id=draw(st.none() | texts),
        position=draw(st.integers(0, 2**40)),
        hash=draw(st.binary(max_size=32)),
    )


def new_events(items: list[Any], start: datetime) -> list[NewEvent]:
    """Stamp ``(body, conversation_id, task_id)`` triples a millisecond apart."""
    return [
        NewEvent(body, conv, task, start + timedelta(milliseconds=i))
        for i, (body, conv, task) in enumerate(items)
    ]


__all__ = ["AnyBody", "bodies", "events", "new_events", "struct_strategy"]
