"""Where volumes may live: never `/`, a system directory or the container runtime's and
kubelet's state, and always an absolute path without `..`.

The program's validation (provisioner.configuration.config) already refuses relative, unnormalised
and root paths; it accepts any other absolute path, because only the operator knows the machines.
This policy adds the one rule that is the same on every Linux node: a volume's teardown removes its
directory, so a base path under /var/lib/kubelet or /etc hands tenants the node itself.
The list is the pack's config (`systemPaths`), so a site can add its own.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from policy.resources import (
    CONFIG_MAP,
    STORAGE_CLASS,
    KubeObject,
    Resource,
    check_objects,
    config_map_files,
    parsed_config_json,
)
from provisioner.configuration.config import BasePath, ConfigError, NodePathMapEntry

NAME = "safe-storage-paths"
DEFAULT_SYSTEM_PATHS = (
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/usr",
    "/bin",
    "/sbin",
    "/lib*",
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/var/run",
    "/run",
)
_FIX = "choose a dedicated data directory such as /opt/local-path-provisioner or /mnt/<disk>"


def path_problem(path: str, system_paths: Sequence[str] = DEFAULT_SYSTEM_PATHS) -> str | None:
    """What is wrong with `path` as a base path, or None."""
    shown = json.dumps(path)
    if not path.startswith("/"):
        return f"{shown} is relative: give an absolute path; {_FIX}"
    if ".." in path.split("/"):
        return f"{shown} contains '..': write the directory it means, without '..'"
    normal = "/" + posixpath.normpath(path).lstrip("/")
    if normal == "/":
        return f"{shown} is the root directory: its teardown could remove anything; {_FIX}"
    parts = normal.split("/")
    ancestors = ["/".join(parts[: index + 1]) for index in range(1, len(parts))]
    for system in system_paths:
        if any(fnmatch.fnmatchcase(ancestor, system) for ancestor in ancestors):
            return (
                f"{shown} lies in the system directory {system}: volumes there can overwrite "
                f"or expose the node's own files; {_FIX}"
            )
    return None


def _entries_paths(entries: Sequence[NodePathMapEntry], where: str) -> Iterator[tuple[str, str]]:
    for index, entry in enumerate(entries):
        for position, item in enumerate(entry.paths):
            key = f"{where}.nodePathMap[{index}].paths[{position}]"
            yield (f"{key}.path", item.path) if isinstance(item, BasePath) else (key, item)


def config_json_paths(text: str) -> Iterator[tuple[str, str]]:
    """(key path, base path) of every nodePathMap path (a string or the `path` of an object:
    a budget does not make a system directory safe) and sharedFileSystemPath, top level and per
    class, as the runtime reads config.json (its parser: keys match as Go's encoding/json
    does, with a long s (U+017F) folding to s). A config.json it refuses has no
    paths here: provisioner-config-valid reports it."""
    config = parsed_config_json(text)
    if isinstance(config, ConfigError):
        return
    where = "config.json"
    yield from _entries_paths(config.node_path_map, where)
    if config.shared_filesystem_path is not None:
        yield f"{where}.sharedFileSystemPath", config.shared_filesystem_path
    for name, storage in config.storage_class_configs.items():
        yield from _entries_paths(storage.node_path_map, f"{where}.storageClassConfigs.{name}")
        if storage.shared_filesystem_path is not None:
            key = f"{where}.storageClassConfigs.{name}.sharedFileSystemPath"
            yield key, storage.shared_filesystem_path


def check_resource(
    resource: Resource, system_paths: Sequence[str] = DEFAULT_SYSTEM_PATHS
) -> list[str]:
    """One message per unsafe base path in a provisioner ConfigMap or a StorageClass."""

    def config_map(found: KubeObject) -> list[str]:
        files = config_map_files(found)
        text = files.get("config.json") if files is not None else None
        paths = config_json_paths(text) if text is not None else ()
        return _problems(found, paths, system_paths)

    def storage_class(found: KubeObject) -> list[str]:
        parameters: Mapping[str, Any] = found.props.get("parameters") or {}
        node_path = parameters.get("nodePath")
        paths = [("parameters.nodePath", node_path)] if isinstance(node_path, str) else []
        return _problems(found, [(key, path) for key, path in paths if path], system_paths)

    return check_objects(resource, {CONFIG_MAP: config_map, STORAGE_CLASS: storage_class})


def _problems(
    found: KubeObject, paths: Iterable[tuple[str, str]], system_paths: Sequence[str]
) -> list[str]:
    messages = []
    for key, path in paths:
        problem = path_problem(path, system_paths)
        if problem is not None:
            messages.append(f"{found.label} {key}: {problem}")
    return messages
