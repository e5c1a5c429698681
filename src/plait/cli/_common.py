"""What every command starts from: the configuration, the store, a session or conversation
named by a prefix, the model settings and the runtime; and where results and progress go."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import msgspec

from plait._config import Config, load_config
from plait._errors import ConfigError, PlaitError, PrunedSessionError

if TYPE_CHECKING:
    from plait.actors import Approver, ModelSettings
    from plait.actors.mcp import McpServerConfig
    from plait.events import EventStore, Signer
    from plait.runtime import Runtime
    from plait.telemetry import TelemetrySettings

__all__ = [
    "LOCAL_HOSTS",
    "MODEL_FLAGS",
    "config_of",
    "describe_server",
    "err",
    "existing_store",
    "find_conversation",
    "find_session",
    "make_runtime",
    "model_settings",
    "out",
    "reader_left",
    "store_of",
]

log = logging.getLogger("plait.cli")
"""What ``-v`` tells: the files, the store, the model and the servers a command uses."""

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})
"""Model servers on this machine: they take any API key, so none has to be set."""

MODEL_FLAGS = (
    "max_output_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "reasoning_effort",
    "parallel_tool_calls",
)
"""``[model]`` keys that ``exec`` and ``chat`` take as flags too (``_parser.py`` adds them)."""


def config_of(args: argparse.Namespace, *, mcp_servers: bool = True) -> Config:
    """Return the configuration: the user's and the project's files, ``mcp.json``, the
    environment, the flags, then ``-c`` (given before the command, then after it). A command
    that starts no MCP server passes ``mcp_servers=False``: a mistake in the servers'
    configuration is then one warning, not an error."""
    flags = {name: getattr(args, name, None) for name in MODEL_FLAGS}
    config = load_config(
        args.config,
        store=args.store,
        model=getattr(args, "model", None),
        model_flags={name: value for name, value in flags.items() if value is not None},
        overrides=[*getattr(args, "overrides", []), *getattr(args, "command_overrides", [])],
        mcp_servers=mcp_servers,
    )
    if _first_time(f"configuration: {config.source}"):
        log.info("configuration: %s", config.source)
    if config.mcp_problem is not None and _first_time(config.mcp_problem):
        err(
            f"plait: warning: {config.mcp_problem} (no MCP server is started until it is "
            "fixed; this command starts none)"
        )
    return config


_TOLD: set[str] = set()
"""What this process said already: a command that reads its configuration twice says it once."""


def _first_time(text: str) -> bool:
    """Whether ``text`` is said for the first time (and from now on, said)."""
    told = text in _TOLD
    _TOLD.add(text)
    return not told


def existing_store(args: argparse.Namespace, *, read_only: bool = False) -> EventStore:
    """Open the configured store, which must exist: reading never creates one. A command
    that only reads opens it ``read_only``, so a store on a read-only mount can be read."""
    return store_of(config_of(args, mcp_servers=False), create=False, read_only=read_only)


def store_of(config: Config, *, create: bool, read_only: bool = False) -> EventStore:
    """Open the store ``config`` names; a SQLite file that is not there yet only if
    ``create``; a SQLite file for reading only if ``read_only``."""
    url = config.store.url
    if _first_time(f"store: {url}"):
        log.info("store: %s", _without_password(url))
    if url.startswith(("postgresql://", "postgres://")) or url == "memory:":
        from plait.events.stores import open_store

        return open_store(url)
    path = url.removeprefix("sqlite://")
    if "://" in path:
        raise ConfigError(f"{url}: unknown store URL (a SQLite path, or postgresql://...)")
    if not create and not Path(path).exists():
        raise PlaitError(f"{url}: no store here (run `plait exec` first, or pass --store)")
    from plait.events.stores import SqliteStore

    return SqliteStore(path, busy_timeout_sec=config.store.busy_timeout_sec, read_only=read_only)


def find_session(store: EventStore, session: str) -> str:
    """Return the one session id that starts with ``session``; ``PrunedSessionError`` if
    none does but a pruned one (docs/storage.md#retention)."""
    matches = [info.stream for info in store.streams() if info.stream.startswith(session)]
    if not matches:
        gone = [r for r in store.pruning.records() if r.stream.startswith(session)]
        if gone:  # the last record of it: a session id is pruned once, unless written again
            raise PrunedSessionError(gone[-1].stream, gone[-1].line())
    if len(matches) != 1:
        what = "no session" if not matches else f"{len(matches)} sessions"
        verb = "match" if matches else "matches"  # "no session matches", "2 sessions match"
        raise PlaitError(f"{what} in the store {verb} {session!r} (see `plait sessions`)")
    return matches[0]


def find_conversation(ids: Iterable[str], session: str, conversation: str) -> str:
    """Return the one conversation id of ``session`` (among ``ids``) that starts with
    ``conversation``."""
    matches = [c for c in ids if c.startswith(conversation)]
    if len(matches) != 1:
        what = "no conversation" if not matches else f"{len(matches)} conversations"
        raise PlaitError(
            f"session {session}: {what} match{'' if matches else 'es'} {conversation!r} "
            f"(see `plait conversations {session[:8]}`)"
        )
    return matches[0]


def model_settings(config: Config) -> ModelSettings:
    """The model server as configured, checked before anything runs: a missing key is an
    error unless the server is local."""
    from plait.actors import ModelSettings

    model, key = config.model, config.api_key
    if key is None:
        if urlsplit(model.base_url or "").hostname not in LOCAL_HOSTS:
            where = model.base_url or "OpenAI's (model.base_url and OPENAI_BASE_URL are unset)"
            raise ConfigError(
                f"no API key for the model server at {where}: set {model.api_key_env}"
            )
        key = "local"  # the SDK wants a key; a local server takes any
    log.info("model: %s at %s", model.model, model.base_url or "OpenAI's (api.openai.com)")
    fields = msgspec.structs.asdict(model)
    del fields["api_key_env"]  # where the key came from; the settings hold the key
    return ModelSettings(api_key=key, **fields)


def make_runtime(
    config: Config,
    model: ModelSettings,
    store: EventStore,
    approver: Approver | None = None,
    **more: Any,
) -> Runtime:
    """A runtime on ``store``, configured as ``config`` says; ``approver`` decides the tool
    calls its approval policy asks for (none: they are denied); ``more`` are more of its
    ``RuntimeSettings``' fields, which win over the configuration's."""
    from plait.actors import McpLimits
    from plait.events import HistorySettings, StoragePolicy
    from plait.runtime import Runtime, RuntimeSettings

    policy, history = config.policy, config.history
    for name, server in config.mcp_servers.items():
        log.info("MCP server %s: %s", name, describe_server(server))
    limits = McpLimits(
        policy.max_concurrent_tool_calls, policy.max_concurrent_tool_calls_per_conversation
    )
    settings = RuntimeSettings(
        model=model,
        max_interrupt_chain_depth=policy.max_interrupt_chain_depth,
        mcp_servers=config.mcp_servers,
        mcp_limits=limits,
        storage_policy=StoragePolicy.parse(policy.storage),
        approval_policy=policy.approval,
        approver=approver,
        approval_timeout_sec=policy.approval_timeout_sec,
        history=HistorySettings(
            model.context_window,
            history.compact_threshold,
            history.keep_recent_tokens,
            history.max_items,
            history.max_tokens,
        ),
        signer=signer_of(config),
        telemetry=telemetry_of(config),
    )
    return Runtime(store, msgspec.structs.replace(settings, **more))


def telemetry_of(config: Config, *, endpoint: str | None = None) -> TelemetrySettings:
    """Where ``[telemetry]`` (else the ``OTEL_*`` variables) sends spans and metrics;
    ``endpoint`` (a flag's) first."""
    from plait.telemetry import TelemetrySettings

    section = config.telemetry
    return TelemetrySettings(
        endpoint=endpoint or section.otlp_endpoint,
        headers=section.headers,
        service_name=section.service_name,
        content=section.capture_message_content,
        metrics=section.metrics,
    )


def signer_of(config: Config) -> Signer | None:
    """The signer ``[audit] signing_key`` names, witnessed where ``[audit] witness`` says
    (beside the key by default); ``None`` without a key."""
    from plait.events import Signer, Witness

    key, witness = config.audit.signing_key, config.audit.witness
    if key is None:
        return None
    if _first_time(f"signing: {key}"):
        log.info(
            "signing heads with the key in %s, witnessed in %s", key, witness or f"{key}.heads"
        )
    return Signer.from_key_file(key, witness=None if witness is None else Witness(witness))


def describe_server(server: McpServerConfig) -> str:
    """How an MCP server is reached, for ``-v``: its command line and directory, or its URL
    (never its environment or headers, where secrets live)."""
    if server.command is None:
        where = f"url {server.url}"
    else:
        where = "command " + shlex.join([server.command, *server.args])
        where += f" (in {server.cwd})" if server.cwd else ""
    return where if server.enabled else f"{where} (disabled)"


def _without_password(url: str) -> str:
    """``url`` with its password, if it has one, replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def out(text: str) -> None:
    """Write a result to stdout, ending its line."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def err(text: str) -> None:
    """Write progress or an error to stderr, at once."""
    print(text, file=sys.stderr, flush=True)


def reader_left() -> None:
    """Whoever read stdout left (``plait log | head``, or a Ctrl-C that ended ``less`` too):
    point stdout at ``/dev/null``, so that what follows and the exit write nowhere, quietly."""
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, sys.stdout.fileno())
    os.close(quiet)
