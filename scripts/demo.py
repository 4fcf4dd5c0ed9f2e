"""The demo: a real local cluster, the provisioner, a claim bound for a pod, its directory on
the pod's node, and the release that removes it again; then a clean stop.

Why: it shows, in under a minute and with nothing but this repository, the whole product path:
a real control plane with fake nodes, the provisioner as a process watching it, helper pods
whose node paths land in that node's own directory. Each step is a small function.

Run from the repository root: `python -m scripts.demo` (or `make demo`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from localcluster import ClusterError, ClusterOptions, LocalCluster, wait_for
from localcluster.ports import pick_free_ports
from localcluster.raw_api import call_json, manifest

NAMESPACE = "local-path-storage"
PROVISIONER = "local-path-storage.io/local-path"
CONFIGMAP = "local-path-config"
HELPER_ACCOUNT = "local-path-storage-helper"
STORAGE_CLASS = "local-path"
BASE_PATH = "/opt/local-path-provisioner"
CONFIG = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [BASE_PATH]}]}
SETUP = '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n'
TEARDOWN = '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n'
HELPER_POD = """apiVersion: v1
kind: Pod
metadata:
  name: helper-pod
spec:
  containers:
  - name: helper-pod
    image: busybox
    imagePullPolicy: IfNotPresent
"""
T = TypeVar("T")


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


def deploy_provisioner(cluster: LocalCluster, work_dir: Path) -> subprocess.Popen[bytes]:
    step("Deploying the provisioner: namespace, helper account, ConfigMap, class, process")
    core = cluster.core_v1()
    cluster.create_namespace(NAMESPACE)
    core.create_namespaced_service_account(
        NAMESPACE,
        manifest({"metadata": {"name": HELPER_ACCOUNT}, "automountServiceAccountToken": False}),
    )
    files = {
        "config.json": json.dumps(CONFIG),
        "setup": SETUP,
        "teardown": TEARDOWN,
        "helperPod.yaml": HELPER_POD,
    }
    core.create_namespaced_config_map(
        NAMESPACE, manifest({"metadata": {"name": CONFIGMAP}, "data": files})
    )
    config_dir = work_dir / "config"
    config_dir.mkdir(parents=True, exist_ok=True)
    for key, text in files.items():
        (config_dir / key).write_text(text)
    cluster.storage_v1().create_storage_class(
        manifest(
            {
                "metadata": {"name": STORAGE_CLASS},
                "provisioner": PROVISIONER,
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "WaitForFirstConsumer",
            }
        )
    )
    port = pick_free_ports(1)[0]
    log_path = work_dir / "provisioner.log"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "provisioner",
            "start",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--provisioner-name={PROVISIONER}",
            f"--namespace={NAMESPACE}",
            f"--config={config_dir / 'config.json'}",
            f"--configmap-name={CONFIGMAP}",
            f"--service-account-name={HELPER_ACCOUNT}",
            "--metrics-address=127.0.0.1",
            f"--metrics-port={port}",
        ],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )

    def leading() -> bool | None:
        if process.poll() is not None:
            raise ClusterError(f"demo: the provisioner exited; its log: {log_path}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as reply:
                return True if b"leading" in reply.read() else None
        except OSError:
            return None

    wait_for(leading, 60, "the provisioner to lead")
    print(f"  provisioner pid {process.pid} leads; /metrics on :{port}; log {log_path}")
    return process


def claim_for_a_pod(cluster: LocalCluster) -> dict[str, Any]:
    step("A claim for a pod: the scheduler picks a node, the provisioner makes the volume")
    core = cluster.core_v1()
    started = time.monotonic()
    core.create_namespaced_persistent_volume_claim(
        "default",
        manifest(
            {
                "metadata": {"name": "data"},
                "spec": {
                    "storageClassName": STORAGE_CLASS,
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        ),
    )
    core.create_namespaced_pod(
        "default",
        manifest(
            {
                "metadata": {"name": "app"},
                "spec": {
                    "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                    "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
                },
            }
        ),
    )

    def bound() -> str | None:
        claim = call_json(core.read_namespaced_persistent_volume_claim, "data", "default")
        return claim["spec"].get("volumeName") if claim["status"].get("phase") == "Bound" else None

    volume_name = _poll(bound, "the claim to be Bound")
    print(f"  claim default/data Bound to {volume_name} in {time.monotonic() - started:.1f}s")
    volume = call_json(core.read_persistent_volume, volume_name)
    pod = _poll(lambda: _running_pod(cluster, "app"), "the pod to run on the volume's node")
    print(f"  pod default/app Running on {pod['spec']['nodeName']}")
    return volume


def show_volume_directory(cluster: LocalCluster, volume: dict[str, Any]) -> tuple[str, Path]:
    step("The volume's directory on the nodes' disks")
    path = (volume["spec"].get("hostPath") or volume["spec"]["local"])["path"]
    terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    node = terms[0]["matchExpressions"][0]["values"][0]
    print(f"  PV {volume['metadata']['name']}: {path}, pinned to {node}")
    for name in cluster.nodes:
        on_disk = cluster.node_dir(name) / path.lstrip("/")
        print(f"  {name:<10} {on_disk}: {'present' if on_disk.is_dir() else 'absent'}")
    directory = cluster.node_dir(node) / path.lstrip("/")
    if not directory.is_dir():
        raise ClusterError(f"demo: {path} did not appear on {node}")
    return volume["metadata"]["name"], directory


def release(cluster: LocalCluster, volume_name: str, directory: Path) -> None:
    step("Releasing: pod and claim deleted, the provisioner removes directory and PV")
    core = cluster.core_v1()
    core.delete_namespaced_pod("app", "default", grace_period_seconds=0)
    core.delete_namespaced_persistent_volume_claim("data", "default")

    def deleted() -> bool | None:
        volumes = call_json(core.list_persistent_volume)["items"]
        return True if all(v["metadata"]["name"] != volume_name for v in volumes) else None

    _poll(deleted, f"{volume_name} to be deleted")
    print(
        f"  PV {volume_name} deleted; directory {directory}: "
        f"{'still there' if directory.exists() else 'removed'}"
    )


def stop_provisioner(process: subprocess.Popen[bytes]) -> None:
    step("Stopping the provisioner (SIGTERM: finish work, release the lease)")
    process.send_signal(signal.SIGTERM)
    print(f"  exit code {process.wait(30)}")


def _poll(probe: Callable[[], T | None], description: str) -> T:
    return wait_for(probe, 90, description)


def _running_pod(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    pod = call_json(cluster.core_v1().read_namespaced_pod, name, "default")
    return pod if pod["status"].get("phase") == "Running" else None


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
    provisioner: subprocess.Popen[bytes] | None = None
    try:
        show_nodes(cluster)
        provisioner = deploy_provisioner(cluster, cluster.dir / "demo")
        volume = claim_for_a_pod(cluster)
        volume_name, directory = show_volume_directory(cluster, volume)
        release(cluster, volume_name, directory)
        stop_provisioner(provisioner)
    except (ClusterError, TimeoutError) as error:
        print(error, file=sys.stderr)
        return 1
    finally:
        if provisioner is not None and provisioner.poll() is None:
            provisioner.kill()
            provisioner.wait(10)
        stop_cluster(cluster)
    return 0


if __name__ == "__main__":
    sys.exit(main())
