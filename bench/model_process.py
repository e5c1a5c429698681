"""``ScriptedModelServer`` in a process of its own, as a real model server is.

A server in the bench's own process shares its interpreter lock: every microsecond the client
spends in Python delays the server's reply, and the bench measures the two together. In a
process of its own (here, on the other core) the server answers as fast whoever its client is.

``with ModelProcess(steps) as server``: ``server.base_url``; ``server.requests(n)``, the bodies
of the first ``n`` requests it received. Run as a script, it is the child: it reads its steps
from stdin (a ``Step`` a JSON line, then an empty line), prints its base URL, answers
``requests N`` lines with the bodies as one JSON line, and exits at the end of its stdin.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

import msgspec

from plait.testing import ScriptedModelServer, Step

__all__ = ["ModelProcess"]


class ModelProcess:
    """A ``ScriptedModelServer`` serving ``steps`` from a child process."""

    def __init__(self, steps: Iterable[Step], model: str = "scripted-model") -> None:
        # The installed plait's server, even for a bench of another plait (on PYTHONPATH): the
        # same server for every plait compared.
        env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
        self._child = subprocess.Popen(
            [sys.executable, __file__, model],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self._child.stdin is not None and self._child.stdout is not None
        for step in steps:
            self._child.stdin.write(msgspec.json.encode(step).decode() + "\n")
        self._child.stdin.write("\n")
        self._child.stdin.flush()
        self.base_url = self._child.stdout.readline().strip()
        if not self.base_url:
            raise RuntimeError("the model server process did not start")

    def requests(self, n: int) -> list[dict[str, Any]]:
        """The bodies of the first ``n`` requests the server received."""
        assert self._child.stdin is not None and self._child.stdout is not None
        self._child.stdin.write(f"requests {n}\n")
        self._child.stdin.flush()
        bodies: list[dict[str, Any]] = msgspec.json.decode(self._child.stdout.readline())
        return bodies

    def close(self) -> None:
        if self._child.stdin is not None:
            self._child.stdin.close()
        self._child.wait(timeout=30)

    def __enter__(self) -> ModelProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _child(model: str) -> None:
    steps = []
    for line in sys.stdin:
        if not line.strip():
            break
        steps.append(msgspec.json.decode(line, type=Step))
    with ScriptedModelServer(steps, model=model) as server:
        print(server.base_url, flush=True)
        for line in sys.stdin:
            n = int(line.split()[1])
            bodies = [request.body for request in server.wait_for_requests(n, timeout=60)[:n]]
            print(msgspec.json.encode(bodies).decode(), flush=True)


if __name__ == "__main__":
    _child(sys.argv[1])
