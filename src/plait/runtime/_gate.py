"""``TaskGate``: at most ``most`` tasks run at once in the process, whatever their sessions.

A session's scheduler asks it for a run slot before it records a task's start; with none free,
the task stays queued in its session's log (``TaskEnqueued``, no ``TaskStarted``) and the
session waits in line, holding no thread: no caller blocks on the gate, it is told. Slots go to
the sessions in line in the order they came (FIFO across sessions): a slot given back goes to
the first in line, which is told (``wake``) that one is held for it. A session gives its slot
back when its task ends and it has no task of the same interrupt chain to go on with, and the
runtime takes it back when the session's actors stop (closed, lost, handed back, passivated,
failed): a slot that is never given back would hang every task behind it
(docs/processes.md#capacity).

It counts work, where ``Admission`` counts sessions with actors: an idle session keeps its
actors (up to ``max_active_sessions``) and holds no slot, so its next task starts without
bringing the session back from its log.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

from plait._errors import ConfigError

__all__ = ["TaskGate"]

log = logging.getLogger("plait")


class TaskGate:
    """Run slots for tasks; ``None`` slots: no bound."""

    def __init__(self, most: int | None, on_free: Callable[[], object] = lambda: None) -> None:
        """``on_free`` is told when a slot is given back and nobody waits for it, once after
        each ``want`` (a worker that found no room may take on more work then)."""
        if most is not None and most < 1:
            raise ConfigError(f"max_running_tasks: expected at least 1, got {most}")
        self.most = most
        self._lock = threading.Lock()
        self._holders: set[str] = set()
        self._line: OrderedDict[str, Callable[[], object]] = OrderedDict()
        self._on_free = on_free
        self._wanted = False  # someone found no room: tell on_free of the next slot free

    def want(self) -> None:
        """Have ``on_free`` tell of the next slot given back (more work waits)."""
        with self._lock:
            self._wanted = True

    @property
    def running(self) -> int:
        """How many slots are held."""
        return len(self._holders)

    @property
    def waiting(self) -> int:
        """How many sessions wait in line for a slot."""
        return len(self._line)

    def holds(self, holder: str) -> bool:
        """Whether ``holder`` holds a slot."""
        with self._lock:
            return holder in self._holders

    def room(self, busy: int) -> int | None:
        """How many more sessions may start work now, when ``busy`` sessions have work
        (running, queued or on its way) here (``None``: no bound)."""
        if self.most is None:
            return None
        return max(self.most - max(busy, len(self._holders) + len(self._line)), 0)

    def enter(self, holder: str, wake: Callable[[], object]) -> bool:
        """Take a slot for ``holder``'s next task: ``True`` if it holds one (taken now, or
        given to it while it waited). Else it waits in line (once, however often it asks),
        and ``wake`` is called, from the thread that gave the slot back, once one is held
        for it; ``wake`` raising gives that slot on to the next in line."""
        with self._lock:
            if holder in self._holders:
                return True
            if self.most is None or (len(self._holders) < self.most and not self._line):
                self._holders.add(holder)
                return True
            self._line.setdefault(holder, wake)
            return False

    def leave(self, holder: str) -> None:
        """Give back ``holder``'s slot, or its place in line (neither: nothing), and hand the
        slot to the first in line."""
        with self._lock:
            self._line.pop(holder, None)
            if holder not in self._holders:
                return
            self._holders.discard(holder)
        if not self._pass_on():
            with self._lock:
                wanted, self._wanted = self._wanted, False
            if wanted:
                self._on_free()

    def _pass_on(self) -> bool:
        """Give the free slots to those first in line; return whether anyone was given one."""
        given = False
        while True:
            with self._lock:
                if not self._line or (self.most is not None and len(self._holders) >= self.most):
                    return given
                holder, wake = self._line.popitem(last=False)
                self._holders.add(holder)
            try:
                wake()
                given = True
            except Exception:  # its session stopped meanwhile: the next one takes the slot
                log.debug("the gate could not wake %s", holder, exc_info=True)
                with self._lock:
                    self._holders.discard(holder)
