"""Which directories this node's plugin may publish: pure.

A request names its volume's directory in the volume context (VOLUME_PATH_KEY). That string is
checked here, lexically, before anything on disk is touched: absolute, already normal (no '.',
'..', '//' or trailing '/'), and strictly inside one of this node's base paths. The caller then
opens it component by component from the base path without following symlinks (mounts.py), so a
symlink planted inside a base path cannot lead the mount elsewhere.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from provisioner.configuration.config import BasePathRules, ProvisionerConfig
from provisioner.csi.csi_errors import CsiError
from provisioner.objects.node_handoff import VOLUME_PATH_KEY


@dataclass(frozen=True)
class VolumeDirectory:
    """A volume's directory: the base path it lies in and its components below it."""

    base_path: str
    parts: tuple[str, ...]

    @property
    def path(self) -> str:
        return posixpath.join(self.base_path, *self.parts)


def node_base_paths(config: ProvisionerConfig, node: str) -> dict[str, BasePathRules]:
    """Every base path config.json gives `node`, in any class, with its rules."""
    classes = list(config.storage_class_configs) or [""]
    paths = {path for name in classes for path in config.paths_for(name, node) or []}
    return {path: config.base_path_rules(path) for path in sorted(paths)}


def volume_directory(
    volume_context: Mapping[str, str], base_paths: Mapping[str, BasePathRules], node: str
) -> VolumeDirectory:
    """The directory the context names, or CsiError(INVALID_ARGUMENT) saying why not."""
    path = volume_context.get(VOLUME_PATH_KEY, "")
    if not path:
        raise CsiError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"volume context has no {VOLUME_PATH_KEY}: the PV's spec.csi.volumeAttributes must"
            " name the volume's directory (the provisioner writes it)",
        )
    if not is_normal_absolute(path):
        raise CsiError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"volume directory {path!r} ({VOLUME_PATH_KEY}) must be an absolute path without"
            " '.', '..', '//' or a trailing '/'",
        )
    for base_path in base_paths:
        parts = parts_below(base_path, path)
        if parts:
            return VolumeDirectory(base_path, parts)
    listed = ", ".join(base_paths) or "(none)"
    raise CsiError(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"volume directory {path} is not inside a base path of node {node} ({listed}):"
        " only directories config.json's nodePathMap gives this node are published",
    )


def is_normal_absolute(path: str) -> bool:
    return path.startswith("/") and "\0" not in path and posixpath.normpath(path) == path


def parts_below(base_path: str, path: str) -> tuple[str, ...]:
    """The components of `path` strictly below `base_path`; () when it is not below it."""
    base = base_path.rstrip("/") or "/"
    prefix = base if base == "/" else base + "/"
    if not path.startswith(prefix) or path == base:
        return ()
    return tuple(part for part in path[len(prefix) :].split("/") if part)
