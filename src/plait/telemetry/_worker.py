"""The live export's own process: ``python -m plait.telemetry._worker SETTINGS INSTANCE``.

It reads frames of events from stdin (``telemetry/_live.py`` writes them), folds them into
spans and metrics and hands those to the OpenTelemetry SDK, which batches and sends them. In a
process of its own, the folding, encoding and sending take no turn of the interpreter from the
sessions (docs/telemetry.md#cost). When stdin ends, because the runtime closed or its process
died, it sends what it has, prints its counts on stdout and exits.
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import BinaryIO, Literal, TextIO

import msgspec

from plait.events import Event
from plait.telemetry._exporting import EXPORT_TIMEOUT_SEC, Exporting, TelemetryStats
from plait.telemetry._settings import TelemetrySettings

__all__ = ["Frame", "Reply", "main", "read_frames"]

HEADER = 4
"""Bytes of a frame's length, big-endian, before the frame."""


class Frame(msgspec.Struct, frozen=True):
    """What the runtime's process sends the worker."""

    kind: Literal["events", "past", "flush"]
    """``events``: fold and send; ``past``: fold only (recorded before the export began);
    ``flush``: send what has ended, then reply."""
    events: list[Event] = []
    """The events, in log order."""
    lost: int = 0
    """Events the runtime's process could not hand on (it fell too far behind)."""


class Reply(msgspec.Struct, frozen=True):
    """One line of the worker's stdout: after a flush, and last."""

    stats: TelemetryStats
    """Its counts so far (in all, in the last line)."""
    flushed: bool = False
    """After a flush: whether every ended span was sent in time."""


encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Frame).decode


def read_frames(stream: BinaryIO) -> Frame | None:
    """The next frame on ``stream``; ``None`` once it has ended."""
    head = stream.read(HEADER)
    if len(head) < HEADER:
        return None
    data = stream.read(int.from_bytes(head, "big"))
    return _decode(data)


def _reply(out: TextIO, reply: Reply) -> None:
    out.write(msgspec.json.encode(reply).decode() + "\n")
    out.flush()


def main(argv: list[str], stdin: BinaryIO, stdout: TextIO) -> int:
    """Export what arrives on ``stdin`` as ``argv``'s settings say, until it ends."""
    settings = msgspec.json.decode(argv[0], type=TelemetrySettings)
    logging.basicConfig(level=logging.WARNING, format="plait: %(message)s", stream=sys.stderr)
    # The SDK's own lines (each retry, each failure) are not the user's: plait says what failed
    # once (docs/telemetry.md#when-the-backend-fails).
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL + 1)
    exporting = Exporting(settings, argv[1])
    lost, broken = 0, False
    while (frame := read_frames(stdin)) is not None:
        lost += frame.lost
        try:
            if frame.kind == "past":
                exporting.past(frame.events)
            elif frame.kind == "events":
                exporting.fold(frame.events)
            else:
                flushed = exporting.flush(EXPORT_TIMEOUT_SEC)
                _reply(stdout, Reply(exporting.stats(lost), flushed))
        except Exception as exc:  # a bug of plait's: the sessions go on, spans may be wrong
            if not broken:
                broken = True
                logging.getLogger(__name__).warning("telemetry: folding the log failed: %r", exc)
    _reply(stdout, Reply(exporting.close(EXPORT_TIMEOUT_SEC, lost)))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runtime's process decides when it ends
    sys.exit(main(sys.argv[1:], sys.stdin.buffer, sys.stdout))
