"""The image table: which container images the harness runs for real, and from what.

Why: kwok only pretends to run pods, but the provisioner's own Deployment must really run (and
bind claims) for `pulumi up` to be tested end to end. No image is ever pulled: an entry is
either an image's unpacked root filesystem (`root`, with its config's environment, user and
entrypoint), which becomes the container's root under a writable layer of its own, or host
directories that stand in for an image, mounted read-only at their own paths in a root made of
the host's system directories. The entry `local-path-storage/provisioner` (any tag or digest)
is the provisioner's built image (image_root.py), so the Deployment runs the very artifact a
user pushes; `python_environment()` (the harness's own interpreter and this checkout) serves
tests that need a Python image with a shell, as an explicit extra entry.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROVISIONER_IMAGE_REPOSITORY = "local-path-storage/provisioner"
# The checkout holding this harness (and the provisioner it runs).
CHECKOUT = Path(__file__).resolve().parents[1]
_EDITABLE_MAPPING = re.compile(r"^MAPPING\s*(?::[^=]*)?=\s*(\{.*?\})\s*$", re.MULTILINE)


@dataclass(frozen=True)
class ImageRuntime:
    """What stands in for one image: its unpacked root filesystem (`root`) with its config's
    `env`, `user`, `group`, `entrypoint` and `working_dir`; or, when `root` is None, host
    directories mounted read-only at their own paths (`mounts`), the ones put first on the
    container's PATH (`path`) and on its PYTHONPATH (`python_path`)."""

    path: tuple[Path, ...] = ()
    mounts: tuple[Path, ...] = ()
    python_path: tuple[Path, ...] = ()
    root: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    user: int | None = None
    group: int | None = None
    entrypoint: tuple[str, ...] = ()
    working_dir: str = "/"


def editable_sources(prefix: Path) -> list[Path]:
    """The checkouts the environment's editable installs point at (the directory holding each
    mapped package), read from setuptools' editable finders and from path `.pth` files."""
    sources: list[Path] = []
    for site_packages in prefix.glob("lib/python*/site-packages"):
        for finder in site_packages.glob("__editable___*_finder.py"):
            match = _EDITABLE_MAPPING.search(finder.read_text(encoding="utf-8"))
            if match:
                mapping: dict[str, str] = ast.literal_eval(match.group(1))
                sources.extend(Path(package).parent for package in mapping.values())
        for pth in site_packages.glob("*.pth"):
            for line in pth.read_text(encoding="utf-8").splitlines():
                candidate = Path(line.strip())
                if line.strip() and not line.startswith(("#", "import")) and candidate.is_dir():
                    sources.append(candidate)
    return [source for source in sources if not source.is_relative_to(prefix)]


def outermost(paths: Iterable[Path]) -> tuple[Path, ...]:
    """The paths not inside another one of them (a mount of the outer one shows the inner)."""
    unique = sorted({path.resolve() for path in paths}, key=lambda path: (len(path.parts), path))
    kept: list[Path] = []
    for path in unique:
        if not any(path.is_relative_to(outer) for outer in kept):
            kept.append(path)
    return tuple(kept)


def python_environment(prefix: Path | None = None, base_prefix: Path | None = None) -> ImageRuntime:
    """The harness's own Python environment as an image: its virtualenv's bin first on PATH."""
    venv = prefix or Path(sys.prefix)
    base = base_prefix or Path(sys.base_prefix)
    # The venv's `python` is a symlink into the base installation: both must be visible.
    return ImageRuntime(
        path=(venv / "bin",),
        mounts=outermost([venv, base, CHECKOUT, *editable_sources(venv)]),
        python_path=(CHECKOUT,),
    )


def image_repository(image: str) -> str:
    """`registry:5000/a/b:tag@sha256:...` -> `registry:5000/a/b` (a `:` after the last `/`
    starts the tag; a registry's port comes before it)."""
    name = image.split("@", 1)[0]
    repository, colon, tag = name.rpartition(":")
    return repository if colon and "/" not in tag else name


class ImageTable:
    """Image repository -> runtime: the `provisioner` image (when given) under
    `local-path-storage/provisioner`, and the `extra` entries (which may replace it)."""

    def __init__(
        self,
        extra: Mapping[str, ImageRuntime] | None = None,
        provisioner: ImageRuntime | None = None,
    ) -> None:
        self.entries: dict[str, ImageRuntime] = {
            **({PROVISIONER_IMAGE_REPOSITORY: provisioner} if provisioner else {}),
            **(extra or {}),
        }

    @property
    def repositories(self) -> list[str]:
        return sorted(self.entries)

    def runtime_for(self, pod: Mapping[str, Any]) -> ImageRuntime | None:
        """The runtime of the pod's first container's image, None when it is not in the table."""
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        return self.entries.get(image_repository(str(containers[0].get("image", ""))))
