# The replay wing: deterministic replay, fork, audit, crash recovery.
# It imports `plait.events` and `plait.actors`.
"""Replay, audit and recovery (arrive with the replay issue)."""

__all__: list[str] = []
