"""Ours with CSI volumes (`ours-csi`, real nodes only): a StorageClass with `volumeType: csi`,
whose claims' PVs the controller saves at once with a `csi` source and no helper pod; the
CSIDriver the kubelet needs for that driver; and a node plugin per real node
(`localcluster.csi_node_plugins`), which makes each volume's directory and mounts it for its
consumer.

Why a provisioner name of its own, and a short one: the driver's name comes from it
(`bench.io/csi` -> `csi.bench.io`), and the kubelet finds the plugin by a socket named for the
driver under its root directory, which lies deep in the cluster's directory; a unix socket's
path holds at most 107 bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localcluster import LocalCluster
from localcluster.csi_node_plugins import NodePlugins, node_plugin_plans
from provisioner.csi.driver_name import driver_name_for

CSI_PROVISIONER_NAME = "bench.io/csi"
CSI_CLASS_PARAMETERS = {"volumeType": "csi"}


def csi_driver(provisioner_name: str) -> dict[str, Any]:
    """The CSIDriver of the provisioner's driver: nothing to attach, the pod's details on
    mount, and the pod's fsGroup applied by the kubelet (a directory takes it as any)."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": driver_name_for(provisioner_name)},
        "spec": {
            "attachRequired": False,
            "podInfoOnMount": True,
            "fsGroupPolicy": "File",
            "volumeLifecycleModes": ["Persistent"],
        },
    }


def start_node_plugins(
    cluster: LocalCluster, provisioner_name: str, config_file: Path, log_dir: Path
) -> NodePlugins:
    """A registered node plugin on each of the cluster's real nodes, with the admin's
    credentials; the caller stops them."""
    if cluster.real is None:
        raise ValueError("CSI volumes run on real nodes only")
    plugins = NodePlugins(
        node_plugin_plans(
            cluster.real.nodes,
            provisioner_name=provisioner_name,
            config_file=config_file,
            kubeconfig=cluster.kubeconfig,
            log_dir=log_dir,
        )
    )
    try:
        plugins.wait_registered()
    except BaseException:
        plugins.stop()
        raise
    return plugins
