"""Each wing's face holds its public names: the list below is the API, so a change to it is a
visible change here (docs/code.md#wings).

A face is a wing's ``__init__`` (or a sub-package's): ``__all__`` names what the other wings,
``plait`` itself and the command line use of it. This test holds that list, that each name
resolves, and that code outside a wing imports only those names of it. Tests may reach a
wing's internals; ``src/`` may not, but for the few imports listed below with their reasons.
"""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"

PUBLIC = {
    "plait": [
        "AbortCause",
        "ApprovalDecision",
        "ApprovalPolicy",
        "ApprovalRequest",
        "Approver",
        "ConcurrencyError",
        "ConfigError",
        "ContentUnavailableError",
        "ConversationInfo",
        "ConversationStats",
        "CorruptEventError",
        "DivergenceError",
        "ErasureError",
        "Event",
        "EventStore",
        "Feed",
        "FeedLagged",
        "FunctionCallOutput",
        "FunctionTool",
        "HistorySettings",
        "InputImage",
        "InputItem",
        "InputText",
        "InvalidInputError",
        "JsonObject",
        "JsonValue",
        "KEEP",
        "KeepType",
        "KeyFileError",
        "McpError",
        "McpLimits",
        "McpServerConfig",
        "MemoryStore",
        "ModelError",
        "ModelErrorKind",
        "ModelSettings",
        "NotFoundError",
        "PlaitError",
        "Recovery",
        "ReplayError",
        "Runtime",
        "RuntimeSettings",
        "SessionClosedError",
        "SessionHandle",
        "Signer",
        "SqliteStore",
        "Status",
        "StoragePolicy",
        "StoreError",
        "StoreUnavailableError",
        "TamperedError",
        "TaskOutcome",
        "TelemetryError",
        "TelemetrySettings",
        "ToolError",
        "ToolPrefs",
        "Transient",
        "UnknownConversationError",
        "UnknownSessionError",
        "open_store",
        "tool",
    ],
    "plait.events": [
        "APPROVAL_POLICIES",
        "AbortCause",
        "AgentMessageDelta",
        "AnyBody",
        "ApprovalKeyExpired",
        "ApprovalPolicy",
        "ApprovalPolicyNarrowed",
        "BlobRef",
        "Body",
        "CANCEL_MESSAGE",
        "CURRENT_VERSIONS",
        "CallOutcome",
        "Closure",
        "Command",
        "CommandBody",
        "CommandKey",
        "Content",
        "ContentErased",
        "ContextChange",
        "ConversationContextChanged",
        "ConversationDestroyed",
        "ConversationOpened",
        "DEFAULT_BLOB_THRESHOLD",
        "DEFAULT_LEASE_SEC",
        "DURATION_UNITS",
        "DestroyConversation",
        "Event",
        "EventStore",
        "Expiry",
        "FeedLagged",
        "ForkOrigin",
        "FunctionCallOutput",
        "GENESIS_HASH",
        "HeadSigned",
        "HistoryCompacted",
        "HistorySettings",
        "INTERRUPT_MESSAGE",
        "INTERRUPT_TEXT",
        "InputImage",
        "InputItem",
        "InputText",
        "InterruptCause",
        "InterruptTask",
        "Lease",
        "MODEL_PROTOCOL",
        "McpAllowlistNormalized",
        "McpServerFailed",
        "McpServerReady",
        "McpServersOffered",
        "McpToolSnapshot",
        "McpToolWithheld",
        "McpToolsRefreshed",
        "MemoryStore",
        "ModelOptions",
        "ModelRequestFailed",
        "ModelRequested",
        "ModelResponded",
        "NewEvent",
        "PlanStatus",
        "PlanStep",
        "PlanUpdated",
        "Policies",
        "PreparedAppend",
        "PublicKey",
        "ReasoningDelta",
        "ReasoningItem",
        "RecordedSettings",
        "Redacted",
        "RerunOrigin",
        "SIGN_EVERY",
        "SessionClosed",
        "SessionReopened",
        "SessionResumed",
        "SessionStarted",
        "Signal",
        "Signatures",
        "Signer",
        "SqliteStore",
        "StopRequested",
        "StoragePolicy",
        "StoredCommand",
        "StreamInfo",
        "SubmitTask",
        "Subscription",
        "TaskCompleted",
        "TaskDropped",
        "TaskEnqueued",
        "TaskPlan",
        "TaskStarted",
        "TokensCounted",
        "ToolApprovalDecided",
        "ToolApprovalRequested",
        "ToolCall",
        "ToolCallCompleted",
        "ToolCallRequested",
        "ToolCallStarted",
        "ToolPrefs",
        "Transient",
        "TurnAborted",
        "TurnStarted",
        "UPCASTERS",
        "Upcasters",
        "Usage",
        "UtcDateTime",
        "Verification",
        "Waiter",
        "Witness",
        "as_text",
        "check_policy",
        "decode_event",
        "decode_rows",
        "draft",
        "duration_sec",
        "encode_event",
        "ends_task",
        "erased_line",
        "export_bundle",
        "forget",
        "from_jsonl",
        "generate_key",
        "last_done",
        "missing_content",
        "prune",
        "recorded_settings",
        "stricter",
        "to_jsonl",
        "usage",
        "utc_now",
        "verify_bundle",
    ],
    "plait.events.bodies": [
        "AbortCause",
        "ApprovalKeyExpired",
        "ApprovalPolicyNarrowed",
        "Body",
        "CANCEL_MESSAGE",
        "CallOutcome",
        "ContentErased",
        "ConversationContextChanged",
        "ConversationDestroyed",
        "ConversationOpened",
        "ForkOrigin",
        "HeadSigned",
        "HistoryCompacted",
        "INTERRUPT_MESSAGE",
        "INTERRUPT_TEXT",
        "InterruptCause",
        "McpAllowlistNormalized",
        "McpServerFailed",
        "McpServerReady",
        "McpServersOffered",
        "McpToolWithheld",
        "McpToolsRefreshed",
        "ModelRequestFailed",
        "ModelRequested",
        "ModelResponded",
        "PlanStatus",
        "PlanStep",
        "PlanUpdated",
        "RerunOrigin",
        "SessionClosed",
        "SessionReopened",
        "SessionResumed",
        "SessionStarted",
        "StopRequested",
        "TaskCompleted",
        "TaskDropped",
        "TaskEnqueued",
        "TaskStarted",
        "TokensCounted",
        "ToolApprovalDecided",
        "ToolApprovalRequested",
        "ToolCallCompleted",
        "ToolCallRequested",
        "ToolCallStarted",
        "TurnAborted",
        "TurnStarted",
    ],
    "plait.events.projections": [
        "Activity",
        "ActivityProjection",
        "ApprovalState",
        "ApprovalsProjection",
        "AuditLog",
        "AuditProjection",
        "AuditRow",
        "CONTEXTS",
        "ChatMessage",
        "ContentShape",
        "Contexts",
        "ContextsProjection",
        "ConversationHistory",
        "ConversationInfo",
        "ConversationStats",
        "CurrentPlan",
        "Histories",
        "HistoryProjection",
        "Plans",
        "PlansProjection",
        "Projection",
        "QueueSnapshot",
        "SessionStats",
        "StatsProjection",
        "TASKS",
        "TaskQueue",
        "TaskQueueProjection",
        "TaskResult",
        "Timeline",
        "TimelineEntry",
        "TimelineProjection",
        "TokenTotals",
        "TokensProjection",
        "add_usage",
        "canonical_arguments",
        "chain_to_drop",
        "continuation_output",
        "conversation_index",
        "handoff_answer",
        "next_task",
        "prompt_text",
        "rfc3339",
        "safe_cut",
        "task_queue",
    ],
    "plait.events.stores": [
        "MemoryStore",
        "PostgresStore",
        "SqliteStore",
        "open_store",
    ],
    "plait.actors": [
        "Actor",
        "ApprovalDecision",
        "ApprovalGate",
        "ApprovalGateLike",
        "ApprovalRequest",
        "Approver",
        "AttemptFailed",
        "AwaitServers",
        "BUILTIN_NAMES",
        "CallTool",
        "ConvCreate",
        "ConvSend",
        "ConversationDeps",
        "DEFAULT_APPROVAL_TIMEOUT_SEC",
        "DEFAULT_FEED_LIMIT",
        "Destroy",
        "EffectLoop",
        "Enqueue",
        "Feed",
        "GetHistory",
        "GetQueue",
        "IdFor",
        "Interrupt",
        "Journal",
        "JournalLike",
        "Kinds",
        "ListConversations",
        "McpLimits",
        "McpPool",
        "McpPoolRef",
        "McpServersLike",
        "ModelClient",
        "ModelClientLike",
        "ModelReply",
        "ModelRequest",
        "ModelSettings",
        "NewId",
        "Promise",
        "ReadInstructions",
        "Recipient",
        "ServersFactory",
        "ServersSettled",
        "Session",
        "StartNext",
        "Stop",
        "ToolFinished",
        "ToolResult",
        "canonical_name",
        "input_items",
        "lone_surrogate",
        "offer_servers",
        "parse_arguments",
        "read_instruction_file",
        "undecodable",
    ],
    "plait.actors.mcp": [
        "Backoff",
        "CallResult",
        "Conflict",
        "Dispatcher",
        "FUNCTIONS",
        "FUNCTIONS_CONFIG",
        "FunctionTool",
        "McpConnection",
        "McpLimits",
        "McpServerConfig",
        "McpServers",
        "Outcome",
        "Report",
        "SEPARATOR",
        "SharedServers",
        "Status",
        "as_tools",
        "canonical_sha256",
        "check_keys",
        "expand",
        "merge",
        "normalize_allowlist",
        "openai_spec",
        "parse_servers",
        "qualify",
        "server_of",
        "snapshot",
        "tool",
        "tool_list_hash",
    ],
    "plait.telemetry": [
        "LiveExport",
        "Span",
        "SpanBuilder",
        "SpanEvent",
        "TelemetrySettings",
        "export",
        "otlp_json",
        "require_sdk",
        "spans_of",
    ],
    "plait.runtime": [
        "Follower",
        "KEEP",
        "KeepType",
        "Outside",
        "Recovery",
        "Runtime",
        "RuntimeSettings",
        "SessionHandle",
        "Status",
        "TaskOutcome",
        "Unrecorded",
        "await_outcome",
        "in_flight",
        "owner_state",
        "records_resumes",
    ],
    "plait.replay": [
        "AuditRow",
        "Divergence",
        "FailOn",
        "ReplayResult",
        "RerunReport",
        "TaskReport",
        "audit",
        "audit_jsonl",
        "fork",
        "replay",
        "rerun",
        "rerun_each",
        "verify",
    ],
    "plait.cli": [
        "main",
        "run",
    ],
}
"""Each face's ``__all__``, sorted: the wings, their sub-packages, and ``plait`` itself."""

FACES = [face for face in PUBLIC if face != "plait"]

INTERNAL_IMPORTS: dict[tuple[str, str, str], str] = {}
"""The names ``src/`` imports from inside another wing that its face does not offer, and why."""

DEEP_IMPORTS_LEFT = {
    "plait.actors._seams": "the mcp face names `dispatch`, which imports seams: a circle",
}
"""The modules that still import another wing's (or sub-package's) names from the module that
defines them, not through its face, and why; the list only shrinks."""


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in (SRC / "plait").glob("**/*.py")}


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def outer_faces(target: str, importer: str) -> list[str]:
    """The faces that hold ``target`` and not ``importer``: those it reaches ``target`` through."""
    return [face for face in FACES if within(target, face) and not within(importer, face)]


def cross_imports() -> list[tuple[str, int, str, str]]:
    """Each name a module of ``src/`` imports from a face it is outside of: (importer, line,
    module imported from, name); a submodule imported by name counts as a name."""
    found = []
    for importer, path in sorted(MODULES.items()):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                pairs = [(node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                pairs = [(alias.name, "") for alias in node.names]
            else:
                continue
            for module, name in pairs:
                if outer_faces(module, importer):
                    found.append((importer, node.lineno, module, name))
    return found


@pytest.mark.parametrize("face", list(PUBLIC))
def test_each_face_offers_the_names_listed_here(face: str) -> None:
    module = importlib.import_module(face)
    assert sorted(module.__all__) == PUBLIC[face]
    assert len(set(module.__all__)) == len(module.__all__), "a name listed twice"


@pytest.mark.parametrize("face", list(PUBLIC))
def test_each_public_name_resolves(face: str) -> None:
    module = importlib.import_module(face)
    for name in module.__all__:
        value = getattr(module, name)
        assert not isinstance(value, types.ModuleType), f"{face}.{name} is a module"
    # A lazy face finds a name on its first use; a submodule of the same name, once imported,
    # would be found first (the import system puts it on the package), so none may share one.
    path = getattr(module, "__path__", None)
    if path is not None and hasattr(module, "_PUBLIC"):
        submodules = {p.stem for p in Path(path[0]).iterdir() if p.suffix == ".py" or p.is_dir()}
        assert sorted(set(module.__all__) & submodules) == []


@pytest.mark.parametrize(
    "face", [f for f in PUBLIC if hasattr(importlib.import_module(f), "_PUBLIC")]
)
def test_a_lazy_face_lists_each_name_alike_three_times(face: str) -> None:
    """What type checkers read (the imports under ``TYPE_CHECKING``), the table the face
    imports from on first use, and ``__all__`` name the same names, each from one module."""
    module = importlib.import_module(face)
    tree = ast.parse(Path(module.__file__ or "").read_text())
    (checking,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name)
        if node.test.id == "TYPE_CHECKING"
    ]
    typed = {
        (node.module, alias.asname or alias.name)
        for node in checking.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    table = {(where, name) for where, names in module._PUBLIC.items() for name in names}
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    defined = {name for name in defined if not name.startswith("_")}  # a face's own functions
    assert {(where, name) for where, name in typed if name in module.__all__} == table
    assert {name for _, name in table} | defined == set(module.__all__)
    assert sorted(dir(module)) == dir(module) and set(module.__all__) <= set(dir(module))


def test_src_imports_of_another_wing_use_only_its_public_names() -> None:
    offered = {face: set(importlib.import_module(face).__all__) for face in FACES}
    problems = []
    for importer, line, module, name in cross_imports():
        faces = outer_faces(module, importer)
        if any(name in offered[face] for face in faces):
            continue
        if (importer, module, name) in INTERNAL_IMPORTS:
            continue
        what = f"{module}.{name}" if name else module
        problems.append(f"{importer}:{line} imports {what}, which no face of {faces} offers")
    assert problems == []


def test_src_imports_of_another_wing_go_through_its_face() -> None:
    deep = sorted(
        {
            importer
            for importer, _, module, name in cross_imports()
            if importer not in PUBLIC  # a face names the modules it takes its names from
            and module not in outer_faces(module, importer)
            and f"{module}.{name}" not in MODULES  # a submodule imported by name
        }
    )
    assert deep == sorted(DEEP_IMPORTS_LEFT)


def test_a_module_reaches_another_wing_through_the_faces_it_is_outside_of() -> None:
    assert outer_faces("plait.actors._session", "plait.runtime._host") == ["plait.actors"]
    assert outer_faces("plait.actors.mcp._names", "plait.runtime._host") == [
        "plait.actors",
        "plait.actors.mcp",
    ]
    assert outer_faces("plait.actors.mcp._names", "plait.actors._pool") == ["plait.actors.mcp"]
    assert outer_faces("plait.actors._pool", "plait.actors._session") == []
