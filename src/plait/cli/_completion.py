"""``plait completion bash|zsh|fish``: the shell's completion script.

The script is ``argcomplete``'s: at each Tab the shell runs ``plait`` with the line to
complete, and ``plait`` answers from its own parser (``main``), so every command, option and
choice it has is completed, and none it lacks.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["cmd_completion", "completion_script"]


def cmd_completion(args: argparse.Namespace) -> int:
    """Print the shell's completion script (``plait completion``)."""
    sys.stdout.write(completion_script(args.shell))
    return 0


def completion_script(shell: str) -> str:
    """Return the completion script of ``plait`` for ``shell``."""
    from argcomplete.shell_integration import shellcode

    return shellcode(["plait"], shell=shell)
