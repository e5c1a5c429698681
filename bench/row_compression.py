"""How to compress a row of one append on its own: zstd against deflate, with dictionaries.

Encoding 3 keeps one row per append, each compressed on its own with a dictionary that ships
in the package (``zstd-1.dict``); this measures the choices on the rows real sessions make.
Run from the repository root: ``python bench/row_compression.py``.

It records sessions of ``bench/storage.py`` (plain turns, and turns with a tool call), once to
train dictionaries on and once more, with other turns, to measure; it takes each append's
entries as encoding 3 packs them (``bench/zstd_dictionary.py``). Each row is then compressed
alone by:

* deflate (level 6) with no dictionary, with the training rows' last 32 KiB as a preset
  dictionary, and with the dictionary layout 4 ships (``dictionary-1.bin``);
* zstd (level 3) with no dictionary, with the training rows as raw content, with one trained
  by zstd on them (4 and 16 KiB; 4 KiB at level 19 too), and with the one plait ships;
* zstd with the ids and digests made binary (16 and 32 bytes for a UUID and a hex sha-256),
  with a 4 KiB dictionary trained on rows made so: what binary ids would save.

With ``--postgres URL``, it also writes the rows of 200 plain turns, zstd with the trained
4 KiB dictionary, into a table of one row per append on that server (``stream, seq, count,
position, prev_hash, hash, data``, keyed by ``stream, seq``, with an index on ``position``)
and a head row per session, and prints the bytes of those relations: what such a layout would
take on PostgreSQL.

And beside them, as the baseline, a chain as layout 4 keeps one: deflate after the two rows
before it of its session, with layout 4's dictionary (which needs a cache of each stream's last
rows to write and to read), of the same entries. It prints the bytes per turn and the median
time to compress and to read a row.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import psycopg
import zstandard
from report import Line, table
from zstd_dictionary import record  # bench/zstd_dictionary.py, beside this file

SHIPPED = Path(__file__).parents[1] / "src/plait/events/stores/dictionary-1.bin"
SHIPPED_ZSTD = Path(__file__).parents[1] / "src/plait/events/zstd-1.dict"
_HEX = re.compile(rb"\xd9(\x20|\x40)([0-9a-f]+)")
"""A 32- or 64-character lowercase hex string (an id or a digest)."""
_UUID = re.compile(rb"\xd9\x24([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")
"""A UUID in its canonical text."""


def ids_binary(data: bytes) -> bytes:
    """``data`` with its hex ids and digests, and its UUIDs, as msgpack binary."""

    def binary(found: re.Match[bytes]) -> bytes:
        digits = found.group(2)
        if len(digits) != found.group(1)[0]:
            return found.group(0)
        return b"\xc4" + bytes([len(digits) // 2]) + bytes.fromhex(digits.decode())

    def uuid(found: re.Match[bytes]) -> bytes:
        return b"\xc4\x10" + bytes.fromhex(found.group(1).replace(b"-", b"").decode())

    return _UUID.sub(uuid, _HEX.sub(binary, data))


Codec = tuple[Callable[[bytes, list[bytes]], bytes], Callable[[bytes, list[bytes]], bytes]]
"""Compress and decompress a row, given the rows before it in its session."""


def deflate(preset: bytes) -> Codec:
    def pack(data: bytes, _: list[bytes]) -> bytes:
        c = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=preset) if preset else None
        c = c or zlib.compressobj(6, zlib.DEFLATED, -15)
        return c.compress(data) + c.flush()

    def unpack(data: bytes, _: list[bytes]) -> bytes:
        d = zlib.decompressobj(-15, zdict=preset) if preset else zlib.decompressobj(-15)
        return d.decompress(data) + d.flush()

    return pack, unpack


def chained(preset: bytes) -> Codec:
    def window(before: list[bytes]) -> bytes:
        return (preset + b"".join(before[-2:]))[-32768:]

    def pack(data: bytes, before: list[bytes]) -> bytes:
        c = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=window(before))
        return c.compress(data) + c.flush()

    def unpack(data: bytes, before: list[bytes]) -> bytes:
        d = zlib.decompressobj(-15, zdict=window(before))
        return d.decompress(data) + d.flush()

    return pack, unpack


def zstd(trained: zstandard.ZstdCompressionDict | None, level: int = 3) -> Codec:
    packer = zstandard.ZstdCompressor(level=level, dict_data=trained, write_content_size=True)
    unpacker = zstandard.ZstdDecompressor(dict_data=trained)

    def pack(data: bytes, _: list[bytes]) -> bytes:
        return packer.compress(data)

    def unpack(data: bytes, _: list[bytes]) -> bytes:
        return unpacker.decompress(data)

    return pack, unpack


def measure(codec: Codec, rows: list[tuple[str, bytes]]) -> tuple[int, float, float]:
    """Bytes of ``rows`` compressed, and the median µs to compress and decompress one."""
    pack, unpack = codec
    before: dict[str, list[bytes]] = {}
    packed: list[tuple[bytes, list[bytes]]] = []
    packing: list[float] = []
    for stream, data in rows:
        mine = before.setdefault(stream, [])
        t0 = time.perf_counter()
        out = pack(data, mine)
        packing.append(time.perf_counter() - t0)
        packed.append((out, list(mine)))
        mine.append(data)
    unpacking: list[float] = []
    for (out, mine), (_, data) in zip(packed, rows, strict=True):
        t0 = time.perf_counter()
        back = unpack(out, mine)
        unpacking.append(time.perf_counter() - t0)
        assert back == data
    size = sum(len(out) for out, _ in packed)
    return size, statistics.median(packing) * 1e6, statistics.median(unpacking) * 1e6


ROWS_DDL = [
    "CREATE TABLE {s}.rows (stream TEXT NOT NULL, seq BIGINT NOT NULL, count INT NOT NULL, "
    "position BIGINT NOT NULL, prev_hash BYTEA NOT NULL, hash BYTEA NOT NULL, "
    "data BYTEA NOT NULL, PRIMARY KEY (stream, seq))",
    "CREATE INDEX ON {s}.rows (position)",
    "CREATE TABLE {s}.streams (stream TEXT PRIMARY KEY, last_seq BIGINT NOT NULL, "
    "last_hash BYTEA NOT NULL)",
]


def postgres_rows(url: str, rows: list[tuple[str, bytes]], codec: Codec) -> int:
    """Write ``rows`` compressed by ``codec`` as one row per append in a schema of their own
    at ``url``; return the bytes of its relations (the schema is dropped after)."""
    schema = f"plait_bench_rows_{os.getpid()}"
    pack, _ = codec
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            for statement in ROWS_DDL:
                conn.execute(statement.format(s=f'"{schema}"'))
            seqs: dict[str, int] = {}
            for position, (stream, data) in enumerate(rows, 1):
                seq = seqs.get(stream, 0) + 1
                seqs[stream] = seq
                digest, prev = os.urandom(32), os.urandom(32)  # hashes do not compress
                conn.execute(
                    f'INSERT INTO "{schema}".rows VALUES (%s, %s, 1, %s, %s, %s, %s)',
                    (stream, seq, position << 20, prev, digest, pack(data, [])),
                )
                conn.execute(
                    f'INSERT INTO "{schema}".streams VALUES (%s, %s, %s) ON CONFLICT (stream) '
                    "DO UPDATE SET last_seq = excluded.last_seq, last_hash = excluded.last_hash",
                    (stream, seq, digest),
                )
            conn.execute(f'VACUUM FULL "{schema}".rows, "{schema}".streams')
            found = conn.execute(
                "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind = 'r'",
                (schema,),
            ).fetchone()
            return int(found[0]) if found and found[0] else 0
        finally:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument(
        "--postgres", default=os.environ.get("PLAIT_TEST_POSTGRES"), help="also on PostgreSQL"
    )
    args = parser.parse_args()
    train = record({"plain": [range(40), range(40, 60)], "tool": [range(40), range(40, 60)]})
    test = record({"plain": [range(100, 150)], "tool": [range(200, 250)]})
    samples = [data for _, data in train]
    preset = b"".join(samples)[-32768:]
    dicts = {size: zstandard.train_dictionary(size, samples) for size in (4096, 16384)}
    content = zstandard.ZstdCompressionDict(preset, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    shipped = zstandard.ZstdCompressionDict(SHIPPED_ZSTD.read_bytes())
    binary = zstandard.train_dictionary(4096, [ids_binary(data) for data in samples])
    codecs: dict[str, Codec] = {
        "none: the rows as they are": (lambda data, _: data, lambda data, _: data),
        "deflate, no dictionary": deflate(b""),
        "deflate, the training rows (32 KiB)": deflate(preset),
        "deflate, dictionary-1.bin (layout 4's)": deflate(SHIPPED.read_bytes()),
        "zstd, no dictionary": zstd(None),
        "zstd, the training rows as content (32 KiB)": zstd(content),
        "zstd, trained dictionary (4 KiB)": zstd(dicts[4096]),
        "zstd, trained dictionary (4 KiB), level 19": zstd(dicts[4096], 19),
        "zstd, trained dictionary (16 KiB)": zstd(dicts[16384]),
        "zstd, zstd-1.dict (encoding 3's)": zstd(shipped),
    }
    turns = 100
    today, today_pack, today_unpack = measure(chained(SHIPPED.read_bytes()), test)
    sizes: list[Line] = []
    times: list[Line] = []
    binary_test = [(stream, ids_binary(data)) for stream, data in test]
    runs = [(name, codec, test) for name, codec in codecs.items()]
    runs.append(("zstd, ids binary, a dictionary trained so (4 KiB)", zstd(binary), binary_test))
    for name, codec, rows in runs:
        size, pack_us, unpack_us = measure(codec, rows)
        sizes.append(
            (name, f"{size / turns:,.0f}", f"{today / turns:,.0f}", f"{size / today:.2f}x", "")
        )
        for verb, ours, theirs in (
            ("compress", pack_us, today_pack),
            ("read", unpack_us, today_unpack),
        ):
            times.append(
                (f"{name}: {verb}", f"{ours:.1f}", f"{theirs:.1f}", f"{ours / theirs:.2f}x", "")
            )
    table(
        f"Bytes per turn: {len(test)} appends of {turns} turns (50 plain, 50 with a tool call)",
        sizes,
        "raw: a chain, as layout 4's: each row deflated after the 2 before it in its session",
    )
    table("µs per row, the median", times, "raw: a chain, as above")
    if args.postgres:
        plain = record({"plain": [range(300, 500)]})
        size = postgres_rows(args.postgres, plain, zstd(dicts[4096]))
        print(
            f"\n200 plain turns ({len(plain)} appends) as rows alone on PostgreSQL (zstd, "
            f"trained 4 KiB): {size:,} B after VACUUM FULL, {size / 200:,.0f} B a turn"
        )


if __name__ == "__main__":
    main()
