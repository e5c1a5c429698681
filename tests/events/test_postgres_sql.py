"""Every statement of the PostgreSQL store on a session's tables names the session, so that the
tables can be spread over machines by session (docs/scale.md); those that read across sessions
are listed here, each with what it is for."""

from __future__ import annotations

import re

from plait.events.stores import _postgres_prune as postgres_prune
from plait.events.stores import _postgres_sql as postgres_sql

SESSION_TABLES = ("appends", "streams", "leases", "inbox")
"""Tables whose rows belong to one session each (``stream``): distributed by it."""

ACROSS = {
    "all": "a read of every session in order: rebuilds, audits, exports",
    "settled": "a subscription across sessions (followers, plait sessions --watch)",
    "last_position": "where a subscription from now starts",
    "positions": "opening a store: the base positions count from",
    "streams": "listing every session (plait sessions)",
    "leases": "listing every lease (plait sessions), or one session's (stream = ...)",
    "commands": "a worker looking for sessions with commands and no owner to adopt",
    "scrub_inbox": "VACUUM FULL after an erasure: maintenance of the whole table",
}
"""Statements that may read across sessions, and why."""

NAMES_THE_SESSION = re.compile(
    r"\bstream\s*(=|IN\b)"  # a condition on it, or a list of them (= ANY)
    r"|INSERT INTO \{s\}\.\w+ (AS \w+ )?\(stream\b"  # a row given its session
    r"|p_stream\b"  # the append function's session
)


def statements() -> dict[str, str]:
    """Every statement text the store runs, by name (the append function's body split into
    its statements)."""
    found = {f"queries.{name}": text for name, text in postgres_sql.QUERIES.items()}
    found.update({f"prune.{name}": text for name, text in postgres_prune._QUERIES.items()})
    found["prune.delete"] = "DELETE FROM {s}.{t} WHERE stream = %s"  # remove_sessions, each table
    append = postgres_sql.functions(0)[1]
    body = append.partition("BEGIN")[2]
    for i, part in enumerate(re.split(r";\s*\n", body)):
        if re.search(r"\b(SELECT|INSERT|UPDATE|DELETE)\b", part):
            found[f"append.{i}"] = part
    return found


def test_every_statement_on_a_sessions_tables_names_the_session() -> None:
    unnamed = []
    for name, text in statements().items():
        touches = any(re.search(rf"\{{s\}}\.{t}\b", text) for t in SESSION_TABLES)
        across = name.removeprefix("queries.") in ACROSS
        if touches and not across and not NAMES_THE_SESSION.search(text):
            unnamed.append(f"{name}: {' '.join(text.split())[:90]}")
    assert unnamed == [], "name the session, or list the statement in ACROSS with why"


def test_the_list_of_reads_across_sessions_is_current() -> None:
    assert set(ACROSS) <= set(postgres_sql.QUERIES)


def test_the_check_bites() -> None:
    text = "DELETE FROM {s}.inbox WHERE id = ANY(%s)"  # the inbox's drop before it named them
    assert re.search(r"\{s\}\.inbox\b", text) and not NAMES_THE_SESSION.search(text)
