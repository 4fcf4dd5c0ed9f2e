"""The CSI node plugin's objects as plain data: its command line, host mounts, rights, the
admission policy that keeps each node's plugin to its own node's volumes, and the CSIDriver.

Pure (no Pulumi), so the rules are tested without the engine and the policy pack reads the
same decisions; node_plugin_resources.py registers them.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from components import naming
from components.args import NodePluginArgs, StorageClassArgs
from components.rbac import PolicyRule
from provisioner.configuration.config import ProvisionerConfig
from provisioner.csi.driver_name import driver_name_for
from provisioner.objects.node_handoff import NODE_LABEL
from provisioner.objects.snapshot_handoff import (
    BEING_CREATED_ANNOTATION,
    SNAPSHOT_GROUP,
    SNAPSHOT_REMOVED_ANNOTATION,
)

DAEMON_SET_NAME = "local-path-storage-node-plugin"
APP_NAME = "local-path-storage-node-plugin"
"""The node plugin pods' app.kubernetes.io/name (the provisioner's pods have their own)."""
SERVICE_ACCOUNT = "local-path-storage-node-plugin"
CONTAINER_NAME = "node-plugin"
SHELL_DIRECTORY = "/lps-shell"
"""Where the plugin finds the shell and tools its scripts run with (an emptyDir)."""
SHELL_COPY = (
    f'cp "$(readlink -f /proc/$$/exe)" {SHELL_DIRECTORY}/busybox'
    f" && {SHELL_DIRECTORY}/busybox --install -s {SHELL_DIRECTORY}"
)
"""The init container's script, in the helper image: the busybox its own shell is (busybox's
`command -v busybox` names the applet, not a file), and a link per applet."""
SOCKET_DIRECTORY = "/csi"
"""Where the plugin's own socket directory (<kubelet>/plugins/<driver>) is mounted: a short
path, whatever the kubelet's, so the socket's path stays within a unix socket's limit."""
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
"""The node a pod-bound service account token was issued for: the API server puts it in the
request's userInfo.extra (Kubernetes 1.30 and later), so it cannot be forged by the pod."""

RULES: tuple[PolicyRule, ...] = (
    # Its own node's CSI volumes, by a label-selected watch (provisioner/objects/node_handoff.py),
    # and a patch of one annotation when their directory is gone; the admission policy below
    # holds each plugin to its own node's PVs, which RBAC cannot express.
    PolicyRule("", ("persistentvolumes",), ("get", "list", "watch", "patch")),
    PolicyRule("", ("events",), ("create", "patch")),
    # Its own node's VolumeSnapshotContents, the same way (provisioner/objects/
    # snapshot_handoff.py): it takes a snapshot the controller admitted, reports it in the
    # status and lifts the annotations; the admission policy holds it to its node's contents
    # and to those annotations.
    PolicyRule(SNAPSHOT_GROUP, ("volumesnapshotcontents",), ("get", "list", "watch", "patch")),
    PolicyRule(SNAPSHOT_GROUP, ("volumesnapshotcontents/status",), ("patch",)),
)
"""Cluster-wide rights of the node plugin's service account: nothing else (no claims, no pods,
no nodes, no secrets)."""


def cluster_scoped_name(namespace: str) -> str:
    """The node plugin's ClusterRole and ClusterRoleBinding, one pair per installation."""
    return f"{namespace}:node-plugin"


def admission_policy_name(namespace: str) -> str:
    """The ValidatingAdmissionPolicy and its binding (cluster-scoped, per installation)."""
    return f"{namespace}.node-plugin-own-node-volumes"


def driver_name(provisioner_name: str) -> str:
    """The CSI driver's (and the CSIDriver object's) name, as the node plugin derives it."""
    return driver_name_for(provisioner_name)


def csi_classes(classes: Iterable[StorageClassArgs]) -> list[StorageClassArgs]:
    return [storage_class for storage_class in classes if storage_class.is_csi]


def plugin_directory(args: NodePluginArgs, provisioner_name: str) -> str:
    return f"{args.kubelet_directory}/plugins/{driver_name(provisioner_name)}"


def arguments(args: NodePluginArgs, provisioner_name: str) -> list[str]:
    """The plugin's command line (provisioner/csi/options.py); the node name comes from the
    NODE_NAME environment variable (downward API: spec.nodeName)."""
    return [
        f"--endpoint=unix://{SOCKET_DIRECTORY}/csi.sock",
        f"--provisioner-name={provisioner_name}",
        f"--config-file={naming.CONFIG_DIRECTORY}/config.json",
        # Registration happens in <kubelet>/plugins_registry, reached through the kubelet
        # directory's own mount (the same path in the container).
        f"--kubelet-root={args.kubelet_directory}",
        f"--kubelet-registration-path={plugin_directory(args, provisioner_name)}/csi.sock",
        f"--health-port={args.health_port}",
        # Makes and removes its node's CSI volumes' directories (no helper pod), watching only
        # its node's PVs, with the pod's service account (the ClusterRole and the admission
        # policy hold it to that node's PVs).
        "--manage-volumes",
        f"--shell-directory={SHELL_DIRECTORY}",
    ]


@dataclass(frozen=True)
class HostMount:
    """A host directory the plugin mounts (base paths and the kubelet's at the same path, as
    config.json and the kubelet name them)."""

    volume_name: str
    path: str
    mount_path: str
    type: str
    """The hostPath type: Directory, or DirectoryOrCreate."""
    propagation: str
    """Bidirectional (the kubelet's directory) or HostToContainer (base paths)."""


class NodePluginError(ValueError):
    """A CSI class's base path the node plugin cannot mount safely; the message says why."""


def base_path_mounts(config: ProvisionerConfig, classes: Iterable[StorageClassArgs]) -> list[str]:
    """The host directories holding the CSI classes' base paths, on any node (one DaemonSet
    serves every node, and the plugin reads its own node's paths from config.json).

    A path that may be made (`create`) is mounted itself, DirectoryOrCreate. A path that must
    exist (the default but for rancher's, or a `mountPoint`) is not: mounting it as Directory
    would keep the plugin off every node without it, and DirectoryOrCreate would make it on the
    root filesystem, which its rule forbids. Its parent is mounted instead, HostToContainer,
    so the disk mounted there later shows up in the container. Never `/`."""
    directories: set[str] = set()
    for storage_class in classes:
        storage = config.storage_for(storage_class.name)
        if storage is None:
            continue
        for entry in storage.node_path_map:
            for path in entry.path_names:
                rules = config.base_path_rules(path)
                directory = (
                    path if rules.create and not rules.mount_point else posixpath.dirname(path)
                )
                if directory == "/":
                    raise NodePluginError(
                        f"base path {path!r} of csi class {storage_class.name!r} must exist on"
                        " the node, so the node plugin would mount its parent, the root"
                        " directory: put it a level deeper (e.g. /mnt/disk1/local-path), or"
                        " give it create: true"
                    )
                directories.add(directory)
    return sorted(directories)


def host_mounts(
    args: NodePluginArgs, provisioner_name: str, base_directories: Iterable[str]
) -> list[HostMount]:
    mounts = [
        # The kubelet publishes a pod's volume at <kubelet>/pods/<uid>/volumes/...; the plugin's
        # bind mount there must reach the host's mount namespace, hence Bidirectional (which
        # Kubernetes allows only in a privileged container).
        HostMount(
            "kubelet-dir",
            args.kubelet_directory,
            args.kubelet_directory,
            "Directory",
            "Bidirectional",
        ),
        HostMount(
            "plugin-dir",
            plugin_directory(args, provisioner_name),
            SOCKET_DIRECTORY,
            "DirectoryOrCreate",
            "None",
        ),
    ]
    for index, directory in enumerate(base_directories):
        mounts.append(
            HostMount(
                f"base-path-{index}", directory, directory, "DirectoryOrCreate", "HostToContainer"
            )
        )
    return mounts


def allowed_host_paths(
    args: NodePluginArgs, provisioner_name: str, base_directories: Iterable[str]
) -> set[str]:
    """Every host path the DaemonSet mounts (what the policy pack lets it mount)."""
    return {
        args.kubelet_directory,
        plugin_directory(args, provisioner_name),
        *base_directories,
    }


def csi_driver_spec(storage_capacity: bool) -> dict[str, Any]:
    """The CSIDriver of the CSI classes (the SDK's snake_case): nothing to attach
    (a local directory), the pod's details on NodePublishVolume, fsGroup applied by the kubelet
    (rancher #7 and #41), persistent volumes only; storageCapacity as for the hostPath classes'
    CSIDriver (components/capacity_scheduling.py)."""
    return {
        "attach_required": False,
        "pod_info_on_mount": True,
        "fs_group_policy": "File",
        "volume_lifecycle_modes": ["Persistent"],
        "storage_capacity": storage_capacity,
    }


CSI_DRIVER_REPLACED_ON = (
    "spec.attachRequired",
    "spec.podInfoOnMount",
    "spec.volumeLifecycleModes",
    "spec.fsGroupPolicy",
)
"""CSIDriver fields the API server may refuse to update: a change replaces it."""


def service_account_username(namespace: str) -> str:
    return f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"


SNAPSHOT_CONTENT_ANNOTATIONS = (BEING_CREATED_ANNOTATION, SNAPSHOT_REMOVED_ANNOTATION)
"""The only annotations the node plugin may change on a VolumeSnapshotContent: it lifts the
common controller's being-created mark once the snapshot is taken, and marks the snapshot's
data removed (provisioner/objects/snapshot_handoff.py). The setup and the removal permit are
the controller's: a plugin that could write them would grant itself a removal."""


def admission_policy_spec(namespace: str) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1): the node plugin's account
    may update (a patch is an update to admission) only a PV or a VolumeSnapshotContent
    labelled with its own node, before and after, and may not change its spec: RBAC alone
    would let any node's plugin rewrite every PV and every content. On a content it may change
    no label, no finalizer and no annotation but SNAPSHOT_CONTENT_ANNOTATIONS; its status
    (the /status subresource) it may update, as the snapshot's taker must.

    The node comes from the token, not from the request: `userInfo.extra[NODE_NAME_EXTRA]`.
    The label holds `node_label_value(node)`, which is the node's name when it is a valid label
    value (63 characters at most); for a longer name it is a hash, which CEL cannot compute,
    so the policy refuses the plugin of such a node (its volumes' removal marks wait)."""
    label = f"object.metadata.labels[{_cel(NODE_LABEL)}]"
    old_label = f"oldObject.metadata.labels[{_cel(NODE_LABEL)}]"
    allowed = "[" + ", ".join(_cel(key) for key in SNAPSHOT_CONTENT_ANNOTATIONS) + "]"
    return {
        "failure_policy": "Fail",
        "match_constraints": {
            "resource_rules": [
                {
                    "api_groups": [""],
                    "api_versions": ["v1"],
                    "operations": ["UPDATE"],
                    "resources": ["persistentvolumes", "persistentvolumes/status"],
                },
                {
                    "api_groups": [SNAPSHOT_GROUP],
                    "api_versions": ["v1"],
                    "operations": ["UPDATE"],
                    "resources": ["volumesnapshotcontents", "volumesnapshotcontents/status"],
                },
            ]
        },
        "match_conditions": [
            {
                "name": "node-plugin",
                "expression": "request.userInfo.username == "
                + _cel(service_account_username(namespace)),
            }
        ],
        "variables": [
            {
                "name": "node",
                "expression": (
                    f"has(request.userInfo.extra) && {_cel(NODE_NAME_EXTRA)} in"
                    f" request.userInfo.extra ? request.userInfo.extra[{_cel(NODE_NAME_EXTRA)}][0]"
                    " : ''"
                ),
            },
            {
                "name": "content",
                "expression": "request.resource.resource == 'volumesnapshotcontents'",
            },
            {
                "name": "what",
                "expression": "variables.content ? 'VolumeSnapshotContents' : 'PVs'",
            },
            {
                "name": "annotations",
                "expression": (
                    "has(object.metadata.annotations) ? object.metadata.annotations : {}"
                ),
            },
            {
                "name": "oldAnnotations",
                "expression": (
                    "has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}"
                ),
            },
        ],
        "validations": [
            {
                "expression": "variables.node != ''",
                "message_expression": (
                    "'the node plugin updates ' + variables.what + ' only with a token bound to"
                    " its pod'"
                ),
            },
            {
                "expression": (
                    f"has(oldObject.metadata.labels) && {_cel(NODE_LABEL)} in"
                    f" oldObject.metadata.labels && {old_label} == variables.node"
                    f" && has(object.metadata.labels) && {_cel(NODE_LABEL)} in"
                    f" object.metadata.labels && {label} == variables.node"
                ),
                "message_expression": (
                    "'the node plugin of node ' + variables.node + ' may update only the '"
                    f" + variables.what + ' labelled {NODE_LABEL}=' + variables.node"
                ),
            },
            {
                "expression": "object.spec == oldObject.spec",
                "message_expression": (
                    "'the node plugin may change the annotations of ' + variables.what + ',"
                    " never their spec'"
                ),
            },
            {
                "expression": (
                    "!variables.content || ("
                    "(has(object.metadata.labels) ? object.metadata.labels : {})"
                    " == (has(oldObject.metadata.labels) ? oldObject.metadata.labels : {})"
                    " && (has(object.metadata.finalizers) ? object.metadata.finalizers : [])"
                    " == (has(oldObject.metadata.finalizers) ? oldObject.metadata.finalizers"
                    " : [])"
                    f" && variables.annotations.all(k, k in {allowed}"
                    " || (k in variables.oldAnnotations"
                    " && variables.oldAnnotations[k] == variables.annotations[k]))"
                    f" && variables.oldAnnotations.all(k, k in {allowed}"
                    " || k in variables.annotations))"
                ),
                "message": (
                    "the node plugin may change a VolumeSnapshotContent's annotations "
                    + " and ".join(SNAPSHOT_CONTENT_ANNOTATIONS)
                    + " and its status, no other annotation, label or finalizer"
                ),
            },
        ],
    }


def _cel(text: str) -> str:
    """A CEL string literal (the values here hold no quote or backslash)."""
    return "'" + text + "'"
