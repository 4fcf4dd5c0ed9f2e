"""A real local Kubernetes control plane for tests, the demo and benchmarks.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as real processes built
from the pinned Go modules; kwok keeps N fake nodes Ready and ordinary pods Running; pods
labelled `local-path-storage.io/helper-pod: "true"` are run for real by the harness, with each
node's hostPath volumes mapped to a directory of its own, and pods whose image is in the image
table (by default `local-path-storage/provisioner`: the provisioner's built image, its root
filesystem unpacked) are run as a kubelet would run them. Nothing here is used by the runtime.

    with LocalCluster.start() as cluster:
        cluster.kubeconfig, cluster.nodes, cluster.node_dir("node-2"), cluster.core_v1()
"""

from localcluster.cluster import ClusterOptions, LocalCluster
from localcluster.cluster_access import ClusterAccess, wait_for
from localcluster.errors import (
    ClusterError,
    ComponentFailedError,
    MissingBinariesError,
    PortInUseError,
)
from localcluster.helper_pods import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE, NEVER_STARTS_IMAGE
from localcluster.image_pod_plan import RestartBackoff
from localcluster.image_table import PROVISIONER_IMAGE_REPOSITORY, ImageRuntime
from localcluster.nodes import NodeSpec, default_node_specs

__all__ = [
    "HELPER_POD_LABEL",
    "HELPER_POD_LABEL_VALUE",
    "NEVER_STARTS_IMAGE",
    "PROVISIONER_IMAGE_REPOSITORY",
    "ClusterAccess",
    "ClusterError",
    "ClusterOptions",
    "ComponentFailedError",
    "ImageRuntime",
    "LocalCluster",
    "MissingBinariesError",
    "NodeSpec",
    "PortInUseError",
    "RestartBackoff",
    "default_node_specs",
    "wait_for",
]
