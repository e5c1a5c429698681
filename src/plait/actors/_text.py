"""Text that enters the log: what is not valid Unicode, and how text from outside is mended.

Every text an event holds is stored as UTF-8, and a Python ``str`` may hold what UTF-8 cannot
encode: a lone surrogate (U+D800 to U+DFFF), which is what undecodable bytes become when decoded
with ``surrogateescape``, and what a JSON ``\\ud800`` escape decodes to. Input given to plait is
refused (``plait.runtime._inputs``); text from tools, MCP servers and the model is mended here,
each lone surrogate and each undecodable byte sequence becoming U+FFFD, and recorded so
(docs/event-log.md#text).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final, TypeVar

import msgspec

__all__ = [
    "REPLACEMENT",
    "decoded_mended",
    "lone_surrogate",
    "mended",
    "mended_json",
    "mended_value",
    "undecodable",
]

T = TypeVar("T")

REPLACEMENT: Final = "\ufffd"
"""What stands for text that could not be read: U+FFFD REPLACEMENT CHARACTER."""

_LONE: Final = re.compile("[\ud800-\udfff]")

# One JSON escape at a time, left to right, so that ``\\ud800`` (an escaped backslash, then
# text) is never taken for a surrogate: a high and low surrogate pair, any surrogate alone, or
# any other escape (kept).
_ESCAPE: Final = re.compile(
    r"\\(?:(u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(u[dD][89a-fA-F][0-9a-fA-F]{2})|(.))",
    re.DOTALL,
)


def undecodable(exc: UnicodeDecodeError) -> str:
    """Where bytes stop being UTF-8, as people are told it: ``byte 0xed at offset 2``."""
    return f"byte 0x{exc.object[exc.start]:02x} at offset {exc.start}"


def lone_surrogate(text: str) -> int | None:
    """The offset of the first character of ``text`` UTF-8 cannot encode, or ``None``."""
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def mended(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (the same object when it has none)."""
    if lone_surrogate(text) is None:
        return text
    return _LONE.sub(REPLACEMENT, text)


def mended_value(value: object) -> object:
    """``value`` (JSON-like: strings, lists, tuples, dicts) with every string ``mended``."""
    if isinstance(value, str):
        return mended(value)
    if isinstance(value, list | tuple):
        return [mended_value(item) for item in value]
    if isinstance(value, dict):
        return {mended_value(key): mended_value(item) for key, item in value.items()}
    return value


def mended_json(data: bytes) -> bytes:
    """JSON text as received, mended: undecodable bytes and ``\\uXXXX`` escapes of a lone
    surrogate become U+FFFD (escaped pairs and every other escape stay as they are)."""
    text = data.decode("utf-8", "replace")
    if "\\u" in text:
        text = _ESCAPE.sub(_escape, text)
    return text.encode()


def decoded_mended(decode: Callable[[bytes], T], data: bytes) -> T:
    """``decode(data)``; JSON with undecodable bytes or lone surrogates is decoded mended
    (``mended_json``), so their text is read, and recorded, as U+FFFD (docs/event-log.md#text).
    Raise what ``decode`` raised when there is nothing to mend: it is malformed."""
    try:
        return decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError):
        mended = mended_json(data)
        if mended == data:
            raise
        return decode(mended)


def _escape(match: re.Match[str]) -> str:
    return "\\ufffd" if match.group(2) else match.group(0)
