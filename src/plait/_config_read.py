"""Reading configuration files: parse one, merge layers table by table, turn ``-c`` into a
table, and say what is wrong with a value in one line naming its key (``config.py`` puts
the layers together)."""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from plait._errors import ConfigError

__all__ = ["choices", "convert", "get", "leaf_paths", "load", "merge", "override", "where"]

_T = TypeVar("_T")


def override(text: str) -> dict[str, Any]:
    """Turn ``-c``'s ``a.b=VALUE`` into ``{"a": {"b": VALUE}}``: the value as TOML, else the
    text as it is."""
    key, sep, raw = text.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(f"-c {text}: expected KEY.PATH=VALUE, as in -c model.model=gpt-4o")
    try:
        value: Any = tomllib.loads(f"_ = {raw}")["_"]
    except tomllib.TOMLDecodeError:
        value = raw
    for part in reversed(parts):
        value = {part: value}
    result: dict[str, Any] = value
    return result


def merge(into: dict[str, Any], data: Mapping[str, Any]) -> None:
    """Merge ``data`` into ``into``, table by table: the later value of a key wins."""
    for key, value in data.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = dict(value) if isinstance(value, Mapping) else value


def leaf_paths(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Return the dotted paths of the leaves of ``data`` (``model.model``...)."""
    paths = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        paths += leaf_paths(value, f"{path}.") if isinstance(value, Mapping) else [path]
    return paths


def load(path: Path, parse: Callable[[str], Any], kind: str) -> Any:
    """Read and parse a configuration file; what is wrong with it is one line."""
    try:
        return parse(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration: {exc.strerror or exc}") from exc
    except ValueError as exc:  # TOMLDecodeError and JSONDecodeError both are
        raise ConfigError(f"{path}: not valid {kind}: {exc}") from exc


def convert(data: Any, kind: type[_T], path: str) -> _T:
    """``data`` as ``kind``; what is wrong with it is one line naming ``path`` and the key."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: {where(str(exc), kind)}") from exc


# Keys people try that plait refuses on purpose: say what to do instead.
_HINTS = {
    "model.api_key": " (keys stay out of files: set the variable that model.api_key_env names)",
}


def where(message: str, kind: type) -> str:
    """Turn msgspec's ``Expected `int`, got `str` - at `$.policy.x``` into ``policy.x: ...``."""
    text, _, at = message.partition(" - at `$")
    key = at.rstrip("`").lstrip(".")
    if text.startswith("Object contains unknown field"):
        field = text.split("`")[1]
        key = f"{key}.{field}" if key else field
        hint = _HINTS.get(key, "")
        return f"{key}: unknown key{hint}"
    if text.startswith("Invalid enum value") and (named := choices(key, kind)):
        value = text.removeprefix("Invalid enum value").strip()
        return f"{key}: invalid value {value}: choose one of {', '.join(named)}"
    text = text[0].lower() + text[1:] if text else text
    return f"{key}: {text}" if key else text


def choices(key: str, kind: type) -> list[str]:
    """The values a key that takes one of a few may have (``policy.approval``...)."""
    from msgspec import inspect

    info: Any = inspect.type_info(kind)
    for part in key.split("."):
        if not isinstance(info, inspect.StructType):
            return []
        info = next((f.type for f in info.fields if f.name == part), None)
    kinds = info.types if isinstance(info, inspect.UnionType) else (info,)
    found = [kind for kind in kinds if isinstance(kind, inspect.LiteralType)]
    return [str(value) for value in found[0].values] if found else []


def get(data: Mapping[str, Any], *keys: str) -> Any:
    """The value at ``keys`` in nested tables, or ``None``."""
    for key in keys:
        data = data.get(key) if isinstance(data, Mapping) else None  # type: ignore[assignment]
    return data
