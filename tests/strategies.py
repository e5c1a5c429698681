"""Hypothesis strategies built from the event types themselves, so a new type is covered at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import msgspec
from hypothesis import strategies as st

from plait.events import AnyBody, Event, NewEvent, StoragePolicy
from plait.events._codec import BODY_TYPES

START = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
"""When generated sessions begin."""

texts = st.text(max_size=30)
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


def _from_info(info: msgspec.inspect.Type) -> st.SearchStrategy[Any]:
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
    if isinstance(info, mi.AnyType):  # free JSON, as in ``ModelOptions.extra_body``
        scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | texts
        return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=4)
    raise NotImplementedError(f"no strategy for {info!r}")


_CHECKED: dict[type[msgspec.Struct], st.SearchStrategy[Any]] = {
    StoragePolicy: st.sampled_from(["full", "headers_only", "none"]).map(StoragePolicy)
    | st.floats(min_value=0.001, max_value=1e9).map(lambda sec: StoragePolicy("ttl", sec)),
}
"""Structs whose fields constrain each other: only valid instances."""


@cache
def struct_strategy(cls: type[msgspec.Struct]) -> st.SearchStrategy[Any]:
    """Any instance of ``cls`` (recursively, with every optional field sometimes set)."""
    if cls in _CHECKED:
        return _CHECKED[cls]
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


@st.composite
def session_items(draw: st.DrawFn) -> list[tuple[Any, str | None, str | None]]:
    """A plausible session as ``(body, conversation_id, task_id)`` triples: tasks with tool
    calls, approvals, aborts, compactions, context changes, new and destroyed conversations."""
    from plait.events import (
        ApprovalKeyExpired,
        CommandKey,
        ConversationContextChanged,
        ConversationDestroyed,
        ConversationOpened,
        HistoryCompacted,
        InputImage,
        InputText,
        ModelResponded,
        SessionStarted,
        TaskCompleted,
        TaskEnqueued,
        TaskPlan,
        TaskStarted,
        TokensCounted,
        ToolApprovalDecided,
        ToolApprovalRequested,
        ToolCall,
        ToolCallCompleted,
        ToolCallRequested,
        TurnAborted,
        Usage,
    )

    counter = iter(range(10**6))

    def new_id(prefix: str) -> str:
        return f"{prefix}{next(counter)}"

    items: list[tuple[Any, str | None, str | None]] = [
        (SessionStarted(root_conversation_id="root"), None, None),
        (ConversationOpened(user_instructions=draw(texts)), "root", None),
    ]
    live = ["root"]
    for _ in range(draw(st.integers(1, 12))):
        action = draw(
            st.sampled_from(["task", "task", "task", "open", "compact", "change", "destroy"])
        )
        conv = draw(st.sampled_from(live))
        if action == "open":
            child = new_id("c")
            items.append((ConversationOpened(parent_id=conv), child, None))
            live.append(child)
        elif action == "destroy" and conv != "root":
            items.append((ConversationDestroyed("test"), conv, None))
            live.remove(conv)
        elif action == "compact":
            items.append((HistoryCompacted(draw(texts), draw(st.integers(0, 6))), conv, None))
        elif action == "change":
            clear = draw(st.booleans())
            change = ConversationContextChanged(
                ["user_instructions"], user_instructions="u", clear_history=clear
            )
            items.append((change, conv, None))
        elif action == "task":
            task = new_id("t")
            inputs = draw(
                st.lists(st.sampled_from([InputText("hi"), InputImage("data:,x")]), max_size=2)
            )
            items.append((TaskEnqueued(TaskPlan(task, conv, inputs)), conv, task))
            items.append((TaskStarted(), conv, task))
            for _turn in range(draw(st.integers(1, 3))):
                calls = [
                    ToolCall(new_id("call"), "srv__tool", "{}")
                    for _ in range(draw(st.integers(0, 2)))
                ]
                usage = Usage(draw(st.integers(0, 500)), draw(st.integers(0, 50)))
                items.append((ModelResponded(draw(texts), calls, "stop"), conv, task))
                items.append((TokensCounted(usage), conv, task))
                for call in calls:
                    items.append((ToolCallRequested(call.id, call.name), conv, task))
                    if draw(st.booleans()):
                        items.append((ToolApprovalRequested(call.id, call.name), conv, task))
                        key = draw(st.none() | st.builds(CommandKey, st.just(call.name)))
                        decided = ToolApprovalDecided(call.id, draw(st.booleans()), "user", key=key)
                        items.append((decided, conv, task))
                        if key is not None and draw(st.booleans()):
                            items.append((ApprovalKeyExpired(key), conv, task))
                    if draw(st.integers(0, 4)):
                        items.append((ToolCallCompleted(call.id, draw(texts)), conv, task))
                if calls and draw(st.integers(0, 3)) == 0:
                    reason, cause = draw(
                        st.sampled_from(
                            [("interrupted", "user"), ("crashed", "crash"), ("failed", "model")]
                        )
                    )
                    items.append((TurnAborted(reason, cause), conv, task))
                    break
                if any(
                    not any(
                        isinstance(b, ToolCallCompleted) and b.call_id == c.id for b, _, _ in items
                    )
                    for c in calls
                ):
                    items.append((TurnAborted("failed", "error", "tool lost"), conv, task))
                    break
            items.append((TaskCompleted(draw(texts)), conv, task))
    return items
