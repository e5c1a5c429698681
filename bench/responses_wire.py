"""A session on the Responses API goes on on servers no one here wrote: LiteLLM's proxy in
front of a chat server, and llama.cpp's ``llama-server`` (``/v1/responses``).

    python bench/responses_wire.py [--keep DIR] [--no-llama]

Everything comes from the package index: LiteLLM's proxy (``litellm[proxy]``) is installed in
a venv of its own, and ``llama-server`` and its model are built as ``bench/llama_server.py``
builds them (about 20 minutes the first time), all under ``~/.cache/plait-bench``.

1. ``plait exec`` runs the session's first task on the Responses API against a
   ``ScriptedModelServer`` (its requests are printed): the model reasons, calls
   ``time__get_current_time`` on the published ``mcp-server-time``, hands off to a helper
   (``conv_create``) and answers; each reply's reasoning item comes back with the next request.
2. ``plait exec --session`` goes on with it on ``llama-server``'s own ``/v1/responses``.
3. ``plait exec --session`` goes on with it through LiteLLM's proxy, which turns the Responses
   request into Chat Completions for the server behind it (``llama-server``'s chat path, or
   with ``--no-llama`` a ``ScriptedModelServer`` speaking chat only).
4. ``plait history``, ``audit`` and ``replay``. It exits non-zero if a step did not go on or
   the session did not replay clean.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import llama_server as llama  # noqa: E402  (bench/llama_server.py: its build and its helpers)
from llama_server import free_port, say  # noqa: E402

LITELLM = "litellm[proxy]==1.108.7"
LITELLM_VENV = llama.CACHE / "litellm"
MASTER_KEY = "sk-plait-bench-not-a-secret-0123456789"
MODEL = "gemma-3-270m"


def build_litellm() -> Path:
    """LiteLLM's proxy in a venv of its own (once); return its ``litellm`` command."""
    command = LITELLM_VENV / "bin" / "litellm"
    if command.exists():
        return command
    llama.run(sys.executable, "-m", "venv", LITELLM_VENV)
    say(f"installing {LITELLM} from the package index...")
    llama.run(LITELLM_VENV / "bin" / "python", "-m", "pip", "install", "-q", LITELLM)
    return command


def start_litellm(
    command: Path, chat_base_url: str, workdir: Path
) -> tuple[subprocess.Popen[bytes], int]:
    """LiteLLM's proxy, serving ``MODEL`` from the chat server at ``chat_base_url`` (its
    ``custom_openai`` provider speaks only Chat Completions to it)."""
    port = free_port()
    config = workdir / "litellm.yaml"
    config.write_text(
        f"model_list:\n  - model_name: {MODEL}\n    litellm_params:\n"
        f"      model: custom_openai/{MODEL}\n      api_base: {chat_base_url}\n"
        f"      api_key: local\ngeneral_settings:\n  master_key: {MASTER_KEY}\n"
    )
    start = [str(command), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    proxy = llama.start_server(
        start, port, workdir / "litellm.log", ready="/health/liveliness", within=180
    )
    return proxy, port


def first_task(workdir: Path) -> tuple[str, bool]:
    """The session's first task, on the Responses API of a ``ScriptedModelServer``."""
    from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

    called = ScriptedToolCall("time__get_current_time", '{"timezone": "UTC"}')
    handoff = ScriptedToolCall("conv_create", '{"user_instruction": "Say the time in words."}')
    script = [
        Step(reasoning="The user wants the time: ask the clock.", tool_calls=[called]),
        Step(reasoning="A helper can put it in words.", tool_calls=[handoff]),
        Step(reasoning="Short.", text="Morning, in UTC."),
        Step(text="The helper says: morning, in UTC."),
    ]
    with ScriptedModelServer(script) as scripted:
        (workdir / "plait.toml").write_text(
            f"""[model]
base_url = "{scripted.base_url}"
model = "{MODEL}"
wire_api = "responses"
max_output_tokens = 24
stop = ["\\n"]

"""
            + llama.TIME_SERVER
        )
        say(f"\n== the first task, on a ScriptedModelServer's /v1/responses, in {workdir}")
        say((workdir / "plait.toml").read_text().rstrip())
        first = llama.plait(workdir, "exec", "What time is it in UTC? Ask a helper to say it.")
        say("\n== the requests it made (input item types; reasoning items sent back)")
        carried = []
        for request in scripted.requests:
            kinds = [item.get("type") for item in request.input]
            items = [i for i in request.input if i["type"] == "reasoning"]
            sent = [i.get("encrypted_content", "")[:16] for i in items]
            carried.append(len(sent))
            store = request.body.get("store")
            say(f"POST {request.path}: store={store} items={kinds} reasoning={sent}")
    ok = first.returncode == 0 and carried[1] >= 1 and carried[-1] >= 2
    return llama.session_of(first), ok


STOPS = '["\\nQ:", "\\nR:", "</tool_call>"]'
"""Where the base model's turns end (``bench/gemma-tools.jinja``): sent as ``stop``, which the
Responses API lacks and llama.cpp takes, through ``extra_body``."""


def go_on(workdir: Path, session: str, where: str, env: dict[str, str], prompt: str) -> bool:
    """Go on with ``session`` on a real server until it answers once, then stop the command
    as an operator does (SIGTERM: the task ends at its next checkpoint, the session is handed
    back); return whether the server took the session's history and answered. A 270M base
    model would otherwise call tools again and again until the context's end."""
    from plait import open_store
    from plait.events import ModelRequestFailed, ModelResponded

    say(f"\n== the session goes on {where}")
    flags = ["-c", f"model.extra_body={{stop = {STOPS}}}", "-c", "model.max_output_tokens=96"]
    args = [*flags, "exec", "--session", session, prompt]
    with (
        open_store(str(workdir / ".plait" / "plait.db")) as store,
        store.subscribe() as tail,  # from the log's start: what came before is skipped
    ):
        before = store.last_seq(session)
        process = subprocess.Popen(
            [sys.executable, "-m", "plait", *args],
            cwd=workdir,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        answered, deadline = False, time.monotonic() + 300
        while process.poll() is None and (left := deadline - time.monotonic()) > 0:
            event = tail.get(timeout=min(left, 1.0))
            if event is not None and event.stream == session and event.seq > before:
                if isinstance(event.body, ModelRequestFailed):
                    say(f"  (recorded: {event.body.error})")
                if isinstance(event.body, ModelResponded):
                    answered = True
                    break
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    say(f"$ plait {' '.join(args)}\n{out.rstrip()}\n{err.rstrip()}\n(exit {process.returncode})")
    # 0 or 1 (a reply cut at the cap is a base model's answer), 143 (stopped once it answered)
    ok = answered and process.returncode in (0, 1, 143)
    say(f"went on {where}: {ok}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--keep", type=Path, help="run plait in this directory, and keep it")
    parser.add_argument(
        "--no-llama", action="store_true", help="a scripted chat server behind LiteLLM only"
    )
    args = parser.parse_args()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="plait-responses-"))
    workdir.mkdir(parents=True, exist_ok=True)
    litellm = build_litellm()
    results: dict[str, bool] = {}
    with ExitStack() as stack:
        session, results["first task, reasoning sent back"] = first_task(workdir)
        if args.no_llama:
            from plait.testing import ScriptedModelServer, Step

            chat = stack.enter_context(ScriptedModelServer([Step(text="Still morning.")]))
            chat_url = chat.base_url
        else:
            binary, model = llama.build_server(), llama.assemble_model()
            say(llama.run(binary, "--version").strip().splitlines()[0])
            port = free_port()
            # Room for two steps of a base model that calls tools until its cap.
            command = llama.server_command("llama-server", [str(binary)], model, port, 16384)
            server = llama.start_server(command, port, workdir / "llama-server.log")
            stack.callback(server.wait)
            stack.callback(server.terminate)
            chat_url = f"http://127.0.0.1:{port}/v1"
        if not args.no_llama:  # first: a base model calling tools fills the context after
            direct = {"OPENAI_BASE_URL": chat_url}
            where = f"on llama-server's own {chat_url}/responses"
            results["on llama-server's /v1/responses"] = go_on(
                workdir, session, where, direct, "Once more."
            )
        proxy, proxy_port = start_litellm(litellm, chat_url, workdir)
        stack.callback(proxy.wait)
        stack.callback(proxy.terminate)
        proxy_url = f"http://127.0.0.1:{proxy_port}/v1"
        through = {"OPENAI_BASE_URL": proxy_url, "OPENAI_API_KEY": MASTER_KEY}
        results["through LiteLLM's proxy"] = go_on(
            workdir, session, f"through LiteLLM's proxy to {chat_url}", through, "Say it again."
        )
    for command in ("history", "audit"):
        llama.plait(workdir, command, session)
    results["replay clean"] = llama.plait(workdir, "replay", session).returncode == 0
    say("\n== verdict")
    for what, ok in results.items():
        say(f"{what}: {ok}")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
