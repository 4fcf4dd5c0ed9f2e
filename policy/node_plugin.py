"""The CSI node plugin runs privileged on every node: two policies keep it as narrow as the
program builds it (components/node_plugin.py), whatever a transformation or another program
does to it.

- `least-privilege-node-plugin`: the node plugin's ClusterRole (named `<namespace>:node-plugin`)
  grants nothing beyond reading, watching and patching PVs and VolumeSnapshotContents (and the
  contents' status) and writing events. Its patches are narrowed further, to its own node's
  PVs and contents, by the stack's ValidatingAdmissionPolicy.
- `node-plugin-host-mounts`: a workload that runs the node plugin (`local-path-storage-provisioner
  csi-node-plugin`, or `python -m provisioner.csi`) mounts from the host only the kubelet's
  directory (its `--kubelet-root`, and below it) and the base paths of the stack's config.json
  (a base path that must exist: its parent, where the disk shows up once mounted); never `/`,
  and it shares no host namespace (network, PID, IPC).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from policy.resources import (
    CLUSTER_ROLE,
    WORKLOADS,
    KubeObject,
    Resource,
    check_objects,
    config_map_files,
    kube_objects,
    parsed_config_json,
    pod_spec,
)
from provisioner.configuration.config import ProvisionerConfig

RBAC_NAME = "least-privilege-node-plugin"
MOUNTS_NAME = "node-plugin-host-mounts"
ROLE_SUFFIX = ":node-plugin"
NODE_PLUGIN_MODULE = "provisioner.csi"
NODE_PLUGIN_COMMAND = "csi-node-plugin"
"""The image's entrypoint's subcommand that runs the node plugin (the stack's form)."""
ALLOWED_RIGHTS: Mapping[tuple[str, str], frozenset[str]] = {
    ("", "persistentvolumes"): frozenset({"get", "list", "watch", "patch"}),
    ("", "events"): frozenset({"create", "patch"}),
    ("snapshot.storage.k8s.io", "volumesnapshotcontents"): frozenset(
        {"get", "list", "watch", "patch"}
    ),
    ("snapshot.storage.k8s.io", "volumesnapshotcontents/status"): frozenset({"patch"}),
}
"""(API group, resource) -> the verbs the node plugin may have: components/node_plugin.py's
RULES (a test holds the two equal)."""
_HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")


def check_role(resource: Resource) -> list[str]:
    return check_objects(resource, {CLUSTER_ROLE: _role_problems})


def _role_problems(role: KubeObject) -> list[str]:
    if not role.name.endswith(ROLE_SUFFIX):
        return []
    messages = []
    for index, rule in enumerate(role.props.get("rules") or ()):
        groups = [str(group) for group in rule.get("apiGroups") or ()]
        resources = [str(name) for name in rule.get("resources") or ()]
        verbs = {str(verb) for verb in rule.get("verbs") or ()}
        if rule.get("nonResourceURLs") or rule.get("resourceNames"):
            messages.append(
                f"{role.label} rules[{index}]: the node plugin needs no nonResourceURLs or"
                " resourceNames rules; grant only what components/node_plugin.py lists"
            )
        for group in groups:
            for name in resources:
                extra = verbs - ALLOWED_RIGHTS.get((group, name), frozenset())
                if extra:
                    messages.append(
                        f"{role.label} rules[{index}] grants {sorted(extra)} on"
                        f" {name or '(none)'} of group {group or 'core'!r}: the node plugin may"
                        " only get/list/watch/patch persistentvolumes and volumesnapshotcontents,"
                        " patch volumesnapshotcontents/status and create/patch events;"
                        " grant only what components/node_plugin.py lists"
                    )
    return messages


def check_stack(resources: Sequence[Resource]) -> list[tuple[str, str]]:
    """(message, urn) for each host mount or host namespace of a node plugin workload beyond
    the kubelet's directory and the stack's base paths."""
    configs = [config for resource in resources for config in _configs(resource)]
    found = []
    for resource in resources:
        for workload in kube_objects(resource):
            if workload.kind in WORKLOADS:
                found += [
                    (message, workload.urn) for message in _workload_problems(workload, configs)
                ]
    return found


def _configs(resource: Resource) -> Iterator[ProvisionerConfig]:
    for found in kube_objects(resource):
        files = config_map_files(found)
        if files is not None and "config.json" in files:
            config = parsed_config_json(files["config.json"])
            if isinstance(config, ProvisionerConfig):
                yield config


def allowed_directories(configs: Sequence[ProvisionerConfig]) -> set[str]:
    """Every base path of the configs, or its parent when it must exist (not `/`)."""
    allowed = set()
    for config in configs:
        for path in config.all_base_paths():
            rules = config.base_path_rules(path)
            allowed.add(path)
            if not rules.create or rules.mount_point:
                allowed.add(posixpath.dirname(path))
    return allowed - {"/"}


def _workload_problems(workload: KubeObject, configs: Sequence[ProvisionerConfig]) -> list[str]:
    spec = pod_spec(workload)
    if spec is None:
        return []
    plugins = [c for c in spec.get("containers") or () if _runs_node_plugin(c)]
    if not plugins:
        return []
    messages = [
        f"{workload.label} runs the node plugin with {field}: it needs no host namespace;"
        f" remove {field}"
        for field in _HOST_NAMESPACES
        if spec.get(field) is True
    ]
    kubelet_roots = {root for c in plugins if (root := _kubelet_root(c))}
    base = allowed_directories(configs)
    for volume in spec.get("volumes") or ():
        host_path = (
            (volume.get("hostPath") or {}).get("path") if isinstance(volume, Mapping) else None
        )
        if not isinstance(host_path, str):
            continue
        normal = posixpath.normpath(host_path)
        under_kubelet = any(
            normal == root or normal.startswith(root + "/") for root in kubelet_roots
        )
        if normal != "/" and (under_kubelet or normal in base):
            continue
        messages.append(
            f"{workload.label} runs the node plugin and mounts the host's {host_path}"
            f" (volume {volume.get('name')}): it may mount only the kubelet's directory"
            f" ({', '.join(sorted(kubelet_roots)) or 'no --kubelet-root given'}) and the base"
            " paths of the stack's config.json; remove the volume, or add the path to nodePathMap"
        )
    return messages


def _runs_node_plugin(container: Any) -> bool:
    if not isinstance(container, Mapping):
        return False
    words = [str(word) for word in (container.get("command") or ())]
    arguments = [str(word) for word in (container.get("args") or ())]
    return (
        NODE_PLUGIN_COMMAND in words[1:2] + arguments[:1]
        or any(
            word == "-m" and words[index + 1 : index + 2] == [NODE_PLUGIN_MODULE]
            for index, word in enumerate(words)
        )
        or f"-m{NODE_PLUGIN_MODULE}" in words
    )


def _kubelet_root(container: Mapping[str, Any]) -> str | None:
    """The container's --kubelet-root (`--kubelet-root=X` or `--kubelet-root X`), else its
    KUBELET_ROOT env value; normalised; None when neither is given."""
    words = [str(word) for word in (container.get("args") or ())]
    for index, word in enumerate(words):
        if word.startswith("--kubelet-root="):
            return _absolute(word.partition("=")[2])
        if word == "--kubelet-root" and index + 1 < len(words):
            return _absolute(words[index + 1])
    for variable in container.get("env") or ():
        if isinstance(variable, Mapping) and variable.get("name") == "KUBELET_ROOT":
            return _absolute(str(variable.get("value") or ""))
    return None


def _absolute(path: str) -> str | None:
    normal = posixpath.normpath(path) if path else ""
    return normal if normal.startswith("/") and normal != "/" else None
