"""Approval state: the session's policy, each conversation's own, and the remembered approvals.

Keys (``CommandKey``) are a fold of the log: an approval with scope ``conversation`` or
``session`` adds its key, ``ApprovalKeyExpired`` removes one. A resumed or recovered session
folds them again from its events, so what was approved before a crash holds after it. Whether
a key has lapsed is decided against a recorded time the caller passes, never the clock.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec

from plait.events._types import (
    ApprovalKeyExpired,
    ConversationContextChanged,
    ConversationOpened,
    Event,
    SessionStarted,
    ToolApprovalDecided,
)
from plait.events._values import ApprovalPolicy, CommandKey, stricter
from plait.events.projections._base import Projection

__all__ = ["ApprovalState", "ApprovalsProjection", "canonical_arguments"]


class ApprovalState(msgspec.Struct):
    """State of ``ApprovalsProjection``."""

    session_policy: ApprovalPolicy = "never"
    """The policy the session started with."""
    policies: dict[str, ApprovalPolicy] = {}
    """Each conversation's own policy, where it has one."""
    keys: list[CommandKey] = []
    """Remembered approvals, oldest first."""

    def policy(self, conversation_id: str) -> ApprovalPolicy:
        """The policy that holds in a conversation: the stricter of its own and the session's."""
        return stricter(self.session_policy, self.policies.get(conversation_id))

    def expired(self, now: datetime) -> list[CommandKey]:
        """The keys that lapsed by ``now`` (a recorded time)."""
        return [k for k in self.keys if k.expires_at is not None and k.expires_at <= now]

    def match(
        self, conversation_id: str, tool: str, arguments: str, now: datetime | None
    ) -> CommandKey | None:
        """The first key that approves this call in this conversation and has not lapsed by
        ``now`` (``None``: no time known yet, so none has)."""
        canonical: str | None = None
        for key in self.keys:
            if key.tool != tool or key.conversation_id not in (None, conversation_id):
                continue
            if now is not None and key.expires_at is not None and key.expires_at <= now:
                continue
            if key.args_pattern != "*":
                canonical = canonical_arguments(arguments) if canonical is None else canonical
                if not fnmatch.fnmatchcase(canonical, key.args_pattern):
                    continue
            return key
        return None


def canonical_arguments(arguments: str) -> str:
    """A call's arguments as keys match them: compact JSON with sorted keys (the text as the
    model sent it, if it is not JSON)."""
    try:
        return msgspec.json.encode(msgspec.json.decode(arguments), order="sorted").decode()
    except (msgspec.DecodeError, UnicodeDecodeError):
        return arguments


class ApprovalsProjection(Projection[ApprovalState]):
    """Folds policies and approval keys."""

    state_type = ApprovalState

    def initial(self) -> ApprovalState:
        return ApprovalState()

    def handlers(self) -> dict[type[Any], Callable[[ApprovalState, Event], None]]:
        return {
            SessionStarted: self._started,
            ConversationOpened: self._opened,
            ConversationContextChanged: self._changed,
            ToolApprovalDecided: self._decided,
            ApprovalKeyExpired: self._expired,
        }

    @staticmethod
    def _started(state: ApprovalState, event: Event) -> None:
        assert isinstance(event.body, SessionStarted)
        state.session_policy = event.body.approval_policy

    @staticmethod
    def _opened(state: ApprovalState, event: Event) -> None:
        body = event.body
        assert isinstance(body, ConversationOpened)
        if event.conversation_id is not None and body.approval_policy is not None:
            state.policies[event.conversation_id] = body.approval_policy

    @staticmethod
    def _changed(state: ApprovalState, event: Event) -> None:
        body = event.body
        assert isinstance(body, ConversationContextChanged)
        if event.conversation_id is None or "approval_policy" not in body.changed:
            return
        if body.approval_policy is None:
            state.policies.pop(event.conversation_id, None)
        else:
            state.policies[event.conversation_id] = body.approval_policy

    @staticmethod
    def _decided(state: ApprovalState, event: Event) -> None:
        body = event.body
        assert isinstance(body, ToolApprovalDecided)
        # A key that approved a call (decided_by="key") is already held.
        if body.approved and body.key is not None and body.key not in state.keys:
            state.keys.append(body.key)

    @staticmethod
    def _expired(state: ApprovalState, event: Event) -> None:
        assert isinstance(event.body, ApprovalKeyExpired)
        if event.body.key in state.keys:
            state.keys.remove(event.body.key)
