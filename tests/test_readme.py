"""The README and the docs run as written: the embedding example, and every command they show.

Command blocks follow a ``<!-- commands: run by tests/test_readme.py ... -->`` marker, in
README.md or a page of docs/; each line runs in a shell, in order, with ``SESSION`` replaced
by the session the block is about. A ``"quoted"`` text in a line's comment is what the command
prints: it is checked too. The README's map of the code is checked against the tree.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from otlp_receiver import OtlpReceiver
from scripted import call

from plait.testing import ScriptedModelServer, Step

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PAGES = [README, *(page.read_text() for page in sorted((ROOT / "docs").glob("*.md")))]
"""The README, then every page of docs/: where the blocks that run are looked for."""
MARKER = "<!-- commands: run by tests/test_readme.py"
EMBEDDING = "<!-- embedding: run by tests/test_readme.py -->"


def blocks_after(marker: str, language: str) -> list[str]:
    """The fenced ``language`` blocks that follow ``marker`` in the README and the docs."""
    found = []
    for text in PAGES:
        for part in text.split(marker)[1:]:
            match = re.match(rf"[^\n]*\n```{language}\n(.*?)```", part, re.S)
            assert match, f"no ```{language} block right after {marker!r}"
            found.append(match.group(1))
    return found


def environment(**extra: str) -> dict[str, str]:
    """The test's environment without plait's and OpenAI's settings, with plait on the PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PLAIT_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env | extra


def run_lines(block: str, cwd: Path, env: dict[str, str], session: str = "") -> list[str]:
    """Run each line of ``block``; return what each printed."""
    printed = []
    for line in block.strip().splitlines():
        if not session and "SESSION" in line:
            session = only_session(cwd, env)
        command = line.replace("SESSION", session)
        result = subprocess.run(
            ["sh", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, f"`{command}` exited {result.returncode}:\n{result.stderr}"
        for said in re.findall(r'#.*?"([^"]+)"', line):
            assert said in result.stdout, f"`{command}` did not print {said!r}:\n{result.stdout}"
        printed.append(result.stdout)
    return printed


def only_session(cwd: Path, env: dict[str, str]) -> str:
    listed = subprocess.run(
        ["plait", "sessions", "--json"], cwd=cwd, env=env, capture_output=True, text=True
    )
    [line] = listed.stdout.splitlines()
    return str(json.loads(line)["session_id"])


def test_the_embedding_example_runs_as_written(tmp_path: Path) -> None:
    examples = blocks_after(EMBEDDING, "python")
    assert len(examples) == 2  # the README's and docs/embedding.md's, the same
    assert EMBEDDING in README and len(set(examples)) == 1
    result = subprocess.run(
        [sys.executable, "-c", examples[0]],
        cwd=tmp_path,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "completed Two issues are open.",
        "None were closed.Yes.",
    ]


def test_every_block_that_runs_is_found() -> None:
    # A block whose marker is lost would run nowhere, silently: count them, and their lines.
    kinds = ["", " against a scripted server", " (proof)", " (telemetry)", " (storage)"]
    commands = [
        len(block.strip().splitlines())
        for kind in kinds
        for block in blocks_after(f"{MARKER}{kind} -->", "sh")
    ]
    assert commands == [16, 3, 8, 4, 5]
    every = sum(text.count(MARKER) for text in PAGES)
    assert every == len(commands)
    assert len(blocks_after("<!-- config: used by tests/test_readme.py", "toml")) == 1


def test_every_command_after_the_demo_runs(tmp_path: Path) -> None:
    first = blocks_after(MARKER + " -->", "sh")
    assert len(first) == 1
    printed = run_lines(first[0], tmp_path, environment())
    assert "replay: 35 of 35 events made again, no difference" in printed[0]


def test_proving_what_happened_runs_as_written(tmp_path: Path) -> None:
    (block,) = blocks_after(MARKER + " (proof) -->", "sh")
    printed = run_lines(block, tmp_path, environment())
    assert "unchecked" not in printed[2] and "witness audit.key.heads" in printed[2]


def test_watching_sessions_runs_as_written(tmp_path: Path) -> None:
    (block,) = blocks_after(MARKER + " (telemetry) -->", "sh")
    with OtlpReceiver() as collector:
        printed = run_lines(
            block.replace("http://127.0.0.1:4318", collector.url), tmp_path, environment()
        )
        spans = collector.wait_for_spans(lambda got: len(got) >= 18)
    assert len(spans) == 18 and len({s.span_id for s in spans}) == 9  # live, then again
    assert printed[1].endswith(f": 9 spans sent to {collector.url}/v1/traces\n")


def test_storage_you_can_see_runs_as_written(tmp_path: Path) -> None:
    (block,) = blocks_after(MARKER + " (storage) -->", "sh")
    printed = run_lines(block, tmp_path, environment())
    assert printed[1].count("\n") > 3 and "store:" in printed[1]  # both sessions, the store
    assert "kept" in printed[2] and "last position" in printed[2]  # and why the other stays
    listed = run_lines("plait sessions --json", tmp_path, environment())[0]
    assert len(listed.splitlines()) == 1  # the pruned one is gone from the list


def test_the_configured_servers_run_as_shown(git_repo: Path) -> None:
    (config,) = blocks_after("<!-- config: used by tests/test_readme.py", "toml")
    (commands,) = blocks_after(MARKER + " against a scripted server -->", "sh")
    (git_repo / "plait.toml").write_text(config)
    script = [
        Step(
            tool_calls=[
                call("time__get_current_time", timezone="UTC"),
                call("git__git_log", repo_path="."),
            ]
        ),
        Step(text="It is noon in UTC; the last commit is the first one."),
        Step(text="Noon, one commit."),
    ]
    with ScriptedModelServer(script) as server:  # in place of the real server
        env = environment(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="test")
        printed = run_lines(commands, git_repo, env)
    assert "the last commit is the first one" in printed[0]
    assert printed[2].split()[2] == "git__git_log"  # the audit: the call and its outcome
    assert " ok " in printed[2]


def test_the_code_map_matches_the_tree() -> None:
    from test_quality import WINGS

    section = README.split("\n## The code\n")[1].split("\n## ")[0]
    named = re.findall(r"`(src/plait/[\w/.]+)`", section)
    assert [path for path in named if not (ROOT / path).exists()] == []
    package = ROOT / "src" / "plait"
    wings = sorted(path.name for path in package.iterdir() if (path / "__init__.py").exists())
    assert sorted(WINGS) == wings  # the layering test knows every wing
    rows = [path for path in named if path.count("/") == 3 and path.endswith("/")]
    assert rows == [f"src/plait/{wing}/" for wing in WINGS]  # each named, in layer order


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= 200
