"""The demo: a real local cluster, a helper pod that makes a directory on a node, clean stop.

Why: it shows, in under a minute and with nothing but this repository, what the tests rely on:
a real control plane with fake nodes, and helper pods whose node paths land in that node's own
directory. It is a sequence of small steps so later work can slot the provisioner in between.

Run from the repository root: `python -m scripts.demo` (or `make demo`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from localcluster import (
    HELPER_POD_LABEL,
    HELPER_POD_LABEL_VALUE,
    ClusterError,
    ClusterOptions,
    LocalCluster,
)
from localcluster.raw_api import call_json

NAMESPACE = "demo"
HELPER_NODE_INDEX = 1
VOLUME_BASE = "/opt/local-path-provisioner"
VOLUME_DIR = f"{VOLUME_BASE}/pvc-demo_demo_data"


def step(title: str) -> None:
    print(f"\n== {title}", flush=True)


def start_cluster() -> LocalCluster:
    step("Starting the local cluster (etcd, kube-apiserver, controller-manager, scheduler, kwok)")
    cluster = LocalCluster.start(ClusterOptions(announce=False))
    print(f"cluster ready in {cluster.startup_seconds:.1f}s")
    print(f"kubeconfig: {cluster.kubeconfig}")
    return cluster


def show_nodes(cluster: LocalCluster) -> None:
    step("Nodes")
    for node in call_json(cluster.core_v1().list_node)["items"]:
        name = node["metadata"]["name"]
        ready = next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")
        print(f"  {name:<10} Ready={ready:<6} disk: {cluster.node_dir(name)}")


def run_helper_pod(cluster: LocalCluster, node: str) -> None:
    step(f"Running a helper pod on {node}: mkdir -p {VOLUME_DIR}")
    cluster.create_namespace(NAMESPACE)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "create-dir", "labels": {HELPER_POD_LABEL: HELPER_POD_LABEL_VALUE}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "helper",
                    "image": "busybox",
                    "command": [
                        "sh",
                        "-c",
                        'mkdir -m 0777 -p "$VOL_DIR" && echo "created $VOL_DIR"',
                    ],
                    "env": [{"name": "VOL_DIR", "value": VOLUME_DIR}],
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "volumeMounts": [{"name": "data", "mountPath": VOLUME_BASE}],
                }
            ],
            "volumes": [
                {"name": "data", "hostPath": {"path": VOLUME_BASE, "type": "DirectoryOrCreate"}}
            ],
        },
    }
    cluster.create_pod(NAMESPACE, pod)
    done = cluster.wait_for_pod_phase(NAMESPACE, "create-dir", ("Succeeded", "Failed"))
    terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
    print(f"  pod phase {done['status']['phase']}, exit code {terminated['exitCode']}")
    log = cluster.pod_log_path(NAMESPACE, "create-dir", done["metadata"]["uid"])
    print(f"  its output ({log}): {log.read_text().strip()}")
    if done["status"]["phase"] != "Succeeded":
        raise ClusterError(f"demo: the helper pod failed: {terminated.get('message', '')}")


def show_node_directory(cluster: LocalCluster, node: str) -> None:
    step("The directory on the nodes' disks")
    for name in cluster.nodes:
        path = cluster.node_dir(name) / VOLUME_DIR.lstrip("/")
        print(f"  {name:<10} {path}: {'present' if path.is_dir() else 'absent'}")
    if not (cluster.node_dir(node) / VOLUME_DIR.lstrip("/")).is_dir():
        raise ClusterError(f"demo: {VOLUME_DIR} did not appear on {node}")


def stop_cluster(cluster: LocalCluster) -> None:
    step("Stopping the cluster")
    directory: Path = cluster.dir
    cluster.stop()
    print(f"  stopped; {directory} removed: {not directory.exists()}")


def main() -> int:
    try:
        cluster = start_cluster()
    except ClusterError as error:
        print(error, file=sys.stderr)
        return 1
    try:
        show_nodes(cluster)
        node = cluster.nodes[HELPER_NODE_INDEX]
        run_helper_pod(cluster, node)
        show_node_directory(cluster, node)
    except ClusterError as error:
        print(error, file=sys.stderr)
        return 1
    finally:
        stop_cluster(cluster)
    return 0


if __name__ == "__main__":
    sys.exit(main())
