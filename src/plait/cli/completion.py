"""``plait completion bash|zsh|fish``: a shell's completion script, made from the parser
itself, so that every command and option the parser has is completed and none it lacks."""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass

__all__ = ["cmd_completion", "completion_script"]


@dataclass(frozen=True)
class _Option:
    names: list[str]
    help: str
    takes_value: bool
    choices: list[str]
    files: bool


@dataclass(frozen=True)
class _Command:
    name: str
    help: str
    options: list[_Option]
    values: list[str]
    """What its argument may be, where the parser names the choices (``completion``'s shells)."""


def cmd_completion(args: argparse.Namespace) -> int:
    """Print the shell's completion script (``plait completion``)."""
    from plait.cli.parser import build_parser

    sys.stdout.write(completion_script(build_parser(), args.shell))
    return 0


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """Return the completion script of ``parser``'s program for ``shell``."""
    prog = parser.prog
    top = _options(parser)
    commands = [
        _Command(name, _short(action.help), _options(sub), _values(sub))
        for name, sub, action in _subcommands(parser)
    ]
    make = {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell]
    return make(prog, top, commands)


def _subcommands(
    parser: argparse.ArgumentParser,
) -> list[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a for a in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((name, sub, helps.get(name, action)))
    return found


def _options(parser: argparse.ArgumentParser) -> list[_Option]:
    found = []
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        takes_value = action.nargs != 0
        metavar = str(action.metavar or "")
        found.append(
            _Option(
                names=list(action.option_strings),
                help=_short(action.help),
                takes_value=takes_value,
                choices=[str(c) for c in action.choices or ()],
                files=takes_value and metavar.split("|")[0] == "PATH",
            )
        )
    return found


def _values(parser: argparse.ArgumentParser) -> list[str]:
    """The choices of ``parser``'s positional arguments."""
    return [
        str(choice)
        for action in parser._actions
        if not action.option_strings and action.choices is not None
        for choice in action.choices
    ]


def _short(text: str | None) -> str:
    """A help text's first clause, on one line, as a menu shows it."""
    first = " ".join((text or "").split()).split(";")[0].split(" (")[0]
    return first.rstrip(".")


def _names(options: list[_Option]) -> list[str]:
    return [name for option in options for name in option.names]


def _valued(options: list[_Option]) -> list[str]:
    return [name for option in options if option.takes_value for name in option.names]


def _bash(prog: str, top: list[_Option], commands: list[_Command]) -> str:
    fn = "_" + prog.replace("-", "_")
    top_words = " ".join(name for option in top for name in option.names)
    valued = sorted({*_valued(top), *(n for c in commands for n in _valued(c.options))})
    values: dict[str, str] = {}  # an option shared by every command is listed once
    for option in [*top, *(o for c in commands for o in c.options)]:
        if option.choices:
            values["|".join(option.names)] = " ".join(option.choices)
    per_command = "\n".join(
        f'        {c.name}) words="{" ".join(_names(c.options))}"'
        + (f' values="{" ".join(c.values)}"' if c.values else "")
        + " ;;"
        for c in commands
    )
    cases = "\n".join(f'        {names}) words="{words}" ;;' for names, words in values.items())
    return f"""# {prog} completion for bash: eval "$({prog} completion bash)" (in ~/.bashrc)
{fn}() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}}
    local command="" words="" values="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${{COMP_WORDS[i]}} in
            {"|".join(valued)}) ((i++)) ;;
            -*) ;;
            *) command=${{COMP_WORDS[i]}}; break ;;
        esac
    done
    case $prev in
{cases}
        {"|".join(valued)}) COMPREPLY=(); compopt -o default 2>/dev/null; return ;;
    esac
    if [[ -n $words ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur")); return
    fi
    case $command in
        "") words="{" ".join(c.name for c in commands)} {top_words}" ;;
{per_command}
    esac
    [[ -n $values && $cur != -* ]] && words=$values  # a command's argument, not an option
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F {fn} {prog}
"""


def _zsh_option(option: _Option) -> str:
    def escape(text: str) -> str:
        for char in "\\[]:'":
            text = text.replace(char, "\\" + char)
        return text

    value = ""
    if option.choices:
        value = f":value:({' '.join(option.choices)})"
    elif option.files:
        value = ":path:_files"
    elif option.takes_value:
        value = ":value: "
    described = f"[{escape(option.help)}]{value}'"
    if len(option.names) == 1:
        return f"'{option.names[0]}{described}"
    return f"'({' '.join(option.names)})'{{{','.join(option.names)}}}'{described}"


def _zsh_rest(command: _Command) -> str:
    """What zsh offers for a command's arguments: its choices, else file names."""
    if command.values:
        return f"'1:{command.name}:({' '.join(command.values)})'"
    return "'*: :_files'"


def _zsh(prog: str, top: list[_Option], commands: list[_Command]) -> str:
    fn = "_" + prog.replace("-", "_")
    top_specs = " \\\n        ".join(_zsh_option(o) for o in top)
    listed = "\n".join(
        f"        {shlex.quote(c.name + ':' + c.help.replace(':', ' -'))}" for c in commands
    )
    cases = "\n".join(
        f"        {c.name}) _arguments {' '.join(map(_zsh_option, c.options))} {_zsh_rest(c)} ;;"
        for c in commands
    )
    return f"""#compdef {prog}
# {prog} completion for zsh: eval "$({prog} completion zsh)" (in ~/.zshrc, after compinit)
{fn}() {{
    local curcontext=$curcontext state line
    _arguments -C \\
        {top_specs} \\
        '1:command:->command' \\
        '*::argument:->argument'
    case $state in
    command)
        local -a commands=(
{listed}
        )
        _describe -t commands '{prog} command' commands ;;
    argument)
        case $line[1] in
{cases}
        esac ;;
    esac
}}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then {fn} "$@"; else compdef {fn} {prog}; fi
"""


def _fish_option(prog: str, option: _Option, condition: str) -> str:
    parts = [f"complete -c {prog}"]
    if condition:
        parts.append(f"-n {shlex.quote(condition)}")
    for name in option.names:
        parts.append(f"-l {name[2:]}" if name.startswith("--") else f"-s {name[1:]}")
    if option.choices:
        parts.append(f"-x -a {shlex.quote(' '.join(option.choices))}")
    elif option.files:
        parts.append("-r -F")
    elif option.takes_value:
        parts.append("-x")
    parts.append(f"-d {shlex.quote(option.help)}")
    return " ".join(parts)


def _fish(prog: str, top: list[_Option], commands: list[_Command]) -> str:
    lines = [
        f"# {prog} completion for fish: {prog} completion fish | source",
        f"# (or save it as ~/.config/fish/completions/{prog}.fish)",
        f"complete -c {prog} -f",
    ]
    lines += [_fish_option(prog, option, "") for option in top]
    for command in commands:
        lines.append(
            f"complete -c {prog} -n __fish_use_subcommand -a {command.name} "
            f"-d {shlex.quote(command.help)}"
        )
    for command in commands:
        seen = f"__fish_seen_subcommand_from {command.name}"
        if command.values:
            values = shlex.quote(" ".join(command.values))
            lines.append(f"complete -c {prog} -n {shlex.quote(seen)} -x -a {values}")
        lines += [_fish_option(prog, option, seen) for option in command.options]
    return "\n".join(lines) + "\n"
