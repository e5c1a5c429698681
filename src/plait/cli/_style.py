"""Colour for people at a terminal, and none for anyone else.

``Style.for_stream(stream, choice)`` decides once, for one stream, whether its text is
coloured: ``--color never`` or ``always`` say so outright; ``auto`` (the default) colours a
terminal whose ``TERM`` is not ``dumb``, unless ``NO_COLOR`` is set (and not empty), and
colours any stream if ``FORCE_COLOR`` is. Its methods return the text unchanged when colour
is off, so that what a pipe or ``--json`` gets is byte for byte what it got before.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TextIO, get_args

__all__ = ["CHOICES", "PLAIN", "ColorChoice", "Style", "is_terminal", "wants_color"]

ColorChoice = Literal["auto", "always", "never"]
"""What ``--color`` takes."""
CHOICES: tuple[str, ...] = get_args(ColorChoice)

_GREEN, _RED, _YELLOW, _CYAN = 32, 31, 33, 36
_OUTCOMES = {
    **dict.fromkeys(["ok", "completed", "ready", "intact", "open"], _GREEN),
    **dict.fromkeys(["error", "failed", "timeout", "model_error", "crashed", "broken"], _RED),
    **dict.fromkeys(
        ["refused", "denied", "cancelled", "aborted", "interrupted", "replaced", "truncated"],
        _YELLOW,
    ),
    **dict.fromkeys(["filtered", "unknown", "lapsed"], _YELLOW),
    **dict.fromkeys(["pending", "running", "live"], _CYAN),
}
"""The colour of each outcome or state word: done well, went wrong, cut short, not over."""


def is_terminal(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``stream`` is a terminal that understands escape codes (``TERM`` not
    ``dumb``)."""
    env = os.environ if environ is None else environ
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False
    return tty and env.get("TERM", "") != "dumb"


def wants_color(
    stream: TextIO, choice: str | None = "auto", environ: Mapping[str, str] | None = None
) -> bool:
    """Whether text written to ``stream`` is coloured, ``choice`` being ``--color``'s value
    (``None`` is ``auto``)."""
    if choice == "never":
        return False
    if choice == "always":
        return True
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    return is_terminal(stream, env)


@dataclass(frozen=True, slots=True)
class Style:
    """Paints text with ANSI colours when ``enabled``; otherwise returns it as it is."""

    enabled: bool = False
    """Whether the stream it was made for is coloured."""

    @classmethod
    def for_stream(
        cls, stream: TextIO, choice: str | None = "auto", environ: Mapping[str, str] | None = None
    ) -> Style:
        """The style of ``stream`` under ``--color choice`` (see ``wants_color``)."""
        return cls(wants_color(stream, choice, environ))

    @classmethod
    def for_args(cls, args: argparse.Namespace, stream: TextIO) -> Style:
        """The style of ``stream`` for a command run with ``args``: its ``--color``, and
        none at all with ``--json``."""
        if getattr(args, "json", False):
            return PLAIN
        return cls.for_stream(stream, getattr(args, "color", None))

    def paint(self, text: str, *codes: int) -> str:
        """``text`` in the SGR ``codes`` (1 bold, 2 dim, 31 red...), reset after it."""
        if not self.enabled or not codes or not text:
            return text
        return f"\x1b[{';'.join(map(str, codes))}m{text}\x1b[0m"

    def bold(self, text: str) -> str:
        """``text`` in bold."""
        return self.paint(text, 1)

    def dim(self, text: str) -> str:
        """``text`` faint: what is there to be found, not read."""
        return self.paint(text, 2)

    def red(self, text: str) -> str:
        """``text`` in red: what went wrong."""
        return self.paint(text, 31)

    def green(self, text: str) -> str:
        """``text`` in green: what went well."""
        return self.paint(text, 32)

    def yellow(self, text: str) -> str:
        """``text`` in yellow: what was cut short or refused."""
        return self.paint(text, 33)

    def cyan(self, text: str) -> str:
        """``text`` in cyan: who is speaking, what is running."""
        return self.paint(text, 36)

    def outcome(self, text: str, outcome: str | None = None) -> str:
        """``text`` in the colour of ``outcome`` (default: ``text`` itself), e.g. ``ok``
        green, ``error`` red, ``cancelled`` yellow; a word it does not know is left plain."""
        colour = _OUTCOMES.get((outcome if outcome is not None else text).strip())
        return text if colour is None else self.paint(text, colour)


PLAIN = Style(False)
"""No colour: what pipes, files and ``--json`` get."""
