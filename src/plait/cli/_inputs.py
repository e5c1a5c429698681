"""What ``plait`` reads from its command line and stdin must be UTF-8.

Python decodes arguments with ``surrogateescape``, so an invalid byte arrives as a lone
surrogate, which no event can hold (docs/event-log.md#text). ``plait`` refuses it instead, on one
line naming the byte and its offset, before it does anything; a prompt read from stdin alike.
A prompt with nothing to do in it (empty, or only blanks) is refused there too: no session is
started and no model is asked.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from plait._errors import InvalidInputError, PlaitError
from plait.actors import undecodable

__all__ = ["check_arguments", "read_prompt"]


def check_arguments(argv: Sequence[str]) -> None:
    """Raise ``PlaitError`` naming the first argument that is not valid UTF-8."""
    for number, argument in enumerate(argv, 1):
        try:
            raw = os.fsencode(argument)
        except UnicodeEncodeError as exc:  # a surrogate no byte decodes to: given by a caller
            raise InvalidInputError(f"argument {number}", exc.start, argument[exc.start]) from None
        problem = _not_utf8(raw)
        if problem:
            shown = raw if len(raw) <= 40 else raw[:40] + b"..."
            raise PlaitError(f"argument {number} ({shown!r}) is not valid UTF-8 ({problem})")


def read_prompt(given: str) -> str:
    """The prompt ``given`` on the command line, or stdin's whole text for ``-``; one that
    is empty or blank is refused."""
    if given != "-":
        text = given  # checked with every argument
        if not text.strip():
            raise PlaitError('the prompt is empty: say what to do, e.g. plait exec "Fix the tests"')
        return text
    stdin = getattr(sys.stdin, "buffer", None)
    if stdin is None:  # a text stream put in its place (an embedder's, a test's)
        text = sys.stdin.read()
    else:
        raw: bytes = stdin.read()
        problem = _not_utf8(raw)
        if problem:
            raise PlaitError(f"the prompt on stdin is not valid UTF-8 ({problem})")
        text = raw.decode()
    if not text.strip():
        raise PlaitError("the prompt on stdin is empty: pipe in what to do, or give it as PROMPT")
    return text


def _not_utf8(raw: bytes) -> str:
    """Where ``raw`` stops being UTF-8 (``byte 0xed at offset 2``), or ``""``."""
    try:
        raw.decode()
    except UnicodeDecodeError as exc:
        return undecodable(exc)
    return ""
