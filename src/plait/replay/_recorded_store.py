"""The replay's store: the log's clock, and the program halted where the recorded process stopped.

Internal to the replay driver (``_driver.py``), not part of the public API.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime

import msgspec

from plait.events import Body, Event, NewEvent, PreparedAppend, draft, utc_now
from plait.events.stores import MemoryStore
from plait.replay._inference import is_lifecycle, recorded_only, submitted_task

__all__ = ["RecordedStore"]

log = logging.getLogger("plait.replay")


class RecordedStore(MemoryStore):
    """A memory store whose clock is the log's: the n-th event of the program gets the time
    the n-th was recorded at, and a server's event the time it was recorded at.

    It also stops the program where the recorded process stopped: from a crash point on,
    nothing is stored (the program runs on, unheard) until ``release`` lets the resumed
    program record its recovery there. What came from outside and landed among the program's
    events where it happened to (a task submitted, what an MCP server did) and that the log
    recorded before the crash point still lands: the program may run ahead of it, as the
    killed process did not, so the program's own events stop short of the crash point by what
    is still to land (docs/replay.md#crashes).

    And it holds the program where the log has a server's report right after one of its
    events: the append of that event returns once the driver has fed the report in (``fed``),
    and so does the program's next append (that event may have been the driver's), so the
    report reaches the pool before anything the program does next asks it for its tools, as in
    the recorded run (docs/replay.md#what-replay-feeds-in).
    """

    writes_ahead = False  # each append passes ``append``, where the program is stopped

    def __init__(
        self,
        recorded: list[Event],
        crash_points: list[int],
        racing: Mapping[int, Body],
        reports: Mapping[int, int] | None = None,
        wait_sec: float = 5.0,
    ) -> None:
        """``crash_points`` and the keys of ``racing`` (what came from outside, as recorded)
        are seqs of the program's log; ``reports``: after the program's n-th event, the
        recorded seq of the server's report to be fed in before its append returns (held for
        ``wait_sec`` at most)."""
        super().__init__()
        self._reports = dict(reports or {})
        self._fed = 0  # the recorded seq the driver has fed everything up to
        self._feeding = threading.Condition()
        self._wait_sec = wait_sec
        self._driver = threading.get_ident()  # never held: it is the one that feeds
        self._program = [e.at for e in recorded if not recorded_only(e.body)]
        self._servers = [(e.body, e.at) for e in recorded if is_lifecycle(e.body)]
        self._count = 0
        self._halts = list(crash_points)
        self._halted = False
        self._halt_lock = threading.Lock()
        self._racing = racing
        self._pending = sorted(racing)  # the seqs of those not stored yet

    def append(
        self,
        stream: str,
        events: Sequence[Body | NewEvent],
        expected_seq: int,
        *,
        epoch: int | None = None,
    ) -> list[Event]:
        program = not all(_reported(item) for item in events)
        if program and not self._halted:  # a report before these, after an event not held for
            self._hold()  # it (the driver's own, as it resumes the program)
        with self._halt_lock:
            if self._halted:  # the program's own events go unheard; what raced in lands
                claimed = self._claim(events, self._halts[0] if self._halts else None)
                kept = [item for item in events if id(item) in claimed]
                at = self.last_seq(stream)
            else:
                claimed = self._claim(events, None)
                kept, at = list(events[: self._before_halt(events, expected_seq)]), expected_seq
            for item in kept:
                if (seq := claimed.get(id(item))) is not None:
                    del self._pending[bisect.bisect_left(self._pending, seq)]
        stored = super().append(stream, kept, at, epoch=epoch) if kept else []
        if stored and program:
            self._hold()
        heard = {id(item) for item in kept}
        unheard = [draft(stream, item) for item in events if id(item) not in heard]
        after, now = (stored[-1].seq if stored else expected_seq), utc_now()
        return stored + [d.unstored(stream, after + i, now) for i, d in enumerate(unheard, 1)]

    def fed(self, seq: int) -> None:
        """The driver has fed in what the log recorded up to ``seq``."""
        with self._feeding:
            if seq > self._fed:
                self._fed = seq
                self._feeding.notify_all()

    def _hold(self) -> None:
        """Wait for the report the log recorded right after the program's event just stored,
        if any: the program goes on (and may ask for its tools) once the pool has it."""
        report = self._reports.get(self._count, 0)
        if not report or threading.get_ident() == self._driver:
            return
        with self._feeding:
            if not self._feeding.wait_for(lambda: self._fed >= report, self._wait_sec):
                log.warning(
                    "replay: the program waited %g s for the report at seq %d, which was not "
                    "fed in; going on without it",
                    self._wait_sec,
                    report,
                )

    def _before_halt(self, events: Sequence[Body | NewEvent], expected_seq: int) -> int:
        """How many of ``events``, to follow seq ``expected_seq``, come before the next crash
        point (halting the program if not all: hold the lock)."""
        halt = next((seq for seq in self._halts if seq > expected_seq), None)
        last = expected_seq + len(events)
        if halt is None:
            return len(events)
        waiting = bisect.bisect_left(self._pending, halt)  # to land before the crash point
        if halt - waiting > last:
            return len(events)  # far from it, whatever lands meanwhile
        stop = halt - waiting + len(self._claim(events, halt))  # the program's own end there
        if stop > last:
            return len(events)
        self._halted = True
        return stop - expected_seq - 1

    def _claim(self, events: Sequence[Body | NewEvent], before: int | None) -> dict[int, int]:
        """The recorded seq of each of ``events`` that came from outside, by the item's id:
        the first such not stored yet (and before seq ``before``) (hold the lock)."""
        claimed: dict[int, int] = {}
        for item in events:
            body = item.body if isinstance(item, NewEvent) else item
            if not (is_lifecycle(body) or submitted_task(body) is not None):
                continue
            for seq in self._pending:
                if before is not None and seq >= before:
                    break
                if seq not in claimed.values() and self._racing[seq] == body:
                    claimed[id(item)] = seq
                    break
        return claimed

    def release(self, *, at_halt: bool) -> None:
        """The program was stopped where the process stopped: let the resumed one record.
        ``at_halt``: at the crash point (or forced close) it was halted at, which is passed;
        else where a stop on purpose handed the session back (every crash point still holds)."""
        with self._halt_lock:
            self._halted = False
            if at_halt and self._halts:
                self._halts.pop(0)

    def _prepare(
        self, stream: str, drafts: list[NewEvent], head_seq: int, head_hash: bytes
    ) -> PreparedAppend:
        timed = [msgspec.structs.replace(draft, at=self._time(draft.body)) for draft in drafts]
        return super()._prepare(stream, timed, head_seq, head_hash)

    def _time(self, body: Body) -> datetime | None:
        if is_lifecycle(body):
            for i, (recorded, at) in enumerate(self._servers):
                if recorded == body:
                    del self._servers[i]
                    return at
            return None
        self._count += 1
        return self._program[self._count - 1] if self._count <= len(self._program) else None


def _reported(item: Body | NewEvent) -> bool:
    """Whether ``item`` is the pool's record of what a server did (not the program's)."""
    return is_lifecycle(item.body if isinstance(item, NewEvent) else item)
