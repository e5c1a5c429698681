"""Function tools: Python functions a service offers the model (docs/tools.md#function-tools).

``tool`` turns a function into a ``FunctionTool``: its input schema comes from its signature
and type hints (a msgspec struct of its parameters), its description from its docstring. The
functions of a session are served as one more server among its MCP servers, named
``FUNCTIONS`` (a name no configured server can take), by ``FunctionConnection``. So they are
offered, allowed, approved, batched, limited, recorded, audited, replayed and recovered as MCP
tools are: only the call itself differs. Their names never hold ``__``, so they cannot meet
an MCP tool's ``server__tool``, and may not be a built-in's.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, Generic, TypedDict, Unpack, overload

import msgspec
from typing_extensions import ParamSpec, TypeVar

from plait._errors import ConfigError
from plait._jsonvalue import JsonObject, JsonValue
from plait.actors._builtins import BUILTIN_NAMES
from plait.actors._text import mended, mended_value
from plait.actors.mcp._calls import CallResult, decode_arguments
from plait.actors.mcp._config import McpServerConfig, locate
from plait.actors.mcp._names import canonical_sha256
from plait.events import McpToolSnapshot

__all__ = [
    "FUNCTIONS",
    "FUNCTIONS_CONFIG",
    "FunctionConnection",
    "FunctionTool",
    "ToolOptions",
    "as_tools",
    "tool",
]

log = logging.getLogger("plait.tools")

FUNCTIONS: Final = "plait.functions"
"""The server name function tools are served under (a configured name cannot hold ``.``)."""

FUNCTIONS_CONFIG: Final = McpServerConfig(command="python")
"""The config ``FUNCTIONS`` is offered under (ready at once; each call times out by its tool's
``timeout_sec``)."""

DEFAULT_TIMEOUT_SEC: Final = 60.0
"""How long a call may take unless its tool says otherwise."""

_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

P = ParamSpec("P", default=...)
"""The parameters of a tool's function (any, where a tool is not told apart)."""
R = TypeVar("R", covariant=True, default=object)
"""What a tool's function returns."""


class FunctionTool(Generic[P, R]):
    """A Python function offered as a tool; calling it calls the function."""

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        read_only: bool = False,
        idempotent: bool = False,
        destructive: bool | None = None,
        timeout_sec: float = DEFAULT_TIMEOUT_SEC,
    ) -> None:
        """See ``tool``; raises ``ConfigError`` naming the function and what is wrong."""
        self.fn = fn
        self.name = name if name is not None else getattr(fn, "__name__", "")
        where = f"function tool {self.name!r} ({_qualname(fn)})"
        if not _NAME.match(self.name) or "__" in self.name:
            raise ConfigError(
                f"{where}: a tool name is 1-64 letters, digits, '_' and '-', without '__' "
                "(that is how MCP tools are named)"
            )
        if self.name in BUILTIN_NAMES:
            raise ConfigError(f"{where}: {self.name!r} is a built-in tool's name")
        if timeout_sec <= 0:
            raise ConfigError(f"{where}: timeout_sec must be positive, got {timeout_sec!r}")
        self.description = description if description is not None else inspect.getdoc(fn) or ""
        self.read_only = read_only
        self.idempotent = idempotent
        self.destructive = (not read_only) if destructive is None else destructive
        self.timeout_sec = timeout_sec
        self.is_async = inspect.iscoroutinefunction(fn)
        self._arguments, self._positional = _arguments_of(fn, self.name, where)
        schema = msgspec.json.schema(self._arguments)
        definitions = dict(schema.get("$defs", {}))
        top = dict(definitions.pop(self._arguments.__name__))
        top.pop("title", None)
        if definitions:  # the types its parameters use, referred to as #/$defs/...
            top["$defs"] = definitions
        self.input_schema: JsonObject = top
        """The JSON schema of its arguments, as the model is shown it."""
        self._snapshot = self._snapshot_of()

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r}, {_qualname(self.fn)})"

    def snapshot(self) -> McpToolSnapshot:
        """How it is offered, as the log records an MCP server's tools (made once)."""
        return self._snapshot

    def _snapshot_of(self) -> McpToolSnapshot:
        return McpToolSnapshot(
            name=self.name,
            tool=self.name,
            description=self.description,
            schema_sha256=canonical_sha256(self.input_schema),
            read_only=self.read_only,
            annotations={
                "destructiveHint": self.destructive,
                "idempotentHint": self.idempotent,
            },
            input_schema=msgspec.json.encode(self.input_schema).decode(),
            idempotent=self.idempotent,
        )

    async def run(
        self, arguments: str | Mapping[str, JsonValue], timeout: float | None
    ) -> CallResult:
        """Check and convert ``arguments``, call the function, and say how it went; never
        raises for the function's failure (its message is the result, its traceback is
        logged)."""
        decoded = decode_arguments(self.name, arguments)
        if isinstance(decoded, str):
            return CallResult(decoded, "error")
        try:
            converted = msgspec.convert(decoded, self._arguments)
        except msgspec.ValidationError as exc:
            return CallResult(f"invalid arguments for {self.name}: {locate(str(exc))}", "error")
        values = msgspec.structs.asdict(converted)
        args = [values.pop(name) for name in self._positional]
        limit = self.timeout_sec if timeout is None else timeout
        started = time.perf_counter()
        try:
            async with asyncio.timeout(limit):
                if self.is_async:
                    value = await typing.cast(Awaitable[object], self.fn(*args, **values))
                else:  # in a thread: the effect loop keeps streaming the other calls
                    value = await asyncio.to_thread(self.fn, *args, **values)
            output = _text(value)
        except TimeoutError:
            return CallResult(
                f"{self.name} timed out after {limit:g}s", "timeout", duration_ms=_ms(started)
            )
        except Exception as exc:  # the function's failure: the model is told, the log has more
            log.exception("function tool %s failed", self.name)
            message = str(exc) or type(exc).__name__
            return CallResult(f"{self.name} failed: {message}", "error", duration_ms=_ms(started))
        return CallResult(output, duration_ms=_ms(started))


class ToolOptions(TypedDict, total=False):
    """How ``tool`` offers a function (each as ``FunctionTool`` takes it)."""

    name: str | None
    description: str | None
    read_only: bool
    idempotent: bool
    destructive: bool | None
    timeout_sec: float


@overload
def tool(fn: Callable[P, R], /, **options: Unpack[ToolOptions]) -> FunctionTool[P, R]: ...


@overload
def tool(
    **options: Unpack[ToolOptions],
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...


def tool(
    fn: Callable[..., object] | None = None, /, **options: Unpack[ToolOptions]
) -> FunctionTool | Callable[[Callable[..., object]], FunctionTool]:
    """Offer a sync or async Python function to the model as a tool.

    Use it as ``@tool``, ``@tool(read_only=True)`` or ``tool(fn, name=...)``. ``name``
    defaults to the function's; the description (``description``) to its docstring; the
    input schema comes from its parameters' type hints (any type msgspec converts: ``int``,
    ``str``, ``Literal``, a ``msgspec.Struct``, a dataclass...), and arguments are checked and
    converted before the call. ``read_only`` tools may run in parallel and pass every approval
    policy but ``untrusted``; ``idempotent`` ones run again after a crash cut them off;
    ``destructive`` (default: not read-only) is the hint ``on-request`` asks for. A call longer
    than ``timeout_sec`` (60) ends ``timeout`` (a sync function's thread runs on, unseen).
    """

    def make(function: Callable[..., object]) -> FunctionTool:
        return FunctionTool(function, **options)

    return make if fn is None else make(fn)


def as_tools(tools: Iterable[FunctionTool | Callable[..., object]]) -> list[FunctionTool]:
    """``tools`` as ``FunctionTool``s (a bare function becomes one with the defaults), in
    name order; ``ConfigError`` if two share a name."""
    made = [t if isinstance(t, FunctionTool) else FunctionTool(t) for t in tools]
    by_name: dict[str, FunctionTool] = {}
    for made_tool in made:
        other = by_name.setdefault(made_tool.name, made_tool)
        if other is not made_tool and other.fn is not made_tool.fn:
            raise ConfigError(
                f"two function tools are named {made_tool.name!r}: {other!r} and {made_tool!r}"
            )
    return [by_name[name] for name in sorted(by_name)]


class FunctionConnection:
    """Serves function tools as ``McpServers`` serves a connection: ready at once, never dies."""

    def __init__(self, tools: Iterable[FunctionTool]) -> None:
        self._tools = {t.name: t for t in tools}
        self._closed = asyncio.Event()

    async def start(self) -> list[McpToolSnapshot]:
        """Return the tools' snapshots, in name order."""
        return [self._tools[name].snapshot() for name in sorted(self._tools)]

    async def call(
        self, tool: str, arguments: str | Mapping[str, JsonValue], timeout: float | None = None
    ) -> CallResult:
        """Call function tool ``tool``; never raises for a failure of the call."""
        found = self._tools.get(tool)
        if found is None:
            return CallResult(f"there is no function tool {tool!r}", "error")
        return await found.run(arguments, timeout)

    async def wait_closed(self) -> str | None:
        """Return once closed (``None``: it was closed, it did not die)."""
        await self._closed.wait()
        return None

    async def close(self) -> None:
        """Stop serving; a call running goes on until it returns."""
        self._closed.set()


def _arguments_of(
    fn: Callable[..., object], name: str, where: str
) -> tuple[type[msgspec.Struct], list[str]]:
    """A struct of ``fn``'s parameters (checks and converts arguments, gives the schema),
    and the names of those that must be passed by position."""
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (TypeError, ValueError, NameError) as exc:
        raise ConfigError(f"{where}: cannot read its signature: {exc}") from None
    fields: list[tuple[str, object] | tuple[str, object, object]] = []
    positional: list[str] = []
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigError(f"{where}: *{param.name} cannot be described to a model; name each")
        hint = hints.get(param.name, Any)  # msgspec's word for any JSON value (not `object`)
        if param.default is param.empty:
            fields.append((param.name, hint))
        else:
            fields.append((param.name, hint, param.default))
        if param.kind == param.POSITIONAL_ONLY:
            positional.append(param.name)
    try:
        arguments = msgspec.defstruct(
            f"{name}_arguments", fields, kw_only=True, forbid_unknown_fields=True
        )
        msgspec.json.schema(arguments)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: its parameters cannot be described as JSON: {exc}") from None
    return arguments, positional


def _text(value: object) -> str:
    """What the model is shown of a function's return value; a lone surrogate in it is
    recorded as U+FFFD (docs/event-log.md#text)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return mended(value)
    dump = getattr(value, "model_dump", None)  # a pydantic model
    if callable(dump):
        value = dump(mode="json")
    try:
        return msgspec.json.encode(value).decode()
    except UnicodeEncodeError:  # a string in it UTF-8 cannot encode
        return _text(mended_value(msgspec.to_builtins(value)))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"its result ({type(value).__name__}) is not JSON: {exc}") from None


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _qualname(fn: Callable[..., object]) -> str:
    module = getattr(fn, "__module__", None) or "?"
    return f"{module}.{getattr(fn, '__qualname__', repr(fn))}"
