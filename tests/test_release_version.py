"""One version: pyproject.toml's. Everything that names the release reads it or is held equal to
it here, so a release that bumps pyproject.toml alone fails these tests until each file that
must spell the version out (YAML the engine reads, JSON a generator wrote, documentation) says
the same."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from components import naming
from components.pulumi_package import PACKAGE_VERSION
from provisioner.configuration.options import parse_options
from provisioner.kube.client import DEFAULT_USER_AGENT
from provisioner.version import VERSION
from scripts import build_image

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
    "version"
]
DOCUMENTS = [
    "README.md",
    "components/README.md",
    "localcluster/README.md",
    *sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").glob("*.md")),
]
"""Where users read the image's tag in commands they copy."""
IMAGE_TAG = re.compile(
    rf"{re.escape(naming.IMAGE_REPOSITORY)}:([0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.-]*[0-9A-Za-z])?)"
)
"""A semantic version after the image's name (a pre-release or build suffix included)."""


def _yaml(relative: str) -> dict[str, object]:
    content: dict[str, object] = yaml.safe_load((ROOT / relative).read_text(encoding="utf-8"))
    return content


def test_the_installed_distribution_is_pyprojects_version() -> None:
    """What every run-time reader gets (importlib.metadata); a stale install fails here."""
    assert VERSION == PYPROJECT_VERSION


def test_the_image_tag_and_the_stacks_default_image_carry_the_version() -> None:
    assert build_image.project_version() == PYPROJECT_VERSION
    assert f"{build_image.REPOSITORY}:{PYPROJECT_VERSION}" == naming.DEFAULT_IMAGE
    config = _yaml("Pulumi.yaml")["config"]
    assert isinstance(config, dict)
    assert config["image"]["default"] == naming.DEFAULT_IMAGE


def test_the_pulumi_package_and_the_policy_pack_carry_the_version() -> None:
    assert PACKAGE_VERSION == PYPROJECT_VERSION
    schema = json.loads((ROOT / "docs" / "pulumi-package-schema.json").read_text("utf-8"))
    assert schema["version"] == PYPROJECT_VERSION
    assert _yaml("policy/PulumiPolicy.yaml")["version"] == PYPROJECT_VERSION


def test_the_client_names_the_version_in_its_user_agent() -> None:
    assert f"local-path-storage-provisioner/{PYPROJECT_VERSION}" == DEFAULT_USER_AGENT


def test_production_runs_the_release_and_staging_it_or_a_candidate_of_it() -> None:
    prod = _yaml("stacks/Pulumi.prod.yaml")["config"]
    staging = _yaml("stacks/Pulumi.staging.yaml")["config"]
    assert isinstance(prod, dict)
    assert isinstance(staging, dict)
    assert prod["local-path-storage:image"] == naming.DEFAULT_IMAGE
    staged = staging["local-path-storage:image"]
    assert staged == naming.DEFAULT_IMAGE or staged.startswith(f"{naming.DEFAULT_IMAGE}-")


@pytest.mark.parametrize("document", DOCUMENTS)
def test_documents_name_the_current_tag(document: str) -> None:
    tags = IMAGE_TAG.findall((ROOT / document).read_text(encoding="utf-8"))
    assert [tag for tag in tags if tag != PYPROJECT_VERSION] == []


def test_the_document_scan_finds_tags() -> None:
    """The scan above is not vacuous: README spells the tag in its commands."""
    assert PYPROJECT_VERSION in IMAGE_TAG.findall((ROOT / "README.md").read_text("utf-8"))
    assert IMAGE_TAG.findall("docker://r/local-path-storage/provisioner:9.9.9-rc.1`,") == [
        "9.9.9-rc.1"
    ]


def test_the_newest_changelog_entry_is_this_version() -> None:
    """Keep a Changelog: `## [Unreleased]` on top, then `## [x.y.z] - YYYY-MM-DD`, newest first."""
    headings = re.findall(
        r"^## \[([^\]]+)\](.*)$", (ROOT / "CHANGELOG.md").read_text("utf-8"), re.M
    )
    releases = [(version, rest) for version, rest in headings if version != "Unreleased"]
    assert releases, "CHANGELOG.md has no release entry"
    newest, dated = releases[0]
    assert newest == PYPROJECT_VERSION
    assert re.fullmatch(r" - \d{4}-\d{2}-\d{2}", dated), dated


def test_version_flag_prints_the_version_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_options(["--version"], {})
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"local-path-storage-provisioner {PYPROJECT_VERSION}\n"


def test_python_m_provisioner_version() -> None:
    """The command a user types, in a process of its own."""
    result = subprocess.run(
        [sys.executable, "-m", "provisioner", "--version"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (
        0,
        f"local-path-storage-provisioner {PYPROJECT_VERSION}\n",
    ), result.stderr
