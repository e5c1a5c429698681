"""The event reference, written from the event types themselves so it cannot drift.

``python -m plait.events._reference`` prints it as Markdown; ``--write docs/events.md`` puts
it between the ``<!-- event reference -->`` markers of that page (a test checks it is current).
Each body type gives its docstring, its version and its fields with their types, defaults and
the docstrings written under them in ``_types.py``.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import itertools
import sys
from functools import cache
from pathlib import Path

import msgspec

from plait.events._codec import BODY_TYPES
from plait.events._types import Event

__all__ = ["BEGIN", "END", "event_reference", "replace_reference"]

BEGIN = "<!-- event reference: `python -m plait.events._reference --write docs/events.md` -->"
END = "<!-- end of event reference -->"


def event_reference() -> str:
    """The envelope, then every persisted body type in the order ``_types.py`` defines them,
    as Markdown."""
    parts = [_struct(Event, "#### The envelope: `Event`")]
    parts += [
        _struct(cls, f"#### `{cls.__name__}` (v{cls.VERSION})") for cls in BODY_TYPES.values()
    ]
    return "\n".join(parts)


def replace_reference(text: str) -> str:
    """``text`` with what lies between the markers replaced by the current reference."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {BEGIN!r} and {END!r} are not in the file, in order")
    return text[: start + len(BEGIN)] + "\n\n" + event_reference() + "\n" + text[end:]


def _struct(cls: type[msgspec.Struct], heading: str) -> str:
    doc = " ".join((inspect.getdoc(cls) or "").split())
    lines = [heading, "", doc, ""]
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    notes = _field_docs(cls)
    if not info.fields:
        lines.append("No fields.")
    for field in info.fields:
        default = ""
        if field.default is not msgspec.NODEFAULT:
            default = f" = `{_value(field.default)}`"
        elif field.default_factory is not msgspec.NODEFAULT:
            default = f" = `{_value(field.default_factory())}`"
        kind = _annotation(cls, field.name)
        note = " ".join(notes.get(field.name, "").split())
        lines.append(f"- `{field.name}`: `{kind}`{default}. {note}".rstrip())
    lines.append("")
    return "\n".join(lines)


def _value(value: object) -> str:
    if isinstance(value, msgspec.Struct) and value == type(value)():
        return f"{type(value).__name__}()"
    return repr(value)


def _annotation(cls: type, name: str) -> str:
    for klass in cls.__mro__:
        annotation = getattr(klass, "__annotations__", {}).get(name)
        if annotation is not None:
            return str(annotation).replace("typing.", "")
    return "?"


@cache
def _field_docs(cls: type) -> dict[str, str]:
    """The string written under each field in the class body (its attribute docstring)."""
    tree = ast.parse(inspect.getsource(cls))
    klass = tree.body[0]
    assert isinstance(klass, ast.ClassDef)
    docs: dict[str, str] = {}
    body = klass.body
    for statement, following in itertools.pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = following.value.value
    return docs


def main(argv: list[str] | None = None) -> int:
    """Print the reference, or write it into a file between its markers."""
    parser = argparse.ArgumentParser(prog="python -m plait.events._reference")
    parser.add_argument("--write", metavar="FILE", help="replace the reference in FILE")
    args = parser.parse_args(argv)
    if args.write is None:
        sys.stdout.write(event_reference())
        return 0
    path = Path(args.write)
    path.write_text(replace_reference(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
