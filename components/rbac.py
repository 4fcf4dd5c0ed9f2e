"""The provisioner's Kubernetes rights, as plain data.

Least privilege, written where a reviewer can read it in one screen and a test can pin it:
cluster-wide, only what provisioning needs (claims, volumes, classes, nodes, events, and
reading its own CSIDriver); in its own namespace, only helper pods, the leader-election Lease,
the CSIStorageCapacity objects it publishes for the scheduler, and reading its namespace and
ReplicaSet. No secrets, and no `pods/log`: a failed helper's log tail arrives in its
termination message (`terminationMessagePolicy: FallbackToLogsOnError`, see docs/CONTRACTS.md).
Helper pods run under a separate service account that is bound to nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PolicyRule:
    """One RBAC rule: the verbs allowed on some resources of one API group."""

    api_group: str
    """API group; "" is the core group."""
    resources: tuple[str, ...]
    """Resource names (plural, lower case), e.g. ("persistentvolumeclaims",)."""
    verbs: tuple[str, ...]
    """Allowed verbs, e.g. ("get", "list", "watch")."""


# Every write is the narrowest verb the runtime sends (provisioner/provisioning/actions.py, kube/):
# claims and volumes are only ever patched, never replaced (no `update`). `get` beside list/watch
# reveals nothing that list does not.
CLUSTER_RULES: tuple[PolicyRule, ...] = (
    # Claims: watch them; patch an annotation (the chosen base path, or clearing the selected
    # node so the scheduler retries when that node has gone).
    PolicyRule("", ("persistentvolumeclaims",), ("get", "list", "watch", "patch")),
    # Expansion: a granted resize is recorded in the claim's status capacity.
    PolicyRule("", ("persistentvolumeclaims/status",), ("patch",)),
    # Volumes: create for claims, delete after teardown, patch for the finalizer.
    PolicyRule(
        "",
        ("persistentvolumes",),
        ("get", "list", "watch", "create", "delete", "patch"),
    ),
    PolicyRule("storage.k8s.io", ("storageclasses",), ("get", "list", "watch")),
    # Nodes: to know whether a selected node still exists, and its affinity label values.
    PolicyRule("", ("nodes",), ("get", "list", "watch")),
    PolicyRule("", ("events",), ("create", "patch")),
    # Capacity-aware scheduling: whether the CSIDriver that makes the scheduler read our
    # CSIStorageCapacity objects is deployed (the stack deploys it; the runtime never writes it).
    PolicyRule("storage.k8s.io", ("csidrivers",), ("get",)),
)
"""Cluster-wide rights of the provisioner's service account (a ClusterRole)."""


NODE_LOSS_RULES: tuple[PolicyRule, ...] = (
    # A class with nodeLossGracePeriod: the claim of a volume whose node has been gone that long
    # is deleted (by UID), so that its StatefulSet makes a new one elsewhere. Granted only when
    # a class sets the parameter.
    PolicyRule("", ("persistentvolumeclaims",), ("delete",)),
)
"""Cluster-wide rights added when a class releases claims for their node's loss."""


SNAPSHOT_RULES: tuple[PolicyRule, ...] = (
    # VolumeSnapshotContents of our driver, watched: admitted (label, setup), refused (status),
    # given the removal permit, and let go (the finalizer the csi-snapshotter sidecar would
    # take off); a restore reads a snapshot's bound content too.
    PolicyRule(
        "snapshot.storage.k8s.io",
        ("volumesnapshotcontents",),
        ("get", "list", "watch", "patch"),
    ),
    PolicyRule("snapshot.storage.k8s.io", ("volumesnapshotcontents/status",), ("patch",)),
    # Restoring a VolumeSnapshot into a claim of a CSI class: the snapshot is read on demand
    # when such a claim comes (restores are rare: no watch), and across namespaces the
    # ReferenceGrants of the snapshot's namespace are listed.
    PolicyRule("snapshot.storage.k8s.io", ("volumesnapshots",), ("get",)),
    PolicyRule("snapshot.storage.k8s.io", ("volumesnapshotclasses",), ("get", "list", "watch")),
    PolicyRule("gateway.networking.k8s.io", ("referencegrants",), ("list",)),
)
"""Cluster-wide rights added when a class is a CSI class (its node plugin makes and restores
snapshots; no other class's volumes can be snapshotted). Every snapshot right is here."""


NAMESPACE_RULES: tuple[PolicyRule, ...] = (
    # Helper pods: created, watched to completion and deleted by the provisioner. Their log
    # tail arrives in the termination message, so no pods/log.
    PolicyRule("", ("pods",), ("create", "get", "list", "watch", "delete")),
    # A helper pod that never starts its container is reported with why, which the kubelet
    # says only in Warning events on the pod (FailedMount: a base path that is missing).
    PolicyRule("", ("events",), ("list",)),
    # Leader election. Leases cannot be limited by name: `create` is never checked against
    # resourceNames. A standby watches its Lease to hear each renewal as it is written.
    PolicyRule("coordination.k8s.io", ("leases",), ("get", "list", "watch", "create", "update")),
    # On SIGTERM: is the installation being removed (its namespace terminating, or the pod's
    # ReplicaSet deleted with its Deployment)? Then it releases its PVs' finalizer. A Role's
    # `namespaces` rule reaches only its own namespace object.
    PolicyRule("", ("namespaces",), ("get",)),
    PolicyRule("apps", ("replicasets",), ("get",)),
    # Capacity-aware scheduling: one CSIStorageCapacity per node and class, kept current and
    # removed for nodes or classes that went away. The scheduler reads them from any
    # namespace, so ours is enough.
    PolicyRule(
        "storage.k8s.io",
        ("csistoragecapacities",),
        ("get", "list", "watch", "create", "update", "patch", "delete"),
    ),
)
"""Rights of the provisioner in its own namespace (a Role). No ConfigMap rule: the runtime reads
its config from the mounted volume, and kubelet (not the provisioner) mounts it into helper
pods."""
