"""Steps that all run, even when a signal cuts one (docs/processes.md#stopping).

This is an internal part of the runtime, not part of the public API.

The commands raise ``Stopped`` (a ``BaseException``) in the main thread wherever it waits, once
a process: a procedure of several steps that it cuts (stopping a session's actors, handing it
back) would leave the later ones undone, a lease held, servers running. ``every_step`` runs
them all, and raises the first error once they have run.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["every_step"]


def every_step(*steps: Callable[[], object]) -> None:
    """Run each of ``steps``, the later ones too when one raises; then raise the first error."""
    first: BaseException | None = None
    for step in steps:
        try:
            step()
        except BaseException as exc:  # raised below, once the rest has run
            first = first or exc
    if first is not None:
        raise first
