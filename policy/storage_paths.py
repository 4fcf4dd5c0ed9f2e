"""Where volumes may live: never `/`, a system directory or the container runtime's and
kubelet's state, and always an absolute path without `..`.

The program's validation (provisioner.core.config) already refuses relative, unnormalised and root
paths; it accepts any other absolute path, because only the operator knows the machines. This
policy adds the one rule that is the same on every Linux node: a volume's teardown removes its
directory, so a base path under /var/lib/kubelet or /etc hands tenants the node itself.
The list is the pack's config (`systemPaths`), so a site can add its own.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from policy.resources import STORAGE_CLASS, Resource, config_map_files

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


def _lower_keys(value: Any) -> dict[str, Any]:
    """config.json keys match case-insensitively, as Go's encoding/json (and the runtime) do."""
    return (
        {str(key).lower(): item for key, item in value.items()} if isinstance(value, dict) else {}
    )


def _path_entry(entry: Any, key: str) -> tuple[str, str] | None:
    """A `paths` entry is a path, or an object `{"path": ..., "capacity": ...}` whose `path`
    is checked the same way (a budget does not make a system directory safe)."""
    if isinstance(entry, str):
        return key, entry
    path = _lower_keys(entry).get("path")
    return (f"{key}.path", path) if isinstance(path, str) else None


def config_json_paths(document: Any, where: str = "config.json") -> Iterator[tuple[str, str]]:
    """(key path, base path) of every nodePathMap path and sharedFileSystemPath, top level
    and per class."""
    keys = _lower_keys(document)
    for index, entry in enumerate(keys.get("nodepathmap") or ()):
        for position, path in enumerate(_lower_keys(entry).get("paths") or ()):
            found = _path_entry(path, f"{where}.nodePathMap[{index}].paths[{position}]")
            if found is not None:
                yield found
    shared = keys.get("sharedfilesystempath")
    if isinstance(shared, str) and shared:
        yield f"{where}.sharedFileSystemPath", shared
    classes = keys.get("storageclassconfigs")
    for name, config in classes.items() if isinstance(classes, dict) else ():
        yield from config_json_paths(config, f"{where}.storageClassConfigs.{name}")


def check_resource(
    resource: Resource, system_paths: Sequence[str] = DEFAULT_SYSTEM_PATHS
) -> list[str]:
    """One message per unsafe base path in a provisioner ConfigMap or a StorageClass."""
    found: list[tuple[str, str]] = []
    files = config_map_files(resource)
    if files is not None:
        try:
            document = json.loads(files["config.json"])
        except json.JSONDecodeError:
            document = None  # provisioner-config-valid reports it, with the runtime's words
        found = list(config_json_paths(document))
        where = f"ConfigMap {resource.name}"
    elif resource.type == STORAGE_CLASS:
        parameters: Mapping[str, Any] = resource.props.get("parameters") or {}
        node_path = parameters.get("nodePath")
        if isinstance(node_path, str) and node_path:
            found = [("parameters.nodePath", node_path)]
        where = f"StorageClass {resource.name}"
    messages = []
    for key, path in found:
        problem = path_problem(path, system_paths)
        if problem is not None:
            messages.append(f"{where} {key}: {problem}")
    return messages
