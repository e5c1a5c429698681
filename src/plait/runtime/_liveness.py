"""Whether the process an owner id names still runs, when it ran on this machine
(docs/processes.md#a-dead-owner-on-this-machine).

A runtime's default owner id is ``host:pid:random:where.start``: ``where`` (8 hex digits)
names this machine's boot, ``start`` when the process started, so that a pid used again by a
later process is not taken for the owner. A process that reads an id with its own ``where``
looks the pid up; no such process, a zombie, or one started at another time means the owner is
dead, and its lease can be taken at once instead of after ``lease_sec``.

Two schemes make and read them; ``scheme()`` picks this system's:

- ``PROC`` wherever there is Linux's ``/proc``: ``where`` hashes the kernel's boot id and the
  pid namespace, so two machines with one host name, or two containers with their own pids,
  differ; ``start`` is in clock ticks since boot (``/proc/PID/stat``). Exact, and read alike by
  every process.
- ``PSUTIL`` elsewhere (macOS, Windows, the BSDs): ``where`` hashes the host name and the boot
  time in whole seconds, ``start`` is the creation time in microseconds, both as psutil reads
  them from the kernel there. Never on Linux: psutil adds a process's ticks to a boot time
  that it reckons from the wall clock, which two processes may read a second apart.

The two hash different inputs, so neither takes the other's ids for its own. Everything else
tells nothing and the owner counts as alive (its lease lapses in its own time): another machine
or scheme, an id without ``where.start`` (given as ``RuntimeSettings(owner_id=)``, or made by
an older plait as ``host:pid:random``), a process hidden from this one, and, under ``PSUTIL``
on macOS and NetBSD, any owner once the clock was stepped.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import hashlib
import os
import re
import socket
import uuid
from pathlib import Path
from typing import Literal

__all__ = ["PROC", "PSUTIL", "OwnerState", "Scheme", "new_owner_id", "owner_state", "scheme"]

OwnerState = Literal["live", "dead", "elsewhere", "unknown"]
"""What this process can tell of an owner: ``live`` (it runs here), ``dead`` (it ran here and
does no more), ``elsewhere`` (another machine, pid namespace or scheme), ``unknown`` (its id
does not say where it runs, or the system does not say whether it does)."""

_PROOF = re.compile(r"(?P<where>[0-9a-f]{8})\.(?P<start>[0-9]+)")


def new_owner_id() -> str:
    """A new owner id for this process: ``host:pid:random``, then ``:where.start`` where the
    system tells them."""
    pid = os.getpid()
    base = f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:6]}"
    proof = scheme().proof(pid)
    return base if proof is None else f"{base}:{proof}"


def owner_state(owner: str) -> OwnerState:
    """Whether the process that ``owner`` names still runs, as far as this process can tell."""
    return scheme().owner_state(owner)


class Scheme(abc.ABC):
    """One way to say where a process runs and when it started (``where.start``), and to tell
    from them whether it still runs."""

    def proof(self, pid: int) -> str | None:
        """``where.start`` of process ``pid`` of this machine; ``None`` where the system does not
        tell them."""
        where, start = self.where(), self.start(pid)
        return None if where is None or start is None else f"{where}.{start}"

    def owner_state(self, owner: str) -> OwnerState:
        """Whether the process that ``owner`` names still runs, as far as this scheme tells."""
        parts = owner.split(":")
        proof = _PROOF.fullmatch(parts[-1]) if len(parts) >= 4 else None
        if proof is None or not parts[-3].isdigit() or int(parts[-3]) <= 0:
            return "unknown"
        here = self.where()
        if here is None:
            return "unknown"
        if proof["where"] != here:
            return "elsewhere"
        return self.state(int(parts[-3]), int(proof["start"]))

    @abc.abstractmethod
    def where(self) -> str | None:
        """This machine's boot, hashed to 8 hex digits; ``None`` where it cannot be read."""

    @abc.abstractmethod
    def start(self, pid: int) -> int | None:
        """When process ``pid`` started, in this scheme's unit; ``None`` where it cannot be
        read."""

    @abc.abstractmethod
    def state(self, pid: int, start: int) -> OwnerState:
        """Whether process ``pid`` of this machine, started at ``start``, still runs."""


class _Proc(Scheme):
    """Linux's ``/proc``: the boot id, the pid namespace and start times in clock ticks."""

    def where(self) -> str | None:
        return self._where

    @functools.cached_property
    def _where(self) -> str | None:
        try:
            boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
            namespace = os.readlink("/proc/self/ns/pid")
        except OSError:
            return None
        return hashlib.sha256(f"{boot} {namespace}".encode()).hexdigest()[:8]

    def start(self, pid: int) -> int | None:
        stat = self._stat(pid)
        return None if stat is None else stat[1]

    def state(self, pid: int, start: int) -> OwnerState:
        try:
            os.kill(pid, 0)  # whoever runs it: /proc may hide other users' processes
        except ProcessLookupError:
            return "dead"
        except PermissionError:
            pass  # it runs, as another user
        except OSError:
            return "unknown"
        stat = self._stat(pid)
        if stat is None:  # gone since, or hidden from this process: it cannot be told
            return "unknown"
        letter, ticks = stat
        return "dead" if letter in ("Z", "X") or ticks != start else "live"

    @staticmethod
    def _stat(pid: int) -> tuple[str, int] | None:
        """Process ``pid``'s state letter and start time (clock ticks since boot), from
        ``/proc/PID/stat``; ``None`` when it cannot be read."""
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        # The command name (field 2) may hold spaces and parentheses: count from the last ")".
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 20 or not fields[19].isdigit():
            return None
        return fields[0], int(fields[19])


class _Psutil(Scheme):
    """psutil's boot time and process creation times, which macOS, Windows and the BSDs keep
    in the kernel: every process reads the same ones. psutil is imported on first use."""

    def __init__(self) -> None:
        self._own: tuple[int, int | None] | None = None
        """This process's pid and its start as this scheme first read it."""

    def where(self) -> str | None:
        import psutil

        if self._clock_stepped():
            return None
        try:
            boot = psutil.boot_time()
        except OSError:
            return None
        # Whole seconds: Windows reckons its boot time from the clock and the uptime, which two
        # processes read some milliseconds apart. A time is not a machine: the host name tells
        # apart two booted in one second. The "psutil" keeps the hash off PROC's.
        text = f"psutil {socket.gethostname()} {round(boot)}"
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    def start(self, pid: int) -> int | None:
        import psutil

        try:
            created = psutil.Process(pid).create_time()
        except psutil.Error:
            return None
        return round(created * 1_000_000)

    def state(self, pid: int, start: int) -> OwnerState:
        import psutil

        try:
            process = psutil.Process(pid)
            with contextlib.suppress(psutil.AccessDenied):  # it runs, as another user
                if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                    return "dead"
            created = round(process.create_time() * 1_000_000)
        except psutil.NoSuchProcess:  # a zombie too (psutil.ZombieProcess): it runs nothing
            return "dead"
        except psutil.Error:  # hidden from this process: it cannot be told
            return "unknown"
        return "live" if created == start else "dead"

    def _clock_stepped(self) -> bool:
        """Whether this process's own start reads otherwise than it first did: on macOS and
        NetBSD psutil moves every creation time it gives by a clock step since its import, so
        none compares with another process's, and this process cannot say where it is."""
        pid = os.getpid()
        start = self.start(pid)
        if self._own is None or self._own[0] != pid:  # first use, or a forked child's
            self._own = (pid, start)
        return start is None or start != self._own[1]


PROC: Scheme = _Proc()
PSUTIL: Scheme = _Psutil()


@functools.cache
def scheme() -> Scheme:
    """The scheme of this system: ``PROC`` wherever ``/proc`` has Linux's files, else
    ``PSUTIL``."""
    return PROC if Path("/proc/self/stat").exists() else PSUTIL
