"""The code stays ruff-clean and ``mypy --strict``-clean; run in the suite so CI holds it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "plait"
BIN = Path(sys.executable).parent


def run(
    *cmd: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=240, env=env)


def test_ruff_lint_and_format() -> None:
    lint = run(str(BIN / "ruff"), "check", ".")
    assert lint.returncode == 0, lint.stdout
    fmt = run(str(BIN / "ruff"), "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout


@pytest.mark.timeout(300)  # a cold mypy on a loaded machine takes minutes
def test_mypy_strict() -> None:
    # pyproject.toml names the package and where it lives (`src/`): plain `mypy` checks it.
    # A cold run, and no cache written: mypy's docs give `--cache-dir=/dev/null` for that
    # (writing the cache of a run nobody reuses cost 15 % of its CPU here).
    result = run(str(BIN / "mypy"), "--cache-dir", "/dev/null")
    assert result.returncode == 0, result.stdout


def test_every_package_directory_is_a_package() -> None:
    # setuptools finds packages by their `__init__.py`: a directory of modules without one
    # would be left out of the wheel.
    bare = sorted(
        str(folder.relative_to(ROOT))
        for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir())]
        if any(folder.glob("*.py")) and not (folder / "__init__.py").exists()
    )
    assert bare == []


def test_the_wheel_holds_the_package_and_nothing_else(tmp_path: Path) -> None:
    # Built from a copy of what the build reads, so the checkout gains no build/ or egg-info.
    source = tmp_path / "source"
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
        "--wheel-dir", str(tmp_path / "dist"), str(source),
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (tmp_path / "dist").glob("plait-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    package = sorted(n for n in names if ".dist-info/" not in n)
    expected = sorted(
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*")
        if path.is_file()
        and (
            path.suffix == ".py"
            or path.name == "py.typed"
            or path.match("dictionary-*.bin")
            or path.match("zstd-*.dict")
        )
    )
    assert package == expected
    assert all(n.startswith("plait/") or n.startswith("plait-") for n in names), names


def test_every_package_the_code_imports_is_declared() -> None:
    import ast
    import importlib.metadata
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_dist_name(spec) for spec in project["dependencies"]}
    for extra in ("postgres", "service", "otel"):
        declared |= {_dist_name(spec) for spec in project["optional-dependencies"][extra]}
    providers = importlib.metadata.packages_distributions()
    missing: dict[str, str] = {}
    for path in PACKAGE.glob("**/*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top in sys.stdlib_module_names or top in {"plait", "__future__"}:
                    continue
                dists = {_dist_name(d) for d in providers.get(top, [top])}
                if not dists & declared:
                    missing[top] = str(path.relative_to(ROOT))
    assert missing == {}, f"imported but not in pyproject.toml's dependencies: {missing}"


def _dist_name(spec: str) -> str:
    """A distribution's normalized name, from a requirement such as ``psycopg[binary]>=3.3``."""
    import re

    name = re.split(r"[\[<>=!~; ]", spec, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def test_importing_plait_leaves_the_heavy_clients_unloaded() -> None:
    # `import openai` costs about a second and `import mcp` more: only a model call loads them.
    code = "import sys, plait, plait.cli; print(sorted({'openai', 'mcp'} & set(sys.modules)))"
    result = run(sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_readme_event_reference_is_current() -> None:
    from plait.events._reference import replace_reference

    page = (ROOT / "docs" / "events.md").read_text()
    assert replace_reference(page) == page, (
        "the event reference in docs/events.md is stale: "
        "run `python -m plait.events._reference --write docs/events.md`"
    )


def test_every_type_in_the_public_api_is_exported() -> None:
    import inspect
    import typing

    import plait

    def named(hint: object) -> set[type]:
        """The plait classes ``hint`` names, through unions, generics and aliases."""
        origin = typing.get_origin(hint)
        if origin is typing.Literal:
            return set()
        found: set[type] = set()
        if isinstance(hint, type) and hint.__module__.startswith("plait."):
            found.add(hint)
        for arg in typing.get_args(hint):
            found |= named(arg)
        value = getattr(hint, "__value__", None)  # a `type X = ...` alias
        return found | (named(value) if value is not None else set())

    used: set[type] = set()
    for cls in (plait.Runtime, plait.SessionHandle, plait.TaskOutcome):
        for name, member in inspect.getmembers(cls):
            if (name.startswith("_") and name != "__init__") or not callable(member):
                continue
            if cls is plait.SessionHandle and name == "__init__":
                continue  # a handle is made by the runtime, not by its users
            hints = typing.get_type_hints(member, localns={"Runtime": plait.Runtime})
            for param, hint in hints.items():
                if not param.startswith("_"):  # a private parameter is not the API
                    used |= named(hint)
    unexported = sorted(c.__name__ for c in used if getattr(plait, c.__name__, None) is not c)
    assert unexported == [], unexported


def test_the_code_cites_only_documents_the_repository_has() -> None:
    import re

    anchors: dict[str, set[str]] = {}
    for doc in (ROOT / "docs").glob("*.md"):
        headings = re.findall(r"^#+ (.+)$", doc.read_text(), re.MULTILINE)
        anchors[doc.name] = {_anchor(h) for h in headings}
    cited = re.compile(r"docs/([\w.-]+\.md)(?:#([\w-]+))?")
    outside = re.compile(r"\bseeds?/|\bseed 00\d")
    problems: list[str] = []
    for path in [*ROOT.glob("**/*.py"), *ROOT.glob("*.md"), *ROOT.glob("docs/*.md")]:
        parts = path.relative_to(ROOT).parts
        if parts[0].startswith(".") or parts[0] == "build":
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{lineno}"
            if outside.search(line):
                problems.append(f"{where}: cites a document outside the repository")
            for doc, anchor in cited.findall(line):
                if doc not in anchors:
                    problems.append(f"{where}: no docs/{doc}")
                elif anchor and anchor not in anchors[doc]:
                    problems.append(f"{where}: no heading #{anchor} in docs/{doc}")
    assert problems == []


def _anchor(heading: str) -> str:
    """The anchor a heading gets on GitHub: lowercase, punctuation dropped, spaces as dashes."""
    import re

    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


WINGS = ["events", "actors", "telemetry", "runtime", "replay", "cli"]
"""The wings, lowest first: each may import those before it, never one after it."""


def test_the_wings_import_only_downward() -> None:
    import ast

    problems: list[str] = []
    for rank, wing in enumerate(WINGS):
        above = set(WINGS[rank + 1 :])
        for path in (PACKAGE / wing).glob("**/*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module:
                    modules = [node.module]
                elif isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                else:
                    continue
                for module in modules:
                    parts = module.split(".")
                    if parts[0] == "plait" and len(parts) > 1 and parts[1] in above:
                        where = path.relative_to(ROOT)
                        problems.append(f"{where}:{node.lineno} imports {module}")
    assert problems == []


def imports_of(path: Path, module: str, modules: dict[str, Path]) -> set[str]:
    """The modules of ours that ``module`` (at ``path``) imports, wherever the import is: at
    the top, in a function, or for type checking only (a reader follows those too)."""
    import ast

    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:  # a name from a module: the module
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(f"{name}."):
                found.add(name)  # not the package a module is in: its face
    return found


def import_circles() -> list[list[str]]:
    """The groups of modules of ``src/plait`` that import each other round in a circle."""
    modules = {}
    for path in PACKAGE.glob("**/*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {module: imports_of(path, module, modules) for module, path in modules.items()}
    # Tarjan's strongly connected components, without recursion.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        circles.append(sorted(group))
    return sorted(circles)


def test_no_import_circle() -> None:
    # docs/code.md#no-circles: a part that calls back into what holds it names what it needs
    # as a Protocol of its own.
    assert import_circles() == []


def test_the_circle_check_finds_a_circle_through_a_type_only_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import B\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n"
    )
    (package / "c.py").write_text("from pkg import a\n")
    modules = {f"pkg.{name}": package / f"{name}.py" for name in ("a", "b", "c")}
    assert imports_of(package / "b.py", "pkg.b", modules) == {"pkg.a"}
    assert imports_of(package / "c.py", "pkg.c", modules) == {"pkg.a"}


DOTTED = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
"""A name and the attributes read through it: ``self._journal._unsubscribe``."""
GETATTR_PRIVATE = re.compile(r"getattr\(\s*([\w.]+)\s*,\s*[\"'](_[a-z]\w*)[\"']")
STRING = re.compile(r"\"[^\"]*\"|'[^']*'")
LIBRARY_PRIVATES = {
    "_replace",  # namedtuple's public API, named so that it cannot clash with a field
    "_asdict",
    "_exit",  # os._exit: the documented way to exit at once, skipping cleanup (a second signal)
}


def private_reaches(code: str) -> list[str]:
    """The private members ``code`` reads of an object not its own: one whose name starts
    with ``_`` read through anything but ``self`` or ``cls``, however long the chain, or
    named in a ``getattr``."""
    found = []
    for chain in DOTTED.findall(STRING.sub("''", code)):
        parts = chain.split(".")
        if parts[0] == "plait":
            continue  # a module's path: its wing's face rules who imports it (test_api.py)
        for i, member in enumerate(parts[1:], 1):
            own = i == 1 and parts[0] in {"self", "cls"}
            private = member.startswith("_") and not member.startswith("__")
            if private and not own and member not in LIBRARY_PRIVATES:
                found.append(chain)
                break
    found += [f"getattr({owner}, {member!r})" for owner, member in GETATTR_PRIVATE.findall(code)]
    return found


def test_the_private_member_check_sees_chains_and_getattr() -> None:
    assert private_reaches("self._journal._unsubscribe(self)") == ["self._journal._unsubscribe"]
    assert private_reaches('getattr(getattr(p, "_process"), "_transport")') == [
        "getattr(p, '_process')"
    ]
    assert private_reaches("other._x = 1") == ["other._x"]
    assert private_reaches("self._x.y(cls._z, os._exit, f'a._b')") == []
    assert private_reaches("from plait.runtime._life import Life") == []


def test_no_module_reaches_into_another_objects_private_members() -> None:
    # What one part needs of another is a transition or a query on its public face
    # (docs/processes.md#a-sessions-life): a private member is its own object's alone.
    found = []
    for path in PACKAGE.glob("**/*.py"):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for reach in private_reaches(line.split("#", 1)[0]):
                found.append(f"{path.relative_to(ROOT)}:{lineno}: {reach}")
    assert found == []


JOURNAL_CALLBACK_SET = re.compile(r"\.(on_idle|on_lost|may_act)\s*=[^=]")


def test_a_journal_is_given_its_callbacks_when_it_is_made() -> None:
    # Told by the journal (on_idle, on_lost) or asked by it (may_act): set once, where it is
    # made (SessionHost), so no journal runs for a while with the wrong ones.
    found = []
    for path in [*PACKAGE.glob("**/*.py"), *(ROOT / "tests").glob("**/*.py")]:
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if JOURNAL_CALLBACK_SET.search(line.split("#", 1)[0]):
                found.append(f"{path.relative_to(ROOT)}:{lineno}")
    assert found == []


ANY = re.compile(r"\bAny\b")
ANY_LIMIT = 25
"""The most ``Any`` the actors and the runtime may hold (data from outside is ``JsonValue``)."""


def test_the_actors_and_the_runtime_hold_little_any() -> None:
    # Counted as `grep -rnw Any src/plait/actors src/plait/runtime | grep -v import` counts:
    # what remains should be a library type with no public name, said so where it stands.
    found = []
    for wing in ("actors", "runtime"):
        for path in sorted((PACKAGE / wing).glob("**/*.py")):
            for lineno, line in enumerate(path.read_text().splitlines(), 1):
                if "import" not in line:
                    where = f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}"
                    found += [where] * len(ANY.findall(line))
    assert len(found) <= ANY_LIMIT, "\n".join([f"{len(found)} > {ANY_LIMIT}:", *found])


def test_the_public_names_are_listed_alike_where_plait_names_them() -> None:
    """``plait`` imports its public names on first use: the type checkers' imports, the table
    it imports from and ``__all__`` name the same names, and each of them resolves."""
    import ast

    import plait

    tree = ast.parse((ROOT / "src" / "plait" / "__init__.py").read_text())
    (checking,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name)
        if node.test.id == "TYPE_CHECKING"
    ]
    typed = {
        alias.asname or alias.name
        for node in checking.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert typed == set(plait._WHERE) == set(plait.__all__)
    for name in plait.__all__:
        assert getattr(plait, name) is not None, name
