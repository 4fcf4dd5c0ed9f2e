"""An earlier version of the product, built as its own image from a commit of main.

The commit's tree is exported with `git archive` into the cache (never into the checkout) and
its own `scripts/build_image.py` builds it, so the image is what that version shipped, whatever
the recipe looks like today. The export gets a git index of its own because the recipe lists
the package's files with `git ls-files`. The build runs with a cache directory of its own: the
old recipe prunes its cache to its own count and must not prune the current checkout's images
(or another session's). Both the export and the image are cached by commit, so only the first
run pays for them (about 15 s).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

from localcluster.binaries import cache_root
from scripts import build_image

ROOT = Path(__file__).resolve().parents[2]


class PreviousVersionError(Exception):
    """The earlier version could not be exported or built; the message says which step."""


def _git(*arguments: str) -> bytes:
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), *arguments], check=True, capture_output=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        raise PreviousVersionError(
            f"git {' '.join(arguments)} failed in {ROOT} ({error}): the upgrade test needs a"
            " clone with main's history (not a shallow one)"
        ) from error


def _export(commit: str, tree: Path) -> None:
    """The commit's files in `tree`, with an index listing them (the recipe's `git ls-files`)."""
    partial = tree.with_name(f"{tree.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    archive = _git("archive", "--format=tar", commit)
    subprocess.run(["tar", "-x", "-C", str(partial)], input=archive, check=True)
    for arguments in (["init", "-q"], ["add", "-A"]):
        subprocess.run(["git", "-C", str(partial), *arguments], check=True, capture_output=True)
    partial.rename(tree)


def previous_image(commit: str) -> build_image.BuiltImage:
    """The image of `commit` (a full hash), built by that tree's own recipe, cached."""
    full = _git("rev-parse", "--verify", f"{commit}^{{commit}}").decode().strip()
    home = cache_root() / "previous-versions" / full[:12]
    home.mkdir(parents=True, exist_ok=True)
    with (home / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tree = home / "tree"
        if not tree.is_dir():
            _export(full, tree)
        environment = {
            **os.environ,
            "PYTHONPATH": str(tree),
            "LPS_CACHE_DIR": str(home / "cache"),
        }
        result = subprocess.run(
            [sys.executable, "-m", "scripts.build_image", "--path"],
            cwd=tree,
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        raise PreviousVersionError(
            f"the image of {full[:12]} did not build (python -m scripts.build_image in {tree}):"
            f" {result.stderr.strip()[-2000:]}"
        )
    return build_image.BuiltImage.load(Path(result.stdout.strip().splitlines()[-1]))
