"""The SQL of ``PostgresStore``: its tables, its append function and its statements.

Texts name the store's schema ``{s}`` (filled in with ``psycopg.sql``). An append is one row
of ``appends`` (encoding 3: ``plait.events._packing``), written by one call of the server-side
function ``append_v3``, so it costs one round trip, its commit riding with it
(``docs/event-log.md#appending``). The functions are created with the tables and brought to
an older store when it opens; a change of a function's body or arguments takes a new name
(``append_v3``), so processes of either plait sharing a store each find the one they call.

Appends of different sessions take no lock in common. A row's position is the appending
transaction's id, shifted left by ``POSITION_BITS``, and its events' are that plus their index:
it grows with the transaction id, not with the commit, so a reader that goes on from a position
(a subscription) reads only below ``position_bound_v1()``, the first position a transaction
still running may hold (docs/event-log.md#streams-seq-and-position).
"""

from __future__ import annotations

__all__ = [
    "APPEND_SIGNATURE",
    "DDL",
    "LEASE_LOST",
    "POSITION_BITS",
    "QUERIES",
    "SCHEMA_VERSION",
    "STREAM_MOVED",
    "functions",
]

SCHEMA_VERSION = 5
"""Version of the table layout; a store written by a newer plait is refused, not misread (3:
events in encoding 2, docs/event-log.md#encoding, which an earlier plait cannot read; 4:
positions from transaction ids, which an earlier plait would take for rows lost; 5: a row per
append in ``appends``, the ``events`` of earlier layouts moved there by ``postgres_legacy``)."""

POSITION_BITS = 20
"""An append holds at most ``2**POSITION_BITS`` events; the bits of its transaction's id above."""

LEASE_LOST = "PLA01"
"""SQLSTATE of an append refused for its epoch; the detail is the lease ``[owner, epoch]``
as JSON (``null``: the session has no lease)."""
STREAM_MOVED = "PLA02"
"""SQLSTATE of an append refused because the stream's head is not the event it follows; the
detail is the head's seq."""

APPEND_SIGNATURE = (
    "append_v3(text, bigint, bytea, bigint, integer, bytea, bytea, text[], bigint[], bytea[])"
)
_NOW = "extract(epoch FROM clock_timestamp())::float8"
"""Lease times are the database server's clock: one clock for every process, wherever it runs."""
_GENESIS = f"'\\x{bytes(32).hex()}'::bytea"
_ROW = "position, stream, seq, count, prev_hash, hash, data"
"""A row as reads take it (``plait.events._per_append``)."""
_AFTER = (
    "position >= (SELECT coalesce(max(position), 0) FROM {s}.appends WHERE position <= %(after)s)"
)
"""Rows holding a position after ``after``: the one it is in, found by the index, and those
after it (the reader drops what is not after it). Both bounds come from the index: a read
from the middle of a large store scans nothing before it."""
_BEFORE = (
    "sum(count) OVER w - count - greatest(%(after)s - first_value(position) OVER w + 1, 0) "
    "AS before"
)
"""How many events after ``after`` the rows before a row hold (a row's positions follow each
other from its own: those of the first row up to ``after`` are not counted)."""
_NEEDED = "(%(limit)s::int8 IS NULL OR before < %(limit)s) AND position + count - 1 > %(after)s"
"""Only the rows that hold some of the first ``limit`` events after ``after``: a row may hold
a thousand, and a read of 2,000 would otherwise fetch 2,001 rows."""

# In order: the lease row FOR SHARE (a takeover, which updates it, waits for this append to
# commit); the head, moved only if it is still the event this append follows (the row lock
# makes a second writer of the stream wait, then find it moved: refused, never a fork of the
# chain); then rows and blobs. Nothing here is shared by two sessions' appends. Its positions
# come from its transaction's id, so a transaction holds one call (the store's calls are each
# a transaction of their own; a second in one would collide on the key, loudly).
_APPEND = f"""CREATE OR REPLACE FUNCTION {{s}}.append_v3(
    p_stream text, p_after bigint, p_prev bytea, p_epoch bigint,
    p_count integer, p_hash bytea, p_data bytea,
    p_blob text[], p_size bigint[], p_blob_data bytea[]
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    v_owner text;
    v_epoch bigint;
    v_seq bigint;
    v_first bigint := (pg_current_xact_id()::text::bigint + @BASE@) << {POSITION_BITS};
BEGIN
    IF p_epoch IS NOT NULL THEN
        SELECT owner, epoch INTO v_owner, v_epoch FROM {{s}}.leases
            WHERE stream = p_stream FOR SHARE;
        IF NOT FOUND OR v_owner IS NULL OR v_epoch <> p_epoch THEN
            RAISE EXCEPTION USING ERRCODE = '{LEASE_LOST}',
                MESSAGE = format('stream %s: epoch %s is not the lease''s', p_stream, p_epoch),
                DETAIL = CASE WHEN FOUND THEN json_build_array(v_owner, v_epoch)::text
                    ELSE 'null' END;
        END IF;
    END IF;
    IF p_after = 0 AND p_prev = {_GENESIS} THEN
        INSERT INTO {{s}}.streams (stream, last_seq, last_hash, created)
            VALUES (p_stream, p_count, p_hash, v_first)
            ON CONFLICT (stream) DO NOTHING;
    ELSE
        UPDATE {{s}}.streams SET last_seq = p_after + p_count, last_hash = p_hash
            WHERE stream = p_stream AND last_seq = p_after AND last_hash = p_prev;
    END IF;
    IF NOT FOUND THEN
        SELECT last_seq INTO v_seq FROM {{s}}.streams WHERE stream = p_stream;
        RAISE EXCEPTION USING ERRCODE = '{STREAM_MOVED}',
            MESSAGE = format('stream %s: expected seq %s, found %s', p_stream, p_after,
                coalesce(v_seq, 0)),
            DETAIL = coalesce(v_seq, 0)::text;
    END IF;
    INSERT INTO {{s}}.appends (stream, seq, count, position, prev_hash, hash, data)
        VALUES (p_stream, p_after + p_count, p_count, v_first, p_prev, p_hash, p_data);
    IF cardinality(p_blob) > 0 THEN
        INSERT INTO {{s}}.blobs AS b (sha256, size, data)
            SELECT * FROM unnest(p_blob, p_size, p_blob_data)
            ON CONFLICT (sha256) DO UPDATE SET data = excluded.data WHERE b.data IS NULL;
    END IF;
    RETURN v_first;
END
$fn$"""

# Every transaction older than the snapshot's xmin has ended, so no row below this position
# can appear any more; one at or above it may (its transaction still runs, or began later).
_BOUND = f"""CREATE OR REPLACE FUNCTION {{s}}.position_bound_v1() RETURNS bigint
LANGUAGE sql STABLE AS $fn$
SELECT (pg_snapshot_xmin(pg_current_snapshot())::text::bigint + @BASE@) << {POSITION_BITS}
$fn$"""


def functions(base: int) -> list[str]:
    """The store's functions, ``base`` added to the transaction ids positions come from (not 0
    once the store was restored into a server whose transaction ids are younger than its
    positions)."""
    return [
        f"INSERT INTO {{s}}.meta AS m VALUES ('position_base', '{base}') "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        _APPEND.replace("@BASE@", str(base)),
        _BOUND.replace("@BASE@", str(base)),
    ]


DDL = [
    "CREATE SCHEMA IF NOT EXISTS {s}",
    # A row per append: seq is its last event's, prev_hash the hash its first follows
    # (empty in a row an earlier layout's event was moved to: its bytes hold it). Its data is
    # compressed already: PostgreSQL is not to try again (STORAGE EXTERNAL).
    "CREATE TABLE IF NOT EXISTS {s}.appends (stream TEXT NOT NULL, seq BIGINT NOT NULL, "
    "count INT NOT NULL, position BIGINT NOT NULL, prev_hash BYTEA NOT NULL, "
    "hash BYTEA NOT NULL, data BYTEA NOT NULL, PRIMARY KEY (stream, seq))",
    "ALTER TABLE {s}.appends ALTER COLUMN data SET STORAGE EXTERNAL",
    "CREATE UNIQUE INDEX IF NOT EXISTS appends_position ON {s}.appends (position)",
    "CREATE TABLE IF NOT EXISTS {s}.streams (stream TEXT PRIMARY KEY, last_seq BIGINT NOT NULL, "
    "last_hash BYTEA NOT NULL, created BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s}.blobs (sha256 TEXT PRIMARY KEY, size BIGINT NOT NULL, "
    "data BYTEA)",  # data NULL: redacted, a tombstone
    "CREATE TABLE IF NOT EXISTS {s}.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s}.leases (stream TEXT PRIMARY KEY, owner TEXT, "
    "epoch BIGINT NOT NULL, expires DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s}.inbox (id BIGSERIAL PRIMARY KEY, stream TEXT NOT NULL, "
    "data BYTEA NOT NULL)",
    "CREATE INDEX IF NOT EXISTS inbox_stream ON {s}.inbox (stream, id)",
    f"INSERT INTO {{s}}.meta AS m VALUES ('schema_version', '{SCHEMA_VERSION}') "
    f"ON CONFLICT (key) DO UPDATE SET value = excluded.value WHERE m.value::int < {SCHEMA_VERSION}",
]
"""What opening a store creates when anything is missing (under the advisory lock), before
``functions``."""

QUERIES = {
    "lock": "SELECT pg_advisory_xact_lock(%s)",
    "append": "SELECT {s}.append_v3(%b::text, %b::int8, %b::bytea, %b::int8, "
    "%b::int4, %b::bytea, %b::bytea, %b::text[], %b::int8[], %b::bytea[])",
    # What an append needs before it can chain its events: the head, and the lease (an epoch
    # found stale here stays stale: epochs only grow, and a released lease is taken anew).
    "peek": "SELECT h.last_seq, h.last_hash, l.stream IS NOT NULL, l.owner, l.epoch "
    "FROM (SELECT) AS one LEFT JOIN {s}.streams AS h ON h.stream = %(stream)s "
    "LEFT JOIN {s}.leases AS l ON l.stream = %(stream)s",
    "head": "SELECT last_seq, last_hash FROM {s}.streams WHERE stream = %s",
    # Whether an append whose answer was lost landed: its row, by its hash.
    "placed": "SELECT position, hash FROM {s}.appends WHERE stream = %s AND seq = %s",
    "notify": "SELECT pg_notify(%s, %s)",
    # Taken when free, lapsed or already held (then renewed, its epoch kept); the row lock
    # waits for an append holding the lease FOR SHARE to commit.
    "acquire": "INSERT INTO {s}.leases AS l (stream, owner, epoch, expires) "
    f"SELECT stream, %(owner)s, 1, {_NOW} + %(sec)s FROM unnest(%(streams)s::text[]) "
    "AS taken (stream) ORDER BY stream ON CONFLICT (stream) DO UPDATE "
    "SET owner = excluded.owner, expires = excluded.expires, epoch = l.epoch + "
    "CASE WHEN l.owner IS NOT DISTINCT FROM excluded.owner THEN 0 ELSE 1 END "
    f"WHERE l.owner IS NULL OR l.owner = excluded.owner OR l.expires <= {_NOW}",
    "leases": f"SELECT stream, owner, epoch, expires - {_NOW} FROM {{s}}.leases "
    "WHERE %(stream)s::text IS NULL OR stream = %(stream)s ORDER BY stream",
    "leases_of": f"SELECT stream, owner, epoch, expires - {_NOW} FROM {{s}}.leases "
    "WHERE stream = ANY(%(streams)s::text[]) ORDER BY stream",
    # Only the leases asked for, at their epochs, and never one a release or an expiry ended
    # (its expires 0, ENDED): a release stays a release (docs/processes.md#handing-back).
    "renew": f"UPDATE {{s}}.leases AS l SET expires = {_NOW} + %s "
    "FROM unnest(%s::text[], %s::int8[]) AS held (stream, epoch) "
    "WHERE l.stream = held.stream AND l.epoch = held.epoch AND l.owner = %s "
    "AND l.expires <> 0 RETURNING l.stream, l.epoch",
    "release": "UPDATE {s}.leases SET owner = %s, expires = 0 "
    "WHERE stream = %s AND owner = %s AND epoch = %s",
    # With its transaction and server process: what a retry asks about if the answer to its
    # COMMIT was lost (docs/processes.md#each-command-takes-effect-once).
    "put_command": "INSERT INTO {s}.inbox (stream, data) VALUES (%s, %s) "
    "RETURNING id, pg_current_xact_id()::text::int8, pg_backend_pid()",
    "xact_status": "SELECT pg_xact_status(%s::int8::text::xid8)",
    # The process of a cut connection, if it still runs that transaction (its pid alone might
    # be another's by now): its transaction then commits or aborts, now.
    "end_xact": "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
    "WHERE pid = %s AND backend_xid = (%s::int8 %% 4294967296)::text::xid",
    "commands": "SELECT id, stream, data FROM {s}.inbox ORDER BY id",
    "commands_of": "SELECT id, stream, data FROM {s}.inbox WHERE stream = ANY(%s) ORDER BY id",
    "command_of": "SELECT id FROM {s}.inbox WHERE stream = %s AND data = %s",
    "drop_commands": "DELETE FROM {s}.inbox AS i USING unnest(%s::text[], %s::int8[]) AS d "
    "(stream, id) WHERE i.stream = d.stream AND i.id = d.id",
    # The rows holding seqs after to upto: the first holds seq ``after`` (its hash is what
    # the window's first event follows) unless the window starts the stream; the last is the
    # first row to reach upto, found by the index (so is the first: no scan past either).
    "rows": f"SELECT {_ROW} FROM {{s}}.appends WHERE stream = %(stream)s "
    "AND seq >= %(after)s AND seq <= coalesce((SELECT min(seq) FROM {s}.appends "
    "WHERE stream = %(stream)s AND seq >= %(upto)s), %(upto)s) ORDER BY seq LIMIT %(limit)s",
    "all": f"SELECT {_ROW} FROM (SELECT {_ROW}, {_BEFORE} FROM {{s}}.appends WHERE {_AFTER} "
    f"WINDOW w AS (ORDER BY position) ORDER BY position LIMIT %(rows)s) AS r WHERE {_NEEDED}",
    # Only below the bound (a row above it may yet be joined by one below it), each with
    # whether a committed row stands at or above it, not yet readable in order.
    "settled": "SELECT r.*, b.held FROM "
    "(SELECT bound, (SELECT coalesce(max(position), 0) FROM {s}.appends) >= bound AS held "
    "FROM (SELECT {s}.position_bound_v1() AS bound) AS x) AS b "
    f"LEFT JOIN LATERAL (SELECT {_ROW} FROM (SELECT {_ROW}, {_BEFORE} FROM {{s}}.appends "
    f"WHERE ({_AFTER}) AND position < b.bound WINDOW w AS (ORDER BY position) "
    f"ORDER BY position LIMIT %(rows)s) AS a WHERE {_NEEDED}) AS r ON true",
    "streams": "SELECT stream, last_seq FROM {s}.streams ORDER BY created, stream",
    # The last position a subscription can start after now (the last settled).
    "last_position": "SELECT position + count - 1 FROM {s}.appends "
    "WHERE position < {s}.position_bound_v1() ORDER BY position DESC LIMIT 1",
    # The base the functions count from, the next transaction's id, and the last position:
    # a store restored into a younger server needs a larger base (``functions``).
    "positions": "SELECT (SELECT value::int8 FROM {s}.meta WHERE key = 'position_base'), "
    "pg_snapshot_xmax(pg_current_snapshot())::text::int8, "
    "(SELECT coalesce(max(position), 0) FROM {s}.appends)",
    "blob": "SELECT data, size FROM {s}.blobs WHERE sha256 = %s",
    "blobs": "SELECT sha256, data FROM {s}.blobs WHERE sha256 = ANY(%s)",
    "redact": "UPDATE {s}.blobs SET data = NULL WHERE sha256 = %s",
    "redact_all": "UPDATE {s}.blobs SET data = NULL WHERE sha256 = ANY(%s) AND data IS NOT NULL",
    # A deleted or updated row's old version stays in its table's pages until VACUUM FULL
    # writes the table anew (a plain VACUUM only marks the space free), and even then while
    # a transaction that began before the change may still see it: the oldest such, if any.
    "scrub_blobs": "VACUUM FULL {s}.blobs",
    "scrub_inbox": "VACUUM FULL {s}.inbox",
    "xid": "SELECT pg_current_xact_id()::text::bigint",
    "older": "SELECT pid, now() - xact_start FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND backend_xmin IS NOT NULL "
    "AND age(backend_xmin) >= age((%s::bigint %% 4294967296)::text::xid) "
    "ORDER BY xact_start LIMIT 1",
    # The tables there (6 when complete), whether the append function is, and whether an
    # earlier layout's ``events`` is (``postgres_legacy``).
    "layout": "SELECT count(to_regclass(format('%%I.%%I', %(schema)s::text, t))), "
    "to_regprocedure(format('%%I.%%s', %(schema)s::text, %(function)s::text)) IS NOT NULL, "
    "to_regclass(format('%%I.events', %(schema)s::text)) IS NOT NULL "
    "FROM unnest(array['appends', 'streams', 'blobs', 'meta', 'leases', 'inbox']) t",
    "version": "SELECT value FROM {s}.meta WHERE key = 'schema_version'",
}
