"""Export spans and metrics while plait runs, from the log (docs/telemetry.md#live).

Each group of events this process appends is queued as it becomes durable (``store.tap``: a
deque append on the writer's thread, nothing more). Every ``SEND_EVERY_SEC`` a thread writes
what is queued, encoded, to the export's own process (``telemetry/_worker.py``), which folds it
into spans and metrics and sends them: the work of telemetry takes no turn of this process's
interpreter from its sessions. Only the process that writes a session exports it, so processes
sharing a store send each span once. A backend that fails or hangs costs a session nothing:
its spans are dropped and counted, and one warning line says so.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import IO, TYPE_CHECKING

import msgspec

from plait.events import Event, SessionClosed
from plait.telemetry._exporting import EXPORT_TIMEOUT_SEC, TelemetryStats
from plait.telemetry._otlp import require_sdk
from plait.telemetry._settings import TelemetrySettings
from plait.telemetry._worker import HEADER, Frame, Reply, encode

if TYPE_CHECKING:
    from plait.events import EventStore

__all__ = ["LiveExport", "TelemetryStats"]

log = logging.getLogger(__name__)

SEND_EVERY_SEC = 0.2
"""How often what is queued is sent to the export's process: in bursts, not at each append."""
BACKLOG = 100_000
"""Groups queued past which new ones are dropped (and counted): the export's process has
fallen that far behind, or is gone."""
_decode_reply = msgspec.json.Decoder(Reply).decode


class LiveExport:
    """Export each session this process writes to ``store`` as its events land."""

    def __init__(self, store: EventStore, settings: TelemetrySettings, instance: str) -> None:
        """``instance``: the ``service.instance.id`` of this process's spans."""
        require_sdk()
        self.settings = settings
        self._store = store
        package = str(Path(__file__).resolve().parents[2])  # the plait this process runs
        paths = [package, *filter(None, [os.environ.get("PYTHONPATH")])]
        settings_json = msgspec.json.encode(settings).decode()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "plait.telemetry._worker", settings_json, instance],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
            start_new_session=True,  # a Ctrl-C at the terminal is the runtime's to handle
        )
        self._replies: queue.Queue[Reply | None] = queue.Queue()
        self._queue: deque[list[Event] | threading.Event] = deque()
        self._lost = 0
        self._seen: set[str] = set()
        self._last = TelemetryStats(0, 0, 0)
        self._wake = threading.Event()
        self._stopping = False
        self._untap = store.tap(self._heard)
        threading.Thread(target=self._read, name="plait-telemetry-replies", daemon=True).start()
        self._thread = threading.Thread(target=self._run, name="plait-telemetry", daemon=True)
        self._thread.start()

    @property
    def stats(self) -> TelemetryStats:
        """What was exported, as the export's process last said (after ``flush``, ``close``)."""
        return self._last

    def _heard(self, events: list[Event]) -> None:
        """Queue a durable group (on the appending thread: nothing more)."""
        if len(self._queue) < BACKLOG:
            self._queue.append(events)
        else:
            self._lost += len(events)

    def _read(self) -> None:
        out = self._process.stdout
        assert out is not None
        with out:
            for line in out:
                self._replies.put(_decode_reply(line))
        self._replies.put(None)

    def _run(self) -> None:
        pipe = self._process.stdin
        assert pipe is not None
        try:
            while True:
                self._wake.wait(SEND_EVERY_SEC)
                self._wake.clear()
                stopping = self._stopping
                self._send(pipe)
                if stopping:
                    break
        except (OSError, ValueError) as exc:  # its process is gone: nothing more can be sent
            log.warning("telemetry: the export's process ended (%s); spans are lost", exc)
        finally:
            self._lost += sum(len(g) for g in self._queue if not isinstance(g, threading.Event))
            with contextlib.suppress(OSError):  # its reader is gone
                pipe.close()

    def _send(self, pipe: IO[bytes]) -> None:
        """Write what is queued, in order: a frame of events per run between flushes."""
        events: list[Event] = []
        while self._queue:
            item = self._queue.popleft()
            if isinstance(item, threading.Event):
                self._write(pipe, Frame("events", events, self._take_lost()))
                self._write(pipe, Frame("flush"))
                item.set()
                events = []
                continue
            first = item[0]
            if first.stream not in self._seen:
                self._seen.add(first.stream)
                if first.seq > 1:  # a session this process took over or resumed
                    self._write(pipe, Frame("events", events, self._take_lost()))
                    events = []
                    past = self._store.read(first.stream, upto=first.seq - 1)
                    self._write(pipe, Frame("past", past))
            events += item
            if any(type(event.body) is SessionClosed for event in item):
                self._seen.discard(first.stream)  # reopened, its log is read again first
        self._write(pipe, Frame("events", events, self._take_lost()))

    def _take_lost(self) -> int:
        lost, self._lost = self._lost, 0
        return lost

    @staticmethod
    def _write(pipe: IO[bytes], frame: Frame) -> None:
        if frame.kind == "events" and not frame.events and not frame.lost:
            return
        data = encode(frame)
        pipe.write(len(data).to_bytes(HEADER, "big") + data)
        pipe.flush()

    def flush(self, timeout_sec: float = 5.0) -> bool:
        """Send every span that has ended by now; return whether it was done in
        ``timeout_sec`` (or about, plus the export's own timeout)."""
        sent = threading.Event()
        self._queue.append(sent)
        self._wake.set()
        if not sent.wait(timeout_sec):
            return False
        try:
            reply = self._replies.get(timeout=timeout_sec + EXPORT_TIMEOUT_SEC)
        except queue.Empty:
            return False
        if reply is None:
            return False
        self._last = reply.stats
        return reply.flushed

    def close(self, timeout_sec: float = 5.0) -> TelemetryStats:
        """Send what was recorded up to now, then stop; wait at most about ``timeout_sec``
        (and the export's own timeout) for the backend."""
        self._untap()
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout_sec)
        reply: Reply | None = None
        try:
            while (got := self._replies.get(timeout=timeout_sec + EXPORT_TIMEOUT_SEC)) is not None:
                reply = got
        except queue.Empty:
            pass
        try:
            self._process.wait(timeout_sec)
        except subprocess.TimeoutExpired:
            self._process.kill()  # a backend that hangs is not waited for
            self._process.wait()
        if reply is not None:
            self._last = reply.stats
        return self._last
