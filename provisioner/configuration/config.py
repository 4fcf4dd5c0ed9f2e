"""The one config model: rancher's config.json, the setup/teardown scripts and helperPod.yaml.

The runtime and the Pulumi components both validate through this module, so a rule is
written once and a bad ConfigMap fails `pulumi preview` with the same one-line message the
provisioner would log. Every error names the key path and says what to write instead.

Where we are stricter than rancher, on purpose:
- Unknown keys are refused (rancher ignores them, so `nodePathMaps` silently drops the whole
  map). Keys still match case-insensitively, as Go's encoding/json does.
- Paths must be written normalised ("/a//b" is refused with "write /a/b"), because a path we
  compare, join and later delete under must mean exactly what it says.
- A top-level nodePathMap or sharedFileSystemPath next to storageClassConfigs is refused
  instead of ignored; a config that configures no storage at all is refused.
- cmdTimeoutSeconds must be positive (rancher silently turns 0 or less into 120).
- setupCommand/teardownCommand must be one executable: rancher runs them without a shell.
- Unknown StorageClass parameters and an unparsable allowUnsafePathPattern are refused.

Our addition: a base path may be an object `{"path": "/data", "capacity": "100Gi"}`, the most
the provisioner commits to that path (the sum of the capacities of the PVs it made there).
A plain string is a path without a budget, as in rancher. The object also says whether the
path may be made where it is missing (`create`) and whether a filesystem must be mounted
there (`mountPoint`): see BasePathRules. Unlike rancher, only rancher's default path is made
without being told.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# ConfigError is part of this module's interface (docs/CONTRACTS.md): re-exported.
from provisioner.configuration import defaults
from provisioner.configuration.config_error import ConfigError as ConfigError  # noqa: PLC0414
from provisioner.configuration.pod_template import parse_helper_template
from provisioner.objects.quantities import parse_size
from provisioner.provisioning.paths import (
    is_strictly_inside,
)

DEFAULT_NODE = "DEFAULT_PATH_FOR_NON_LISTED_NODES"
# The default scripts never follow a symbolic link: a tenant owns its volume's directory and
# can plant links in it, and the PV is a hostPath the kubelet resolves on the host. Setup makes
# the directory one component at a time, refusing any link on the way (`mkdir -p` would follow
# it), and both scripts refuse unless the real path of VOL_DIR (`pwd -P`) is VOL_DIR itself.
# VOL_PERM (0777 when the class sets no permPattern, as rancher), VOL_USER and VOL_GROUP are
# applied to the volume's directory.
DEFAULT_SETUP_SCRIPT = """\
#!/bin/sh
set -eu
refuse() { echo "refusing $VOL_DIR: $1" >&2; exit 1; }
case "$VOL_DIR" in /*) ;; *) refuse "not an absolute path" ;; esac
dir=""
rest="${VOL_DIR#/}"
while [ -n "$rest" ]; do
  part="${rest%%/*}"
  if [ "$part" = "$rest" ]; then rest=""; else rest="${rest#*/}"; fi
  dir="$dir/$part"
  if [ -L "$dir" ]; then refuse "$dir is a symbolic link"; fi
  if [ ! -d "$dir" ]; then mkdir "$dir" || [ -d "$dir" ] || refuse "cannot create $dir"; fi
done
cd "$VOL_DIR"
real="$(pwd -P)"
if [ "$real" != "$VOL_DIR" ]; then refuse "its real path is $real"; fi
chmod "${VOL_PERM:-0777}" .
if [ -n "${VOL_USER:-}${VOL_GROUP:-}" ]; then chown "${VOL_USER:-}${VOL_GROUP:+:$VOL_GROUP}" .; fi
"""
DEFAULT_TEARDOWN_SCRIPT = """\
#!/bin/sh
set -eu
refuse() { echo "refusing $VOL_DIR: $1" >&2; exit 1; }
case "$VOL_DIR" in /*) ;; *) refuse "not an absolute path" ;; esac
if [ -L "$VOL_DIR" ]; then refuse "it is a symbolic link"; fi
if ! cd "$VOL_DIR" 2>/dev/null; then
  if [ -e "$VOL_DIR" ]; then refuse "it is not a directory"; fi
  parent="$VOL_DIR"
  while parent="${parent%/*}"; [ -n "$parent" ]; do
    if [ -L "$parent" ]; then refuse "$parent is a symbolic link"; fi
  done
  exit 0
fi
real="$(pwd -P)"
if [ "$real" != "$VOL_DIR" ]; then refuse "its real path is $real"; fi
cd /
rm -rf "$VOL_DIR"
"""
DEFAULT_HELPER_POD_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: helper-pod
spec:
  priorityClassName: system-node-critical
  tolerations:
    - key: node.kubernetes.io/disk-pressure
      operator: Exists
      effect: NoSchedule
  containers:
  - name: helper-pod
    image: busybox:1.37.0
    imagePullPolicy: IfNotPresent
"""
DEFAULT_NODE_AFFINITY_KEY = "kubernetes.io/hostname"
_TOP_KEYS = (
    "nodePathMap",
    "sharedFileSystemPath",
    "storageClassConfigs",
    "setupCommand",
    "teardownCommand",
    "resizeCommand",
    "cmdTimeoutSeconds",
)
_CLASS_KEYS = ("nodePathMap", "sharedFileSystemPath")
_SHARED_KEY = "sharedFileSystemPath"
_ENTRY_KEYS = ("node", "paths")
_BASE_PATH_KEYS = ("path", "capacity", "create", "mountPoint")


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, populate_by_name=True)


class BasePath(_Strict):
    """A base path with a budget: `capacity` is a Kubernetes quantity (None: no budget)."""

    path: str
    capacity: str | None = None
    create: bool | None = None
    """Whether a helper may create the path when it is missing (see BasePathRules)."""
    mount_point: bool | None = Field(default=None, alias="mountPoint")
    """A filesystem must be mounted at the path, or no volume is made there."""

    @property
    def capacity_bytes(self) -> int | None:
        return None if self.capacity is None else parse_size(self.capacity, "capacity")

    @property
    def rules(self) -> BasePathRules:
        if self.mount_point:
            return BasePathRules(create=False, mount_point=True)
        if self.create is None:
            return rules_of_plain_path(self.path)
        return BasePathRules(create=self.create)


@dataclass(frozen=True, slots=True)
class BasePathRules:
    """What a base path must be on a node before a volume is made there.

    `create`: a missing base path may be made. Only rancher's default path is made unless
    config.json says `"create": true`: any other, missing, is refused instead of made on the
    root filesystem under a disk that is not mounted. `mount_point`: a filesystem must be
    mounted right there; such a path is never created.
    """

    create: bool
    mount_point: bool = False


RANCHER_DEFAULT_PATH = "/opt/local-path-provisioner"
SHARED_PATH_RULES = BasePathRules(create=True)


def rules_of_plain_path(path: str) -> BasePathRules:
    """A path without create/mountPoint: rancher's default path may be made where it is
    missing (so rancher's own config works out of the box), any other must exist."""
    return BasePathRules(create=path == RANCHER_DEFAULT_PATH)


class NodePathMapEntry(_Strict):
    node: str
    paths: list[str | BasePath] = Field(default_factory=list)
    """Each a path (no budget, as rancher) or a BasePath with its capacity."""

    @field_validator("paths", mode="before")
    @classmethod
    def _paths_or_objects(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value  # pydantic says "must be a list"
        return [_base_path_item(item, k) for k, item in enumerate(value)]

    @property
    def path_names(self) -> list[str]:
        return [path_of(item) for item in self.paths]

    def capacities(self) -> dict[str, int | None]:
        """Each base path's budget in bytes; None for a path without one."""
        return {
            path_of(item): item.capacity_bytes if isinstance(item, BasePath) else None
            for item in self.paths
        }


def path_of(item: str | BasePath) -> str:
    return item.path if isinstance(item, BasePath) else item


def _base_path_item(item: Any, index: int) -> Any:
    """A string stays a string (written back as one); an object becomes a checked BasePath."""
    where = f"[{index}]"
    if isinstance(item, (str, BasePath)):
        return item
    if not isinstance(item, dict):
        raise ConfigError(
            where,
            f"must be a string or an object such as"
            f' {{"path": "/data", "capacity": "100Gi"}} (got {json.dumps(item)[:60]})',
        )
    fields = _canonical_keys(item, _BASE_PATH_KEYS, where)
    if "path" not in fields:
        raise ConfigError(f"{where}.path", 'is required: the directory, such as "/data"')
    if not isinstance(fields["path"], str):
        raise ConfigError(f"{where}.path", f"must be a string (got {json.dumps(fields['path'])})")
    if "capacity" in fields:
        try:
            parse_size(fields["capacity"], "capacity")
        except ValueError as error:
            raise ConfigError(f"{where}.capacity", str(error).removeprefix("capacity: ")) from None
    for key in ("create", "mountPoint"):
        if key in fields and not isinstance(fields[key], bool):
            raise ConfigError(
                f"{where}.{key}", f"must be true or false (got {json.dumps(fields[key])[:60]})"
            )
    if fields.get("mountPoint") is True and fields.get("create") is True:
        raise ConfigError(
            f"{where}.create",
            "a mount point is never created (the disk is mounted there, or nothing is made):"
            " drop create, or mountPoint",
        )
    return BasePath(
        path=fields["path"],
        capacity=fields.get("capacity"),
        create=fields.get("create"),
        mount_point=fields.get("mountPoint"),
    )


class StorageClassConfig(_Strict):
    node_path_map: list[NodePathMapEntry] = Field(default_factory=list, alias="nodePathMap")
    shared_filesystem_path: str | None = Field(default=None, alias="sharedFileSystemPath")

    @field_validator("shared_filesystem_path", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value  # Go's omitempty: "" means not set

    @model_validator(mode="after")
    def _check(self) -> Self:
        _check_storage(self.node_path_map, self.shared_filesystem_path)
        if not self.node_path_map and self.shared_filesystem_path is None:
            raise ConfigError("", "set either nodePathMap or sharedFileSystemPath for this class")
        return self


class ProvisionerConfig(_Strict):
    node_path_map: list[NodePathMapEntry] = Field(default_factory=list, alias="nodePathMap")
    shared_filesystem_path: str | None = Field(default=None, alias="sharedFileSystemPath")
    storage_class_configs: dict[str, StorageClassConfig] = Field(
        default_factory=dict, alias="storageClassConfigs"
    )
    setup_command: str | None = Field(default=None, alias="setupCommand")
    teardown_command: str | None = Field(default=None, alias="teardownCommand")
    resize_command: str | None = Field(default=None, alias="resizeCommand")
    """Accepted because rancher's config.json may carry it; volumes are never expanded."""
    cmd_timeout_seconds: int = Field(
        default=defaults.CMD_TIMEOUT_SECONDS, alias="cmdTimeoutSeconds"
    )

    @field_validator(
        "shared_filesystem_path",
        "setup_command",
        "teardown_command",
        "resize_command",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    @model_validator(mode="after")
    def _check(self) -> Self:
        _check_storage(self.node_path_map, self.shared_filesystem_path)
        if self.storage_class_configs:
            for key, given in (
                ("nodePathMap", self.node_path_map),
                ("sharedFileSystemPath", self.shared_filesystem_path),
            ):
                if given:
                    raise ConfigError(
                        key,
                        "must be unset when storageClassConfigs is set (rancher"
                        " would ignore it): move it into storageClassConfigs",
                    )
            if "" in self.storage_class_configs:
                raise ConfigError('storageClassConfigs[""]', "a class name must not be empty")
        elif not self.node_path_map and self.shared_filesystem_path is None:
            raise ConfigError(
                "config.json",
                "no storage configured: set nodePathMap, sharedFileSystemPath"
                " or storageClassConfigs",
            )
        base_paths = self._base_paths_with_keys()
        _check_nesting(base_paths)
        _check_shared_apart(base_paths)
        _check_rules_agree(self)
        if self.cmd_timeout_seconds <= 0:
            raise ConfigError(
                "cmdTimeoutSeconds",
                f"must be a positive number of seconds, got {self.cmd_timeout_seconds}",
            )
        for key, command in (
            ("setupCommand", self.setup_command),
            ("teardownCommand", self.teardown_command),
        ):
            if command is not None and (not command.strip() or any(c.isspace() for c in command)):
                raise ConfigError(
                    key,
                    f"{json.dumps(command)} must be the path of one executable"
                    " in the helper image, without arguments (it runs without a"
                    " shell)",
                )
        return self

    def _base_paths_with_keys(self) -> list[tuple[str, str]]:
        """(key path, base path) for every base path configured anywhere."""
        found: list[tuple[str, str]] = []
        storages = [
            (
                "",
                StorageClassConfig.model_construct(
                    node_path_map=self.node_path_map,
                    shared_filesystem_path=self.shared_filesystem_path,
                ),
            )
        ]
        storages += [
            (f"storageClassConfigs[{json.dumps(name)}].", storage)
            for name, storage in self.storage_class_configs.items()
        ]
        for prefix, storage in storages:
            for i, entry in enumerate(storage.node_path_map):
                for k, path in enumerate(entry.path_names):
                    found.append((f"{prefix}nodePathMap[{i}].paths[{k}]", path))
            if storage.shared_filesystem_path is not None:
                found.append((f"{prefix}sharedFileSystemPath", storage.shared_filesystem_path))
        return found

    def storage_for(self, class_name: str) -> StorageClassConfig | None:
        """The storage config serving class_name; None when storageClassConfigs omits it."""
        if self.storage_class_configs:
            return self.storage_class_configs.get(class_name)
        return StorageClassConfig.model_construct(
            node_path_map=self.node_path_map, shared_filesystem_path=self.shared_filesystem_path
        )

    def paths_for(self, class_name: str, node: str) -> list[str] | None:
        """Base paths for a volume of the class on the node; None = the node is not served.

        A shared filesystem serves every node with its one path.
        """
        storage = self.storage_for(class_name)
        if storage is None:
            return None
        if storage.shared_filesystem_path is not None:
            return [storage.shared_filesystem_path]
        entry = self._entry_for(storage, node)
        return entry.path_names if entry is not None and entry.paths else None

    def capacities_for(self, class_name: str, node: str) -> dict[str, int | None]:
        """Budget in bytes of each base path serving the class on the node (None: no budget).
        A shared filesystem path has no budget."""
        storage = self.storage_for(class_name)
        entry = None if storage is None else self._entry_for(storage, node)
        return {} if entry is None else entry.capacities()

    @staticmethod
    def _entry_for(storage: StorageClassConfig, node: str) -> NodePathMapEntry | None:
        entries = {entry.node: entry for entry in storage.node_path_map}
        return entries.get(node, entries.get(DEFAULT_NODE))

    def declares_capacity(self) -> bool:
        """Whether any base path, top level or per class, has a budget."""
        storages = [*self.storage_class_configs.values(), self.storage_for("")]
        return any(
            isinstance(item, BasePath) and item.capacity is not None
            for storage in storages
            if storage is not None
            for entry in storage.node_path_map
            for item in entry.paths
        )

    def base_path_rules(self, path: str) -> BasePathRules:
        """The rules of a base path, wherever it is listed (they agree: see `_check`). A
        sharedFileSystemPath, a plain string in rancher's config.json, may always be made."""
        return self._rules_by_path().get(path, SHARED_PATH_RULES)

    def _rules_by_path(self) -> dict[str, BasePathRules]:
        storages = [*self.storage_class_configs.values(), self.storage_for("")]
        return {
            path_of(item): item.rules if isinstance(item, BasePath) else rules_of_plain_path(item)
            for storage in storages
            if storage is not None
            for entry in storage.node_path_map
            for item in entry.paths
        }

    def shared_path_for(self, class_name: str) -> str | None:
        storage = self.storage_for(class_name)
        return None if storage is None else storage.shared_filesystem_path

    def all_base_paths(self) -> set[str]:
        storages = [*self.storage_class_configs.values(), self.storage_for("")]
        paths = {path for s in storages if s for e in s.node_path_map for path in e.path_names}
        return paths | {
            s.shared_filesystem_path for s in storages if s and s.shared_filesystem_path
        }

    def to_config_json(self) -> str:
        """config.json text in rancher's key spelling, for a ConfigMap."""
        return self.model_dump_json(by_alias=True, exclude_none=True, indent=2)


def _check_storage(entries: list[NodePathMapEntry], shared: str | None) -> None:
    seen_nodes: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if not entry.node:
            raise ConfigError(
                f"nodePathMap[{i}].node",
                f"must name a node, or {DEFAULT_NODE} for every node not listed",
            )
        if entry.node in seen_nodes:
            raise ConfigError(
                f"nodePathMap[{i}].node",
                f"duplicate node {json.dumps(entry.node)} (already at"
                f" nodePathMap[{seen_nodes[entry.node]}]): merge the two entries",
            )
        seen_nodes[entry.node] = i
        seen_paths: dict[str, int] = {}
        for k, path in enumerate(entry.path_names):
            check_base_path(path, f"nodePathMap[{i}].paths[{k}]")
            if path in seen_paths:
                raise ConfigError(
                    f"nodePathMap[{i}].paths[{k}]",
                    f"duplicate path {json.dumps(path)} for node {json.dumps(entry.node)}"
                    f" (already at paths[{seen_paths[path]}])",
                )
            seen_paths[path] = k
    if shared is not None:
        check_base_path(shared, "sharedFileSystemPath")
        if entries:
            raise ConfigError(
                "sharedFileSystemPath",
                "cannot be combined with a non-empty"
                " nodePathMap: use one of them and set nodePathMap to []",
            )


def _check_rules_agree(config: ProvisionerConfig) -> None:
    """One directory on a node is either created when missing or not, a mount point or not,
    whichever node entry or class lists it."""
    seen: dict[str, tuple[str, BasePathRules]] = {}
    storages = [("", config.storage_for(""))]
    storages += [
        (f"storageClassConfigs[{json.dumps(name)}].", storage)
        for name, storage in config.storage_class_configs.items()
    ]
    for prefix, storage in storages:
        for i, entry in enumerate(storage.node_path_map if storage is not None else ()):
            for k, item in enumerate(entry.paths):
                key = f"{prefix}nodePathMap[{i}].paths[{k}]"
                rules = item.rules if isinstance(item, BasePath) else rules_of_plain_path(item)
                first_key, first = seen.setdefault(path_of(item), (key, rules))
                if first != rules:
                    raise ConfigError(
                        key,
                        f"{json.dumps(path_of(item))} has other create/mountPoint settings"
                        f" than at {first_key}: give it the same ones everywhere",
                    )


def _check_nesting(base_paths: list[tuple[str, str]]) -> None:
    """No base path inside another, for any node or class: a volume of the outer one could be
    the inner one's whole base, and its teardown would delete every volume there."""
    for inner_key, inner in base_paths:
        for outer_key, outer in base_paths:
            if is_strictly_inside(inner, outer):
                raise ConfigError(
                    inner_key,
                    f"{json.dumps(inner)} lies inside the base path {json.dumps(outer)}"
                    f" ({outer_key}): a volume there could be this whole base path and its"
                    " teardown would remove every volume in it; use directories side by side",
                )


def _check_shared_apart(base_paths: list[tuple[str, str]]) -> None:
    """No directory is both a sharedFileSystemPath and a node path: to one class it is one
    directory every node sees, to the other a different one on each node, and neither would
    see the other's volumes at the same path when deciding what may be removed."""
    shared = {path: key for key, path in base_paths if key.endswith(_SHARED_KEY)}
    for key, path in base_paths:
        if not key.endswith(_SHARED_KEY) and path in shared:
            raise ConfigError(
                key,
                f"{json.dumps(path)} is also the sharedFileSystemPath at {shared[path]}: a"
                " directory is either a filesystem every node shares or a node's own, not both;"
                " give one of them another directory",
            )


def check_affinity_key_agrees(
    class_name: str,
    parameters: Mapping[str, str],
    earlier: Mapping[str, Mapping[str, str]],
    config: ProvisionerConfig,
) -> None:
    """Refuses a class whose nodeAffinityKey differs from an earlier class (name -> its
    parameters) that serves one of its node directories: every volume there must name its node
    through the same label."""
    key = parameters.get("nodeAffinityKey", DEFAULT_NODE_AFFINITY_KEY)
    directories = _node_directories(class_name, parameters, config)
    for other_name, other_parameters in earlier.items():
        other_key = other_parameters.get("nodeAffinityKey", DEFAULT_NODE_AFFINITY_KEY)
        shared = directories & _node_directories(other_name, other_parameters, config)
        if other_key != key and shared:
            raise ConfigError(
                "parameters.nodeAffinityKey",
                f"{json.dumps(key)} differs from {json.dumps(other_key)} of class"
                f" {json.dumps(other_name)}, which serves the same directory"
                f" {json.dumps(min(shared))}: one directory is served under one"
                " nodeAffinityKey; give the classes the same key, or another directory",
            )


def _node_directories(
    class_name: str, parameters: Mapping[str, str], config: ProvisionerConfig
) -> set[str]:
    """The node paths (on any node) the class's volumes may be made in."""
    storage = config.storage_for(class_name)
    if storage is None or storage.shared_filesystem_path is not None:
        return set()
    paths = {path for entry in storage.node_path_map for path in entry.path_names}
    node_path = parameters.get("nodePath")
    return paths & {node_path} if node_path is not None else paths


def check_base_path(path: str, key: str) -> None:
    shown = json.dumps(path)
    if not path:
        raise ConfigError(
            key, "must not be empty: give an absolute directory such as /opt/local-path-provisioner"
        )
    if "\x00" in path or "\n" in path or "\r" in path:
        raise ConfigError(key, f"{shown} must not contain a NUL or line break")
    if not path.startswith("/"):
        raise ConfigError(key, f"{shown} must be an absolute path")
    normal = "/" + posixpath.normpath(path).lstrip("/")
    if normal == "/":
        raise ConfigError(
            key,
            f"{shown} is the root directory, which can never hold volumes:"
            " choose a directory such as /opt/local-path-provisioner",
        )
    if normal != path:
        raise ConfigError(
            key, f"{shown} is not written in normalised form: write {json.dumps(normal)}"
        )


class _JSONObject(dict[str, Any]):
    """A JSON object remembering keys that occurred more than once (json.loads keeps the last)."""

    duplicates: list[str]


def _json_object(pairs: list[tuple[str, Any]]) -> _JSONObject:
    obj = _JSONObject()
    obj.duplicates = [key for key, _ in pairs if sum(1 for k, _ in pairs if k == key) > 1]
    obj.update(pairs)
    return obj


def _canonical_keys(value: Any, known: tuple[str, ...], where: str) -> Any:
    """Go's encoding/json: keys match case-insensitively, null leaves the default."""
    if not isinstance(value, dict):
        return value
    if duplicates := getattr(value, "duplicates", None):
        raise ConfigError(_join(where, duplicates[0]), "is given more than once: keep one")
    by_fold = {key.casefold(): key for key in known}
    result: dict[str, Any] = {}
    for key, item in value.items():
        canonical = by_fold.get(key.casefold())
        if canonical is None:
            raise ConfigError(
                _join(where, key), f"unknown key (expected one of: {', '.join(known)})"
            )
        if canonical in result:
            raise ConfigError(
                _join(where, key),
                f"is {canonical} given a second time (keys match case-insensitively): keep one",
            )
        if item is not None:
            result[canonical] = item
    if isinstance(result.get("nodePathMap"), list):
        prefix = _join(where, "nodePathMap")
        result["nodePathMap"] = [
            _canonical_keys(e, _ENTRY_KEYS, f"{prefix}[{i}]")
            for i, e in enumerate(result["nodePathMap"])
        ]
    if isinstance(classes := result.get("storageClassConfigs"), dict):
        if duplicates := getattr(classes, "duplicates", None):
            key = _join(where, "storageClassConfigs", duplicates[0])
            raise ConfigError(key, "is given more than once: keep one")
        result["storageClassConfigs"] = {
            name: _canonical_keys(c, _CLASS_KEYS, _join(where, "storageClassConfigs", name))
            for name, c in result["storageClassConfigs"].items()
        }
    return result


def _join(*parts: str | int) -> str:
    text = ""
    for i, part in enumerate(parts):
        if isinstance(part, int):
            text += f"[{part}]"
        elif i > 0 and parts[i - 1] == "storageClassConfigs":
            text += f"[{json.dumps(part)}]"
        elif part.startswith("["):
            text += part
        elif part:
            text += f".{part}" if text else part
    return text


_TYPE_MESSAGES = {
    "string_type": "must be a string",
    "list_type": "must be a list",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "missing": "is required",
    "extra_forbidden": "unknown key",
}


def _config_error(error: ValidationError) -> ConfigError:
    first = error.errors()[0]
    where = _join(*first["loc"])
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):
        return ConfigError(_join(where, cause.key_path) if where else cause.key_path, cause.message)
    message = _TYPE_MESSAGES.get(first["type"], first["msg"])
    if first["type"] not in ("missing", "extra_forbidden"):
        message += f" (got {json.dumps(first['input'])[:60]})"
    return ConfigError(where, message)


def parse_config_json(text: str) -> ProvisionerConfig:
    try:
        data = json.loads(text, object_pairs_hook=_json_object)
    except json.JSONDecodeError as error:
        raise ConfigError(
            "config.json",
            f"is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}",
        ) from None
    if not isinstance(data, dict):
        raise ConfigError("config.json", 'must be a JSON object such as {"nodePathMap": [...]}')
    try:
        return ProvisionerConfig.model_validate(_canonical_keys(data, _TOP_KEYS, ""))
    except ValidationError as error:
        raise _config_error(error) from None


MAX_ARG_STRLEN = 128 * 1024
"""The kernel's limit on one argument or environment string (`NAME=value` with its NUL) that
execve takes: a helper container given a longer one never starts (E2BIG)."""
MAX_SCRIPT_BYTES = MAX_ARG_STRLEN - len("LPS_SCRIPT=\0")
"""The largest setup or teardown script: a helper container gets the script in one environment
string, `LPS_SCRIPT=<script>`, so a larger script's pod would never start. A batch pod's
annotations (256 KiB in all) carry one such script beside the provisioner's own."""


@dataclass(frozen=True)
class ConfigBundle:
    """Everything the ConfigMap holds, validated together."""

    config: ProvisionerConfig
    setup_script: str
    teardown_script: str
    helper_pod_template: dict[str, Any]


def load_config_bundle(
    config_json: str,
    setup_script: str,
    teardown_script: str,
    helper_pod_yaml: str,
    *,
    allow_unsafe_helper_template: bool = False,
) -> ConfigBundle:
    """The ConfigMap's four files, validated together: config.json first, then the rest."""
    return complete_bundle(
        parse_config_json(config_json),
        setup_script,
        teardown_script,
        helper_pod_yaml,
        allow_unsafe_helper_template=allow_unsafe_helper_template,
    )


def complete_bundle(
    config: ProvisionerConfig,
    setup_script: str,
    teardown_script: str,
    helper_pod_yaml: str,
    *,
    allow_unsafe_helper_template: bool = False,
) -> ConfigBundle:
    """The scripts and helperPod.yaml, validated against a config.json parsed already: a reader
    that holds the parsed config (the stack's settings, the policy pack) does not parse it again.
    """
    for key, script, command in (
        ("setup", setup_script, config.setup_command),
        ("teardown", teardown_script, config.teardown_command),
    ):
        if command is None and not script.strip():
            raise ConfigError(
                key,
                f"the {key} script is empty and config.json sets no {key}Command: give one of them",
            )
        size = len(script.encode())
        if command is None and size > MAX_SCRIPT_BYTES:
            raise ConfigError(
                key,
                f"the {key} script is {size} bytes, over the {MAX_SCRIPT_BYTES} a helper pod can"
                " carry (one environment variable of at most 128 KiB): move its logic into the"
                f" helper image and call it with {key}Command",
            )
    template = parse_helper_template(helper_pod_yaml, allow_unsafe=allow_unsafe_helper_template)
    return ConfigBundle(config, setup_script, teardown_script, template)


def load_config_directory(
    path: str | Path,
    *,
    allow_unsafe_helper_template: bool = False,
    config_file: Path | None = None,
    helper_pod_file: Path | None = None,
) -> ConfigBundle:
    """Reads config.json, setup, teardown and helperPod.yaml from a mounted ConfigMap;
    `config_file` and `helper_pod_file` replace the first and last (rancher's --config and
    --helper-pod-file)."""
    directory = Path(path)
    files = {
        "config.json": config_file or directory / "config.json",
        "setup": directory / "setup",
        "teardown": directory / "teardown",
        "helperPod.yaml": helper_pod_file or directory / "helperPod.yaml",
    }
    texts: dict[str, str] = {}
    for name, file in files.items():
        try:
            texts[name] = file.read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(
                name, f"cannot read {file}: {error.strerror}; the ConfigMap needs the key {name}"
            ) from None
    return load_config_bundle(
        texts["config.json"],
        texts["setup"],
        texts["teardown"],
        texts["helperPod.yaml"],
        allow_unsafe_helper_template=allow_unsafe_helper_template,
    )
