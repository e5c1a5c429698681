"""What a line typed into ``plait chat`` becomes, before it reaches the session.

A line is a task, a ``/`` command, or a custom command (a Markdown file in ``.plait/commands/``
or the user's ``commands/`` directory, whose text becomes the task, with the arguments put in).
A task's ``@path`` references attach those files' text to it. What is sent is what the log
records as the task's input, so a replay needs neither the command files nor the files.
The instructions a new session starts with are ``_instructions.py``'s.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from plait._project import find_project
from plait.actors import undecodable
from plait.cli._instructions import user_dir
from plait.events import InputItem, InputText

__all__ = [
    "BUILTIN",
    "MAX_FILE_BYTES",
    "Command",
    "Problem",
    "Task",
    "custom_commands",
    "read_line",
    "user_dir",
]

BUILTIN: dict[str, str] = {
    "help": "this list",
    "new": "start a new session",
    "resume": "go on with a stored session: /resume ID (a prefix is enough)",
    "sessions": "the stored sessions (as plait sessions)",
    "conversations": "this session's conversations (as plait conversations)",
    "history": "a conversation's messages (as plait history; --conversation ID, --limit N)",
    "compact": "summarise a conversation's older history (as plait compact)",
    "stats": "this session's counts and timings (as plait stats)",
    "audit": "this session's tool calls (as plait audit; --tool, --outcome)",
    "model": "show the model, or use another for the next tasks: /model NAME",
    "approval": "show the approval policy, or narrow it: /approval on-write (or never...)",
    "quit": "leave (as Ctrl-D)",
}
"""The built-in ``/`` commands and what each does."""

MAX_FILE_BYTES = 256 * 1024
"""The most of a file an ``@path`` reference attaches."""

_REFERENCE = re.compile(r"(?<!\S)@(\S+)")


@dataclass(frozen=True)
class Task:
    """A task to run: its input, as the log records it."""

    input: list[InputItem]
    attached: list[str]
    """The files attached, as the person named them."""


@dataclass(frozen=True)
class Command:
    """A built-in ``/`` command and its arguments."""

    name: str
    args: list[str]


@dataclass(frozen=True)
class Problem:
    """A line that cannot be sent as it is, and why (nothing is sent)."""

    message: str


def custom_commands(workdir: Path) -> dict[str, Path]:
    """The custom commands, by name: ``NAME.md`` in the nearest ``.plait/commands/`` up from
    ``workdir`` (``plait._project``), over those of the user's ``commands/`` directory."""
    found: dict[str, Path] = {}
    for folder in (user_dir() / "commands", find_project(workdir).commands):
        if folder is not None and folder.is_dir():
            found.update({path.stem: path for path in sorted(folder.glob("*.md"))})
    return {name: found[name] for name in sorted(found) if name not in BUILTIN}


def read_line(line: str, workdir: Path, customs: dict[str, Path]) -> Task | Command | Problem:
    """What ``line`` (not blank) asks for."""
    text = line.strip()
    if text.startswith("/") and len(text) > 1 and not text.startswith("//"):
        name, _, rest = text[1:].partition(" ")
        try:
            args = shlex.split(rest)
        except ValueError as exc:
            return Problem(f"/{name}: {exc}")
        if name in BUILTIN:
            return Command(name, args)
        if name in customs:
            return _attach(expand(customs[name], rest.strip(), args), workdir)
        known = " ".join(f"/{n}" for n in [*BUILTIN, *customs])
        return Problem(f"unknown command /{name}; the commands are: {known}")
    return _attach(text[1:] if text.startswith("//") else text, workdir)


def expand(path: Path, rest: str, args: list[str]) -> str:
    """A custom command's text with its arguments: ``$ARGUMENTS`` (all of them) and ``$1``
    to ``$9``; without either, the arguments follow the text. A leading front matter block
    (``---`` lines) is left out."""
    text = path.read_text(encoding="utf-8")
    if text.startswith("---\n") and (end := text.find("\n---\n", 4)) >= 0:
        text = text[end + 5 :]
    text = text.strip()
    if "$ARGUMENTS" in text or re.search(r"\$[1-9]", text):
        text = text.replace("$ARGUMENTS", rest)
        return re.sub(r"\$([1-9])", lambda m: _nth(args, int(m[1])), text)
    return f"{text}\n\n{rest}" if rest else text


def description(path: Path) -> str:
    """A custom command's ``description:`` from its front matter, else its first line."""
    text = path.read_text(encoding="utf-8").strip()
    if text.startswith("---\n"):
        head = text[4 : max(text.find("\n---\n", 4), 4)]
        for entry in head.splitlines():
            key, _, value = entry.partition(":")
            if key.strip() == "description":
                return value.strip()
        text = text[text.find("\n---\n", 4) + 5 :].strip()
    return text.splitlines()[0][:70] if text else ""


def _nth(args: list[str], n: int) -> str:
    return args[n - 1] if n <= len(args) else ""


def _attach(text: str, workdir: Path) -> Task | Problem:
    """The task of ``text``, with the files its ``@path`` references name attached."""
    items: list[InputItem] = [InputText(text)]
    attached: list[str] = []
    for name in dict.fromkeys(_REFERENCE.findall(text)):  # once each, in order
        path = Path(name).expanduser()
        path = path if path.is_absolute() else workdir / path
        if not path.is_file():
            if "/" in name or "." in name:  # it meant a file: say so rather than send it
                return Problem(f"@{name}: no such file (nothing was sent)")
            continue  # a mention such as @alice
        data = path.read_bytes()[: MAX_FILE_BYTES + 1]
        if b"\0" in data[:8192]:
            return Problem(f"@{name}: a binary file, which chat does not attach (nothing was sent)")
        cut = len(data) > MAX_FILE_BYTES
        content = _utf8(data[:MAX_FILE_BYTES], whole=not cut)
        if isinstance(content, Problem):
            return Problem(f"@{name} {content.message}")
        if cut:
            content += f"\n[... cut at {MAX_FILE_BYTES // 1024} KiB]"
        items.append(InputText(f'<file path="{name}">\n{content}\n</file>'))
        attached.append(name)
    return Task(items, attached)


def _utf8(data: bytes, *, whole: bool) -> str | Problem:
    """``data`` decoded, or why not: a file that is not UTF-8 is refused, not attached with
    U+FFFD in place of each byte the model would then never see. A cut file (not ``whole``)
    may end in the middle of a character: that end is left out."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not whole and exc.reason == "unexpected end of data" and exc.start >= len(data) - 3:
            return data[: exc.start].decode("utf-8")
        return Problem(
            f"is not UTF-8 text ({undecodable(exc)}): convert it, e.g. "
            "iconv -f latin1 -t utf-8 (nothing was sent)"
        )
