"""The documentation site (mkdocs.yml, docs/) builds with --strict, and --strict means something:
a link to a missing page or anchor, or a page left out of the navigation, fails the build. The
README stays a front page (at most 300 lines) whose links resolve and whose quick start is the
install page's block, word for word; the benchmark page stays the current results."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- The block below is run verbatim by tests/engine/test_documented_commands.py. -->"
SHORT_PAGES = ["README.md", "docs/benchmarks.md"]
"""Pages a reader takes in whole: at most 300 lines each."""


def build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of the project at `project` (snippets resolve from there)."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=project,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def project_copy(destination: Path) -> Path:
    """What the site is built from: mkdocs.yml, docs/ and the file the reference embeds."""
    shutil.copy2(ROOT / "mkdocs.yml", destination / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", destination / "docs")
    (destination / "components").mkdir()
    shutil.copy2(ROOT / "components" / "README.md", destination / "components" / "README.md")
    return destination


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    built = build(ROOT, tmp_path / "site")
    assert built.returncode == 0, built.stderr[-4000:]
    assert (tmp_path / "site" / "benchmarks" / "index.html").is_file()
    assert (tmp_path / "site" / "benchmarks.png").is_file()


@pytest.mark.parametrize(
    ("page", "append", "message"),
    [
        ("operate.md", "[gone](no-such-page.md)", "not found among documentation files"),
        ("operate.md", "[gone](install.md#no-such-anchor)", "does not contain an anchor"),
    ],
)
def test_a_broken_link_fails_the_strict_build(
    tmp_path: Path, page: str, append: str, message: str
) -> None:
    project = project_copy(tmp_path)
    target = project / "docs" / page
    target.write_text(target.read_text(encoding="utf-8") + f"\n{append}\n", encoding="utf-8")
    built = build(project, tmp_path / "site")
    assert built.returncode != 0
    assert message in built.stderr, built.stderr[-4000:]


def test_a_page_left_out_of_the_navigation_fails_the_strict_build(tmp_path: Path) -> None:
    project = project_copy(tmp_path)
    (project / "docs" / "stray.md").write_text("# Stray\n", encoding="utf-8")
    built = build(project, tmp_path / "site")
    assert built.returncode != 0
    assert "stray.md" in built.stderr, built.stderr[-4000:]


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.DOTALL)


def test_the_readme_quick_start_is_the_install_pages_block() -> None:
    install = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    (tested,) = shell_blocks(install.split(MARKER, 1)[1])[:1]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert tested in shell_blocks(readme)


def test_the_readmes_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert links
    missing = [link for link in links if "://" not in link and not (ROOT / link).exists()]
    assert missing == []


@pytest.mark.parametrize("page", SHORT_PAGES)
def test_the_front_pages_stay_short(page: str) -> None:
    lines = (ROOT / page).read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"{page} has {lines} lines"
