"""The product's one version: pyproject.toml's `[project] version`, as the installed
distribution records it. The image tag, the stack's default image, the Pulumi package's version,
the client's User-Agent and `--version` all read it from here, so a release changes one line."""

from __future__ import annotations

from importlib.metadata import version

DISTRIBUTION = "local-path-storage"
"""pyproject.toml's `[project] name`: the image, the Pulumi program and the package plugin
install it (requirements.txt, the image's wheel), so its metadata is always there."""

VERSION = version(DISTRIBUTION)
