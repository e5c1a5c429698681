"""``TaskChain``: which of a session's events belong to one submitted task, so that
``plait exec`` shows that task's work and not the session's other tasks'."""

from __future__ import annotations

from plait.events import Event, TaskEnqueued, TurnAborted

__all__ = ["TaskChain"]


class TaskChain:
    """A submitted task and the tasks it leads to: the target of each ``conv_create`` or
    ``conv_send`` that replaced one of them, and the continuation that answers that call
    (docs/conv-tools.md#event-order). Call ``see`` with each event, in log order."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        """The task that was submitted."""
        self._tasks = {task_id}
        self._awaited: set[str] = set()  # calls a continuation of the chain will answer

    def __contains__(self, task_id: str) -> bool:
        """Whether ``task_id`` is of the chain (as far as the events seen tell)."""
        return task_id in self._tasks

    def see(self, event: Event) -> bool:
        """Take the next event; return whether it belongs to the chain (an event of no task,
        a server's say, belongs to every chain)."""
        body = event.body
        if isinstance(body, TaskEnqueued) and body.plan.closure is not None:
            closure = body.plan.closure
            if closure.call_id in self._awaited:
                # The target's plan is enqueued just before, in the same group: its events
                # all come after this one.
                self._tasks.add(body.plan.task_id)
                if closure.target_task_id is not None:
                    self._tasks.add(closure.target_task_id)
        if event.task_id is None:
            return True
        if event.task_id not in self._tasks:
            return False
        if isinstance(body, TurnAborted) and body.reason == "replaced":
            self._awaited.update(body.awaiting_call_ids)
        return True
