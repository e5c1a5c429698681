"""``Actor``: the pykka thread actor every actor of plait is.

Its inbox is a ``queue.SimpleQueue`` rather than pykka's default ``queue.Queue``: the same FIFO
(``put``, ``get``, ``empty`` are all pykka asks of it) without the locks and conditions of a
bounded queue, so a message costs less to send and take, and an idle actor holds fewer objects
for the garbage collector to walk (a service keeps thousands of sessions' actors).
"""

from __future__ import annotations

import queue
from typing import Any

import pykka

__all__ = ["Actor"]


class Actor(pykka.ThreadingActor):
    """A pykka ``ThreadingActor`` with a light inbox."""

    @staticmethod
    def _create_actor_inbox() -> queue.SimpleQueue[Any]:
        return queue.SimpleQueue()
