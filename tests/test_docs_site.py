"""The docs build as a site with ``mkdocs build --strict`` (mkdocs.yml): a link to a page or a
heading that is not there fails the suite, as it would fail the site."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MKDOCS = Path(sys.executable).parent / "mkdocs"


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """Build the site of ``config`` into ``site`` with every warning an error."""
    # Material prints a notice about its own future on every build; the output shown on a
    # failure is easier to read without it (the variable is the one the notice names).
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [str(MKDOCS), "build", "--strict", "-f", str(config), "--site-dir", str(site)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)


def test_the_docs_build_clean_under_strict(tmp_path: Path) -> None:
    result = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "sitemap.xml").exists()


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    first, second = sorted(docs.glob("*.md"))[:2]
    with first.open("a") as page:
        page.write(f"\nSee [the lost heading]({second.name}#no-such-heading).\n")
    with second.open("a") as page:
        page.write("\nSee [the lost page](no-such-page.md).\n")
    config = ROOT / "mkdocs.yml"
    text = config.read_text()
    assert "\ndocs_dir: docs\n" in text, "mkdocs.yml no longer says `docs_dir: docs`"
    copy = tmp_path / "mkdocs.yml"
    copy.write_text(text.replace("\ndocs_dir: docs\n", f"\ndocs_dir: {docs}\n"))

    result = build(copy, tmp_path / "site")

    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    # Warnings, not notes: mkdocs reports a missing anchor at INFO unless mkdocs.yml says so.
    warnings = [line for line in output.splitlines() if line.startswith("WARNING")]
    lost_heading = f"'{first.name}' contains a link '{second.name}#no-such-heading'"
    lost_page = f"'{second.name}' contains a link 'no-such-page.md'"
    assert any(lost_heading in line for line in warnings), output
    assert any(lost_page in line for line in warnings), output
