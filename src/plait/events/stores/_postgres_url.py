"""A PostgreSQL store's URL: the parameters plait reads from it, and how messages show it.

This is an internal part of ``PostgresStore``, not part of the public API.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["public_url", "split_url"]

_OURS = ("schema", "outage_sec", "connections")  # URL parameters plait reads (libpq rejects them)


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """Return ``url`` without plait's query parameters (``_OURS``), and their values."""
    parts = urlsplit(url)
    ours, kept = {}, []
    for item in parts.query.split("&") if parts.scheme and parts.query else ():
        key, _, value = item.partition("=")
        if unquote(key) in _OURS:
            ours[unquote(key)] = unquote(value)
        else:
            kept.append(item)
    return (urlunsplit(parts._replace(query="&".join(kept))) if ours else url), ours


def public_url(url: str) -> str:
    """Return ``url`` with any password masked, for messages."""
    parts = urlsplit(url)
    if not parts.scheme:  # a "key=value" conninfo string
        return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", url)
    user, at, host = parts.netloc.rpartition("@")
    query = re.sub(r"(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return urlunsplit(parts._replace(netloc=user.partition(":")[0] + at + host, query=query))
