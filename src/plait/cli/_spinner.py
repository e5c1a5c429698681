"""A line that moves on a terminal while plait waits (for a model's first token, a tool, an
MCP server), so that a wait does not look like a hang. Never on a pipe: ``Spinner.for_stream``
is off unless its stream is a terminal; an off spinner writes nothing.

The line is drawn on stderr with a carriage return and erased (``ESC [K``) before anything
else is printed, so it never stays in what a person reads. A printer ``show``s it only with
its cursor at the start of a line.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import TextIO

from plait.cli._style import is_terminal

__all__ = ["Spinner"]

_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_ASCII_FRAMES = "|/-\\"
_CLEAR = "\r\x1b[K"


class Spinner:
    """A spinner on ``stream``: ``show(label)`` draws it and keeps it moving, ``clear()``
    erases it; every method does nothing if it is not ``enabled``."""

    def __init__(self, stream: TextIO, *, enabled: bool, interval_sec: float = 0.1) -> None:
        self.stream = stream
        self.enabled = enabled
        self.interval_sec = interval_sec
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        self._frames = _FRAMES if encoding == "utf8" else _ASCII_FRAMES
        self._lock = threading.Lock()
        self._label: str | None = None
        self._since = 0.0
        self._frame = 0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    @classmethod
    def for_stream(cls, stream: TextIO, environ: Mapping[str, str] | None = None) -> Spinner:
        """A spinner on ``stream``, on only if it is a terminal (``TERM`` not ``dumb``)."""
        return cls(stream, enabled=is_terminal(stream, environ))

    def show(self, label: str) -> None:
        """Draw the spinner saying ``label`` now, and keep it moving until ``clear``."""
        if not self.enabled:
            return
        with self._lock:
            if label != self._label:
                self._label, self._since = label, time.monotonic()
            self._draw()
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="plait-spinner", daemon=True)
            self._ticker.start()

    def clear(self) -> None:
        """Erase the spinner's line, if it is drawn."""
        if not self.enabled:
            return
        with self._lock:
            if self._label is not None:
                self._label = None
                self.stream.write(_CLEAR)
                self.stream.flush()

    @property
    def shown(self) -> bool:
        """Whether the spinner is drawn now."""
        return self._label is not None

    def close(self) -> None:
        """Erase the spinner and stop its thread."""
        self.clear()
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(1.0)

    def _tick(self) -> None:
        while not self._stop.wait(self.interval_sec):
            with self._lock:
                if self._label is not None:
                    self._draw()

    def _draw(self) -> None:
        """Write the current frame (the lock is held)."""
        frame = self._frames[self._frame % len(self._frames)]
        self._frame += 1
        waited = int(time.monotonic() - self._since)
        after = f" ({waited} s)" if waited else ""
        self.stream.write(f"{_CLEAR}{frame} {self._label}{after}")
        self.stream.flush()
