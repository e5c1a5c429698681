"""Whether the process an owner id names still runs, when it ran on this machine
(docs/processes.md#a-dead-owner-on-this-machine).

A runtime's default owner id is ``host:pid:random:where.start``. ``where`` (8 hex digits)
names this machine's boot and pid namespace: a hash of the kernel's boot id and the namespace,
so two machines with one host name, or two containers with their own pids, differ. ``start``
is when the process started, in clock ticks since boot (``/proc/PID/stat``), so a pid used
again by a later process is not taken for the owner. A process that reads an id with its own
``where`` looks the pid up; no such process, a zombie, or one started at another time means
the owner is dead, and its lease can be taken at once instead of after ``lease_sec``.

Everything else tells nothing and the owner counts as alive (its lease lapses in its own
time): another machine, an id without ``where.start`` (given as
``RuntimeSettings(owner_id=)``, or made by an older plait as ``host:pid:random``), a system
without ``/proc``, a process hidden from this one.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import socket
import uuid
from pathlib import Path
from typing import Literal

__all__ = ["OwnerState", "new_owner_id", "owner_state"]

OwnerState = Literal["live", "dead", "elsewhere", "unknown"]
"""What this process can tell of an owner: ``live`` (it runs here), ``dead`` (it ran here and
does no more), ``elsewhere`` (another machine or pid namespace), ``unknown`` (its id does not
say where it runs, or the system does not say whether it does)."""

_PROOF = re.compile(r"(?P<where>[0-9a-f]{8})\.(?P<start>[0-9]+)")


def new_owner_id() -> str:
    """A new owner id for this process: ``host:pid:random``, then ``:where.start`` where the
    system tells them (Linux)."""
    pid = os.getpid()
    base = f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:6]}"
    where, started = _where(), _started(pid)
    return base if where is None or started is None else f"{base}:{where}.{started[1]}"


def owner_state(owner: str) -> OwnerState:
    """Whether the process that ``owner`` names still runs, as far as this process can tell."""
    parts = owner.split(":")
    proof = _PROOF.fullmatch(parts[-1]) if len(parts) >= 4 else None
    if proof is None or not parts[-3].isdigit() or int(parts[-3]) <= 0:
        return "unknown"
    if proof["where"] != _where():
        return "elsewhere"
    pid = int(parts[-3])
    try:
        os.kill(pid, 0)  # whoever runs it: /proc may hide other users' processes
    except ProcessLookupError:
        return "dead"
    except PermissionError:
        pass  # it runs, as another user
    except OSError:
        return "unknown"
    started = _started(pid)
    if started is None:  # gone since, or hidden from this process: it cannot be told
        return "unknown"
    state, ticks = started
    return "dead" if state in ("Z", "X") or ticks != int(proof["start"]) else "live"


@functools.cache
def _where() -> str | None:
    """This machine's boot and pid namespace, hashed to 8 hex digits; ``None`` without /proc."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return hashlib.sha256(f"{boot} {namespace}".encode()).hexdigest()[:8]


def _started(pid: int) -> tuple[str, int] | None:
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
