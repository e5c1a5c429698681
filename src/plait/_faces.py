"""A wing's face that imports each public name where it is first used (PEP 562).

A wing's ``__init__`` names what it offers and where each name lives; this module makes the
``__getattr__`` that imports the name's module on its first use, so that importing one module
of a wing does not import every other module the face names (docs/code.md#wings).
"""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # as typing has it, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["lazy"]


def lazy(
    package: str, public: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Make the ``__getattr__`` and ``__dir__`` of ``package``, whose ``public`` maps each
    module to the names the package offers from it."""
    where = {name: module for module, names in public.items() for name in names}
    namespace = vars(sys.modules[package])

    def getattr_(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # the next use finds it at once
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *where})

    return getattr_, dir_
