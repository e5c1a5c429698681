"""Approvals: which MCP calls wait for a decision, and the gate that gets one.

A conversation asks ``asks(policy, tool)`` whether a call needs approval; if no remembered
approval (``CommandKey``) covers it, it records ``ToolApprovalRequested`` and hands an
``ApprovalRequest`` to the runtime's ``ApprovalGate``. The gate runs on the effect loop, off
every actor thread: it calls the embedder's approver (a sync callable in a worker thread, an
async one on the loop) and turns its ``ApprovalDecision`` into the ``ToolApprovalDecided`` the
conversation records before the call runs. It fails closed: no approver, no decision within
the timeout, an approver that raises or answers nonsense, all deny.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Literal

import msgspec

from plait._errors import ConfigError
from plait.actors._text import lone_surrogate
from plait.events import (
    ApprovalKeyExpired,
    ApprovalPolicy,
    ApprovalPolicyNarrowed,
    Body,
    CommandKey,
    ContextChange,
    Event,
    McpToolSnapshot,
    ToolApprovalDecided,
    UtcDateTime,
    stricter,
)
from plait.events.projections import ApprovalsProjection, ApprovalState

__all__ = [
    "DEFAULT_APPROVAL_TIMEOUT_SEC",
    "ApprovalDecision",
    "ApprovalGate",
    "ApprovalRequest",
    "Approver",
    "ConversationApprovals",
    "asks",
    "denial",
    "refusal",
]

DEFAULT_APPROVAL_TIMEOUT_SEC = 300.0
"""How long a call waits for its decision before it is denied."""


class ApprovalRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What an approver is asked to decide: one tool call, before it runs."""

    session_id: str
    """The session."""
    conversation_id: str
    """The calling conversation."""
    task_id: str
    """Its running task."""
    call_id: str
    """The model's call id."""
    tool: str
    """The fully-qualified tool name (``server__tool``)."""
    arguments: str
    """The arguments as the model sent them (JSON text)."""
    reason: str
    """Why the policy asks (``t__note is not read-only``...)."""
    policy: ApprovalPolicy
    """The policy that holds in the conversation."""
    requested_at: UtcDateTime
    """When ``ToolApprovalRequested`` was recorded; a key's ``ttl_sec`` counts from here."""


class ApprovalDecision(msgspec.Struct, frozen=True, kw_only=True):
    """An approver's answer.

    ``ApprovalDecision(approved=True)`` runs this call once. With ``scope="conversation"`` or
    ``"session"`` the approval is remembered as a ``CommandKey``: later calls of the tool whose
    arguments match ``args_pattern`` run without asking, in the calling conversation or in every
    conversation of the session, for ``ttl_sec`` seconds (``None``: for good).
    """

    approved: bool
    """Whether the call may run."""
    scope: Literal["once", "conversation", "session"] = "once"
    """How far an approval reaches (a denial is always for this call only)."""
    args_pattern: str = "*"
    """For a remembered approval: an ``fnmatch`` pattern over the arguments as canonical JSON
    (keys sorted, no spaces); ``*``: any arguments."""
    ttl_sec: float | None = None
    """For a remembered approval: seconds it holds, by recorded time; ``None``: for good."""
    reason: str = ""
    """Why, for people and for the model (a denial's reason is in the call's answer)."""
    decided_by: str = "approver"
    """Who decided, as the log should name them (``user``, ``alice``...)."""


Approver = Callable[[ApprovalRequest], ApprovalDecision | Awaitable[ApprovalDecision]]
"""Decides tool calls: a plain function (run in a worker thread) or an async one (run on the
runtime's effect loop), called once per call that needs a decision."""


def asks(policy: ApprovalPolicy, tool: McpToolSnapshot) -> str | None:
    """Why ``policy`` makes a call of ``tool`` wait for a decision; ``None`` if it does not.

    ``on-request`` asks for the tools that may destroy something: not read-only, and not
    declaring ``destructiveHint: false`` (MCP's default for a tool that is not read-only is
    destructive, so a tool without annotations asks).
    """
    if policy == "never":
        return None
    if policy == "untrusted":
        return "policy 'untrusted' asks before every MCP call"
    if tool.read_only:
        return None
    if policy == "on-write":
        return f"policy 'on-write': {tool.name} is not read-only"
    if tool.annotations.get("destructiveHint") is False:
        return None
    return f"policy 'on-request': {tool.name} may be destructive"


def denial(request: ApprovalRequest, decided_by: str, reason: str) -> ToolApprovalDecided:
    """A denial of ``request``."""
    return ToolApprovalDecided(request.call_id, False, decided_by, reason=reason)


def refusal(decision: ToolApprovalDecided) -> str:
    """What the model is told of a denied call."""
    why = f": {decision.reason}" if decision.reason else ""
    return f"not run: denied by {decision.decided_by}{why}"


class ConversationApprovals:
    """One conversation's side of approvals: the policy that holds in it and the session's
    remembered approvals (a fold of every event of the session), and the recorded time it
    last wrote at, which is what a key's expiry is compared with."""

    def __init__(self, conversation_id: str, state: ApprovalState | None = None) -> None:
        """``state``: the session's, when the conversation opens mid-session (its own copy)."""
        self.id = conversation_id
        self._projection = ApprovalsProjection()
        self.state: ApprovalState = self._projection.initial() if state is None else state
        self.now: datetime | None = None
        """When the conversation last recorded an event (recorded time, never the clock)."""

    def apply(self, event: Event) -> None:
        """Fold one event of the session."""
        self._projection.apply(self.state, event)

    @property
    def policy(self) -> ApprovalPolicy:
        """The policy that holds in this conversation."""
        return self.state.policy(self.id)

    def reasons(
        self, names: list[str | None], offered: dict[str, McpToolSnapshot]
    ) -> list[str | None]:
        """Why each call of a reply waits for a decision (``None``: it does not)."""
        policy = self.policy
        return [asks(policy, offered[n]) if n in offered else None for n in names]

    def narrowed(self, change: ContextChange | None) -> ApprovalPolicyNarrowed | None:
        """The event to record if ``change`` asks for a policy wider than the session's."""
        if change is None or "approval_policy" not in change.changed:
            return None
        requested, session = change.approval_policy, self.state.session_policy
        if requested is None or stricter(session, requested) == requested:
            return None
        return ApprovalPolicyNarrowed(requested, session)

    def check(self, call_id: str, tool: str, arguments: str) -> tuple[list[Body], bool]:
        """What to record before call ``call_id`` may run without asking: the lapsed keys
        dropped, then its approval by a live key; the bool says whether a key approved it."""
        now = self.now
        bodies: list[Body] = []
        if now is not None:
            bodies += [ApprovalKeyExpired(key) for key in self.state.expired(now)]
        key = self.state.match(self.id, tool, arguments, now)
        if key is None:
            return bodies, False
        scope: Literal["conversation", "session"] = (
            "conversation" if key.conversation_id is not None else "session"
        )
        bodies.append(ToolApprovalDecided(call_id, True, "key", scope, key.expires_at, key=key))
        return bodies, True


class ApprovalGate:
    """Gets a decision for each request from the embedder's approver, failing closed."""

    def __init__(
        self, approver: Approver | None, timeout_sec: float = DEFAULT_APPROVAL_TIMEOUT_SEC
    ) -> None:
        if not timeout_sec > 0:
            raise ConfigError(f"approval_timeout_sec must be positive, not {timeout_sec}")
        self.approver = approver
        self.timeout_sec = timeout_sec

    async def decide(self, request: ApprovalRequest) -> ToolApprovalDecided:
        """Ask the approver (on the effect loop); return the decision to record.

        Cancelled when the call's turn is aborted: nothing is recorded then. A plain function
        still running at the timeout cannot be stopped: it finishes in its worker thread, and
        its answer is dropped.
        """
        if self.approver is None:
            why = f"no approver to ask (policy {request.policy!r})"
            return denial(request, "policy", why)
        try:
            async with asyncio.timeout(self.timeout_sec) as limit:
                answer = await self._ask(self.approver, request)
        except Exception as exc:
            if isinstance(exc, TimeoutError) and limit.expired():
                return denial(request, "timeout", f"no decision within {self.timeout_sec:g} s")
            return denial(request, "error", f"the approver failed: {exc!r}")
        return decided(request, answer)

    @staticmethod
    async def _ask(approver: Approver, request: ApprovalRequest) -> object:
        call = getattr(approver, "__call__", None)  # noqa: B004 - an instance's async __call__
        if inspect.iscoroutinefunction(approver) or inspect.iscoroutinefunction(call):
            answer: object = approver(request)
        else:  # a blocking function must not stall the loop
            answer = await asyncio.to_thread(approver, request)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer


def decided(request: ApprovalRequest, answer: object) -> ToolApprovalDecided:
    """The event that records ``answer`` to ``request``; anything but a well-formed
    ``ApprovalDecision`` is a denial that says what was wrong."""
    if not isinstance(answer, ApprovalDecision):
        got = type(answer).__name__
        return denial(request, "error", f"the approver returned {got}, not an ApprovalDecision")
    problem = _problem(answer)
    if problem is not None:
        return denial(request, "error", f"the approver's decision is invalid: {problem}")
    who = answer.decided_by
    if not answer.approved:
        return ToolApprovalDecided(request.call_id, False, who, reason=answer.reason)
    if answer.scope == "once":
        return ToolApprovalDecided(request.call_id, True, who, reason=answer.reason)
    expires: datetime | None = None
    if answer.ttl_sec is not None:
        expires = request.requested_at + timedelta(seconds=answer.ttl_sec)
    key = CommandKey(
        request.tool,
        answer.args_pattern,
        request.conversation_id if answer.scope == "conversation" else None,
        expires,
    )
    return ToolApprovalDecided(
        request.call_id, True, who, answer.scope, expires, key=key, reason=answer.reason
    )


def _problem(answer: ApprovalDecision) -> str | None:
    if not isinstance(answer.approved, bool):
        return f"approved must be a bool, not {answer.approved!r}"
    if answer.scope not in ("once", "conversation", "session"):
        return f"scope {answer.scope!r}: expected once, conversation or session"
    if not isinstance(answer.args_pattern, str) or not answer.args_pattern:
        return "args_pattern must be a non-empty string ('*': any arguments)"
    if answer.ttl_sec is not None and not (
        isinstance(answer.ttl_sec, int | float) and answer.ttl_sec > 0
    ):
        return f"ttl_sec must be positive seconds or None, not {answer.ttl_sec!r}"
    if not isinstance(answer.decided_by, str) or not answer.decided_by:
        return "decided_by must be a non-empty string"
    for name in ("reason", "decided_by", "args_pattern"):  # what the log would hold
        value = getattr(answer, name)
        offset = lone_surrogate(value) if isinstance(value, str) else None  # reason may be None
        if offset is not None:  # docs/event-log.md#text
            return f"{name} is not valid text: character {offset} cannot be encoded as UTF-8"
    return None
