"""docs/gitops.md's render recipe works as printed, from a fresh clone: a git clone of this
repository with a new backend that holds no stack at all (the `prod` stack was never made
there), a fresh home directory, no cluster credentials. The block renders the prod stack's
manifests into deploy/prod and commits them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from scripts.pulumi_engine import ROOT, PulumiEngine
from tests.engine.shell_recipes import marked_blocks, run_shell
from tests.engine.support import shipped_stack_config

MARKER = "<!-- The block below is run verbatim by tests/engine/test_gitops_recipe.py. -->"


def gitops_render_block() -> str:
    (block,) = marked_blocks(ROOT / "docs" / "gitops.md", MARKER)
    return block


def git(checkout: Path, *arguments: str) -> str:
    return subprocess.run(
        ["git", *arguments], cwd=checkout, capture_output=True, text=True, check=True
    ).stdout


def fresh_clone(destination: Path) -> Path:
    """A clone of this repository's committed state plus the working tree's tracked files
    (so the test runs the recipe of the change under test, as CI's clean clone does)."""
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(destination)], check=True
    )
    listed = git(ROOT, "ls-files", "-z")
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    return destination


def rendered_kinds(directory: Path) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(directory.rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if document:
                kinds.setdefault(document["kind"], []).append(document)
    return kinds


def test_the_render_recipe_runs_as_printed_from_a_fresh_clone(
    pulumi_engine: PulumiEngine, tmp_path: Path
) -> None:
    checkout = fresh_clone(tmp_path / "local-path-storage")
    # What `pulumi install` makes, as the page's pipeline runs it first: this test reuses the
    # harness's environment (it has the same pinned packages) instead of installing again.
    (checkout / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    home = tmp_path / "home"
    home.mkdir()
    keep = {key: os.environ[key] for key in ("PATH", "LANG", "TMPDIR") if key in os.environ}
    env = {
        **keep,
        **pulumi_engine.environment(
            state_dir=tmp_path / "backend",
            passphrase="gitops-test",
            temp_dir=tmp_path / "pulumi-tmp",
        ),
        "HOME": str(home),
        "GIT_AUTHOR_NAME": "ci",
        "GIT_AUTHOR_EMAIL": "ci@example.com",
        "GIT_COMMITTER_NAME": "ci",
        "GIT_COMMITTER_EMAIL": "ci@example.com",
    }
    assert not list((tmp_path / "backend").rglob("*.json")), "the backend starts with no stack"

    run_shell(gitops_render_block(), checkout, env)

    kinds = rendered_kinds(checkout / "deploy" / "prod")
    prod = shipped_stack_config("prod")
    assert [doc["metadata"]["name"] for doc in kinds["Namespace"]] == [
        prod.get("local-path-storage:namespace", "local-path-storage-system")
    ]
    assert kinds["Deployment"][0]["spec"]["replicas"] == prod["local-path-storage:replicas"]
    assert {doc["metadata"]["name"] for doc in kinds["StorageClass"]} == {
        entry["name"] for entry in prod["local-path-storage:storageClasses"]
    }
    assert git(checkout, "log", "-1", "--format=%s").strip() == "render prod"
    committed = git(checkout, "show", "--name-only", "--format=", "HEAD").split()
    assert committed, "the render commit holds the manifests"
    assert all(name.startswith("deploy/prod/1-manifest/") for name in committed), committed
