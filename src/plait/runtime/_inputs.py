"""Input checked at the door: text given to a session must be text the log can hold.

A string with a lone surrogate (what undecodable bytes become, decoded with
``surrogateescape``) cannot be encoded as UTF-8, so no event could hold it. The API's entry
points refuse it here, in the caller's thread, with ``InvalidInputError`` naming what and
where, before anything is queued or recorded (docs/event-log.md#text).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from plait._errors import InvalidInputError
from plait.actors import lone_surrogate

__all__ = ["check_input", "check_inputs"]


def check_input(what: str, value: object) -> None:
    """Raise ``InvalidInputError`` if ``value`` (a string, a struct, or lists and dicts of
    them) holds a string UTF-8 cannot encode; ``what`` names it in the message (``""``: a
    struct's fields are named alone)."""
    if isinstance(value, str):
        offset = lone_surrogate(value)
        if offset is not None:
            raise InvalidInputError(what, offset, value[offset])
    elif isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            check_input(f"{what}.{name}" if what else name, getattr(value, name))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            check_input(f"{what}[{index}]", item)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            check_input(f"{what} key {key!r}", key)
            check_input(f"{what}[{key!r}]", item)


def check_inputs(**given: object) -> None:
    """``check_input`` each keyword argument, named by its keyword."""
    for what, value in given.items():
        check_input(what, value)
