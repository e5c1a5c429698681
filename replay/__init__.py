# The replay wing: deterministic replay, fork, audit, crash recovery.
# It imports `plait.events` and `plait.actors`; nothing in them imports it.
"""Replay a recorded session exactly, and say where a program departs from its log."""

from plait.replay.fork import fork
from plait.replay.replay import Divergence, ReplayResult, replay

__all__ = ["Divergence", "ReplayResult", "fork", "replay"]
