"""The base of every persisted event body: a frozen, tagged, versioned ``msgspec.Struct``.

Schema rule: a new field gets a default and goes last; any other change bumps the body's
``VERSION`` and registers an upcaster from the old version (``events/_upcasters.py``).
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

__all__ = [
    "Body",
]


class Body(msgspec.Struct, frozen=True, tag=True, tag_field="type", omit_defaults=True, gc=False):
    """Base of persisted event bodies; the tag is the class name."""

    VERSION: ClassVar[int] = 1
    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ()
