"""The demo, as a user lives through it: the provisioner's image pushed to a registry, a local
cluster with two real nodes, `pulumi up` of the dev stack's config with that image by digest,
a claim bound by the provisioner that `up` deployed (its pod pulled from the registry and run
by a kubelet under containerd), the claim's pod running with the volume mounted, its directory
on that node's disk only, the release that removes it again, `pulumi destroy`, and a clean
stop; a time per step.

Why: it shows the whole product path with nothing but this repository: a real control plane,
real nodes (kubelet, containerd, runc, each with a disk of its own), the real Pulumi engine,
and the image as a user ships it.

Run from the repository root: `python -m scripts.demo` (or `make demo`).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client

from components.naming import DEFAULT_NAMESPACE
from components.node_plugin import APP_NAME, CONTAINER_NAME, DAEMON_SET_NAME
from localcluster import (
    ClusterError,
    ClusterOptions,
    LocalCluster,
    wait_for,
)
from localcluster.raw_api import call_json, manifest
from localcluster.real_node_config import BUSYBOX_IMAGE
from provisioner.csi.driver_name import DEFAULT_DRIVER_NAME
from provisioner.helper_pods.pod_shapes import HELPER_POD_SELECTOR
from provisioner.objects.node_handoff import VOLUME_PATH_KEY
from provisioner.objects.snapshot_handoff import SNAPSHOT_SETUP_ANNOTATION, SnapshotSetup
from scripts import build_image
from scripts.pulumi_engine import ROOT, EngineUnavailableError, find_engine, project_copy

STACK = "demo"
CSI_CLASS = {
    "name": "local-path-csi",
    "volumeType": "csi",
    "reclaimPolicy": "Delete",
    "volumeBindingMode": "WaitForFirstConsumer",
    "snapshotClass": {"deletionPolicy": "Delete", "default": True},
}
SNAPSHOTS = ("snapshot.storage.k8s.io", "v1")
STACK_TEMPLATE = ROOT / "stacks" / "Pulumi.dev.yaml"
T = TypeVar("T")
timings: list[tuple[str, float]] = []


class DemoError(Exception):
    """A step did not do what it shows; the message says which and where to look."""


@contextmanager
def step(title: str) -> Iterator[None]:
    print(f"\n== {title}", flush=True)
    started = time.monotonic()
    yield
    timings.append((title, time.monotonic() - started))


def _poll(probe: Callable[[], T | None], description: str) -> T:
    return wait_for(probe, 90, description, interval=0.2)


class Pulumi:
    """The `pulumi` CLI on a copy of this project, with its output shown as it runs."""

    def __init__(self, cluster: LocalCluster, image: str) -> None:
        engine = find_engine()
        print(f"  pulumi {engine.version()} from {engine.origin}")
        stack_file = yaml.safe_load(STACK_TEMPLATE.read_text(encoding="utf-8"))
        config = {
            **stack_file["config"],
            "kubernetes:kubeconfig": str(cluster.kubeconfig),
            "local-path-storage:image": image,
        }
        # Beside the dev stack's class, one of CSI volumes: the stack deploys the node
        # plugin's DaemonSet for it.
        config["local-path-storage:storageClasses"] = [
            *config["local-path-storage:storageClasses"],
            CSI_CLASS,
        ]
        print(f"  $ pulumi config set --path storageClasses[1] '{json.dumps(CSI_CLASS)}'")
        print(f"  $ pulumi config set image {image}")
        self.project = project_copy(cluster.dir / "demo-project", STACK, config)
        # A backend and passphrase of this run only: the cluster directory goes at the end.
        state = cluster.dir / "pulumi-state"
        self.env = {
            **os.environ,
            **engine.environment(state, secrets.token_hex(16), temp_dir=cluster.dir / "pulumi-tmp"),
        }
        self.cli = str(engine.cli)

    def __call__(self, *arguments: str) -> None:
        command = [self.cli, *arguments, "--stack", STACK, "--non-interactive"]
        print(f"  $ pulumi {' '.join(arguments)}", flush=True)
        completed = subprocess.run(command, cwd=self.project, env=self.env, check=False)
        if completed.returncode != 0:
            raise DemoError(f"demo: `pulumi {' '.join(arguments)}` exited {completed.returncode}")


def namespace_of_stack() -> str:
    config = yaml.safe_load(STACK_TEMPLATE.read_text(encoding="utf-8"))["config"]
    return str(config.get("local-path-storage:namespace", DEFAULT_NAMESPACE))


def deploy(cluster: LocalCluster, pulumi: Pulumi) -> dict[str, Any]:
    pulumi("stack", "init")
    pulumi("up", "--yes")
    namespace = namespace_of_stack()

    def ready_pod() -> dict[str, Any] | None:
        pods = call_json(
            cluster.core_v1().list_namespaced_pod,
            namespace,
            label_selector="app.kubernetes.io/component=provisioner",
        )["items"]
        for pod in pods:
            conditions = pod.get("status", {}).get("conditions", [])
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return dict(pod)
        return None

    pod = _poll(ready_pod, "the deployed provisioner pod to be Ready")
    print(
        f"  provisioner pod {namespace}/{pod['metadata']['name']} Ready on "
        f"{pod['spec']['nodeName']}; its log: "
        f"{cluster.pod_log_path(namespace, pod['metadata']['name'], pod['metadata']['uid'])}"
    )
    (status,) = pod["status"]["containerStatuses"]
    print(f"  its container {status['containerID']}, image {status['imageID']}")
    return pod


def claim_for_a_pod(
    cluster: LocalCluster,
    storage_class: str,
    *,
    claim: str = "data",
    pod: str = "app",
    command: str = "echo hello > /data/greeting; sleep 3600",
    snapshot: str | None = None,
    node: str | None = None,
) -> dict[str, Any]:
    """A claim (restored from VolumeSnapshot `snapshot`, if given) and a pod that uses it
    (pinned to `node`, if given); returns the claim's PV once the pod runs."""
    core = cluster.core_v1()
    started = time.monotonic()
    claim_spec: dict[str, Any] = {
        "storageClassName": storage_class,
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    if snapshot is not None:
        claim_spec["dataSource"] = {
            "apiGroup": SNAPSHOTS[0],
            "kind": "VolumeSnapshot",
            "name": snapshot,
        }
    core.create_namespaced_persistent_volume_claim(
        "default", manifest({"metadata": {"name": claim}, "spec": claim_spec})
    )
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "app",
                "image": BUSYBOX_IMAGE,
                "command": ["sh", "-c", command],
                "volumeMounts": [{"name": "d", "mountPath": "/data"}],
            }
        ],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}],
    }
    if node is not None:
        # A restore is made where its snapshot is: the consumer goes there.
        pod_spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    core.create_namespaced_pod("default", manifest({"metadata": {"name": pod}, "spec": pod_spec}))

    def bound() -> str | None:
        found = call_json(core.read_namespaced_persistent_volume_claim, claim, "default")
        return found["spec"].get("volumeName") if found["status"].get("phase") == "Bound" else None

    volume_name = _poll(bound, "the claim to be Bound")
    print(f"  claim default/{claim} Bound to {volume_name} in {time.monotonic() - started:.1f}s")

    def running() -> str | None:
        found = call_json(core.read_namespaced_pod, pod, "default")
        phase = found["status"].get("phase")
        return str(found["spec"]["nodeName"]) if phase == "Running" else None

    node = _poll(running, "the claim's pod to run")
    print(f"  pod default/{pod} Running on {node} in {time.monotonic() - started:.1f}s")
    return call_json(core.read_persistent_volume, volume_name)


def show_volume_directory(cluster: LocalCluster, volume: dict[str, Any]) -> Path:
    path = volume_path(volume)
    terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    node = terms[0]["matchExpressions"][0]["values"][0]
    print(f"  PV {volume['metadata']['name']}: {path}, pinned to {node}")
    for name in cluster.nodes:
        on_disk = cluster.node_dir(name) / path.lstrip("/")
        print(f"  {name:<10} {on_disk}: {'present' if on_disk.is_dir() else 'absent'}")
    directory: Path = cluster.node_dir(node) / path.lstrip("/")
    if not directory.is_dir():
        raise DemoError(f"demo: {path} did not appear on {node}")
    greeting = directory / "greeting"
    _poll(lambda: True if greeting.is_file() else None, f"the pod to write {greeting}")
    print(f"  {greeting}: {greeting.read_text(encoding='utf-8').strip()!r}, written by the pod")
    return directory


def release(
    cluster: LocalCluster,
    volume_name: str,
    directory: Path,
    *,
    claim: str = "data",
    pod: str = "app",
) -> None:
    core = cluster.core_v1()
    core.delete_namespaced_pod(pod, "default", grace_period_seconds=0)
    core.delete_namespaced_persistent_volume_claim(claim, "default")

    def deleted() -> bool | None:
        volumes = call_json(core.list_persistent_volume)["items"]
        return True if all(v["metadata"]["name"] != volume_name for v in volumes) else None

    _poll(deleted, f"{volume_name} to be deleted")
    if directory.exists():
        raise DemoError(f"demo: {directory} is still there after its volume was deleted")
    print(f"  PV {volume_name} deleted; directory {directory}: removed")


def volume_path(volume: dict[str, Any]) -> str:
    spec = volume["spec"]
    if "csi" in spec:
        return str(spec["csi"]["volumeAttributes"][VOLUME_PATH_KEY])
    return str((spec.get("hostPath") or spec["local"])["path"])


def node_plugins_ready(cluster: LocalCluster, namespace: str) -> None:
    """The stack's node plugin DaemonSet, Ready on every node (each registered with its
    kubelet: the node's CSINode lists the driver)."""
    apps = cluster.apps_v1()

    def ready() -> int | None:
        status = call_json(apps.read_namespaced_daemon_set, DAEMON_SET_NAME, namespace)["status"]
        wanted = status.get("desiredNumberScheduled") or 0
        return wanted if wanted and status.get("numberReady") == wanted else None

    count = _poll(ready, f"the node plugin DaemonSet {namespace}/{DAEMON_SET_NAME} to be Ready")
    storage = cluster.storage_v1()

    def registered() -> list[str] | None:
        names = [
            node["metadata"]["name"]
            for node in call_json(storage.list_csi_node)["items"]
            if any(d["name"] == DEFAULT_DRIVER_NAME for d in node["spec"].get("drivers") or [])
        ]
        return names if len(names) == count else None

    nodes = _poll(registered, f"every node's CSINode to list {DEFAULT_DRIVER_NAME}")
    print(f"  node plugin Ready on {count} nodes, registered with the kubelets of {nodes}")


class HelperPodWatch:
    """Every helper pod the provisioner creates while it runs (it should create none for a CSI
    class's claim)."""

    def __init__(self, cluster: LocalCluster, namespace: str) -> None:
        self.created: list[str] = []
        self._stop = threading.Event()
        self._cluster, self._namespace = cluster, namespace
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        time.sleep(0.5)  # the watch is open before the claim is made

    def _watch(self) -> None:
        from kubernetes import watch  # noqa: PLC0415 (the demo's only watch)

        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            self._cluster.core_v1().list_namespaced_pod,
            self._namespace,
            label_selector=HELPER_POD_SELECTOR,
            timeout_seconds=600,
        )
        for event in stream:
            if event["type"] == "ADDED":
                self.created.append(event["raw_object"]["metadata"]["name"])
            if self._stop.is_set():
                break

    def stop(self) -> list[str]:
        self._stop.set()
        return self.created


def volume_usage(cluster: LocalCluster, node: str, claim: str) -> int:
    """`kubelet_volume_stats_used_bytes` of the claim, from its node's kubelet's /metrics
    (through the API server), once the kubelet has collected it (its volume stats period)."""
    pattern = re.compile(
        r'^kubelet_volume_stats_used_bytes\{[^}]*namespace="default"[^}]*'
        rf'persistentvolumeclaim="{claim}"[^}}]*\}} (\S+)$',
        re.MULTILINE,
    )

    def used() -> int | None:
        text = cluster.core_v1().connect_get_node_proxy_with_path(node, "metrics")
        found = pattern.search(str(text))
        return int(float(found.group(1))) if found else None

    return wait_for(used, 150, f"the kubelet of {node} to report {claim}'s usage", interval=2)


def say_why_not(cluster: LocalCluster, namespace: str, pod: str) -> None:
    """What the pod's events and the node plugins' logs say, when the pod did not run."""
    core = cluster.core_v1()
    for event in call_json(core.list_namespaced_event, "default")["items"]:
        if event["involvedObject"].get("name") == pod:
            print(f"  event on {pod}: {event['reason']}: {event['message']}", file=sys.stderr)
    plugins = call_json(
        core.list_namespaced_pod, namespace, label_selector=f"app.kubernetes.io/name={APP_NAME}"
    )["items"]
    for plugin in plugins:
        name = plugin["metadata"]["name"]
        log = core.read_namespaced_pod_log(name, namespace, container=CONTAINER_NAME)
        print(f"  --- {name} on {plugin['spec']['nodeName']} ---\n{log[-3000:]}", file=sys.stderr)


def csi_claim(cluster: LocalCluster, namespace: str) -> None:
    """A claim of the CSI class: bound with no helper pod, its pod's volume mounted by the
    node plugin, its usage in the kubelet's metrics, released by the node plugin."""
    node_plugins_ready(cluster, namespace)
    helpers = HelperPodWatch(cluster, namespace)
    try:
        volume = claim_for_a_pod(
            cluster,
            str(CSI_CLASS["name"]),
            claim="csi-data",
            pod="csi-app",
            command="echo hello > /data/greeting; head -c 8388608 /dev/zero > /data/blob;"
            " sleep 3600",
        )
    except TimeoutError:
        say_why_not(cluster, namespace, "csi-app")
        raise
    created = helpers.stop()
    if created:
        raise DemoError(f"demo: helper pods ran for the CSI claim: {created}")
    print(
        f"  PV {volume['metadata']['name']}: csi driver {volume['spec']['csi']['driver']},"
        " no helper pod created"
    )
    directory = show_volume_directory(cluster, volume)
    terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    node = terms[0]["matchExpressions"][0]["values"][0]
    started = time.monotonic()
    used = volume_usage(cluster, node, "csi-data")
    print(
        f'  kubelet_volume_stats_used_bytes{{persistentvolumeclaim="csi-data"}} = {used}'
        f" ({used / 2**20:.1f} MiB; the pod wrote 8 MiB), from {node}'s kubelet after"
        f" {time.monotonic() - started:.0f}s"
    )
    if used < 8 << 20:
        raise DemoError(f"demo: the kubelet reports {used} bytes used, less than the pod wrote")
    snapshot_and_restore(cluster, node)
    release(cluster, volume["metadata"]["name"], directory, claim="csi-data", pod="csi-app")


def snapshot_and_restore(cluster: LocalCluster, node: str) -> None:
    """A VolumeSnapshot of the CSI claim, ready; a second claim restored from it, whose pod
    reads the data back; then both deleted, the snapshot's data with it (policy Delete)."""
    objects = client.CustomObjectsApi(cluster.admin_client)
    group, version = SNAPSHOTS
    started = time.monotonic()
    print("  $ kubectl create -f volumesnapshot.yaml  # source: persistentVolumeClaimName csi-data")
    objects.create_namespaced_custom_object(
        group,
        version,
        "default",
        "volumesnapshots",
        {
            "apiVersion": f"{group}/{version}",
            "kind": "VolumeSnapshot",
            "metadata": {"name": "csi-data-snapshot"},
            "spec": {
                "volumeSnapshotClassName": CSI_CLASS["name"],
                "source": {"persistentVolumeClaimName": "csi-data"},
            },
        },
    )

    def ready() -> dict[str, Any] | None:
        found = call_json(
            objects.get_namespaced_custom_object,
            group,
            version,
            "default",
            "volumesnapshots",
            "csi-data-snapshot",
        )
        status = found.get("status") or {}
        if (status.get("error") or {}).get("message"):
            print(f"  (not yet: {status['error']['message']})")
        return found if status.get("readyToUse") else None

    snapshot = _poll(ready, "the VolumeSnapshot to be readyToUse")
    content_name = snapshot["status"]["boundVolumeSnapshotContentName"]
    content = call_json(
        objects.get_cluster_custom_object, group, version, "volumesnapshotcontents", content_name
    )
    setup = SnapshotSetup.from_json(content["metadata"]["annotations"][SNAPSHOT_SETUP_ANNOTATION])
    area = cluster.node_dir(node) / setup.path.lstrip("/")
    print(
        f"  VolumeSnapshot default/csi-data-snapshot readyToUse in"
        f" {time.monotonic() - started:.1f}s: restoreSize {snapshot['status']['restoreSize']},"
        f" handle {content['status']['snapshotHandle']}"
    )
    print(f"  on {node}: {area} ({'present' if area.is_dir() else 'absent'})")
    if not (area / "greeting").is_file():
        raise DemoError(f"demo: the snapshot's copy of greeting is not in {area}")
    restored = claim_for_a_pod(
        cluster,
        str(CSI_CLASS["name"]),
        claim="csi-restored",
        pod="csi-reader",
        command="cat /data/greeting; sleep 3600",
        snapshot="csi-data-snapshot",
        node=node,
    )
    core = cluster.core_v1()

    def read_back() -> str | None:
        log = str(core.read_namespaced_pod_log("csi-reader", "default"))
        return log.strip() or None

    said = _poll(read_back, "the reader pod's log (kubectl logs csi-reader)")
    print(f"  $ kubectl logs csi-reader  # cat /data/greeting in the restored volume\n  {said}")
    if said != "hello":
        raise DemoError(f"demo: the restored volume's greeting reads {said!r}, not 'hello'")
    restored_directory = cluster.node_dir(node) / volume_path(restored).lstrip("/")
    release(
        cluster,
        restored["metadata"]["name"],
        restored_directory,
        claim="csi-restored",
        pod="csi-reader",
    )
    objects.delete_namespaced_custom_object(
        group, version, "default", "volumesnapshots", "csi-data-snapshot"
    )
    _poll(lambda: True if not area.exists() else None, f"{area} to be removed")
    print(f"  VolumeSnapshot deleted (deletionPolicy Delete); {area}: removed")


def run(cluster: LocalCluster) -> None:
    with step("Nodes"):
        for node in call_json(cluster.core_v1().list_node)["items"]:
            name = node["metadata"]["name"]
            ready = next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")
            print(f"  {name:<10} Ready={ready:<6} disk: {cluster.node_dir(name)}")
    with step(
        "pulumi up: namespace, RBAC, ConfigMap, provisioner Deployment, StorageClasses,"
        " the CSI node plugin"
    ):
        assert cluster.real is not None and cluster.real.provisioner is not None
        pulumi = Pulumi(cluster, cluster.real.provisioner.by_digest)
        deploy(cluster, pulumi)
    storage_class = yaml.safe_load(STACK_TEMPLATE.read_text(encoding="utf-8"))["config"][
        "local-path-storage:storageClasses"
    ][0]["name"]
    with step("A claim for a pod: the scheduler picks a node, the deployed provisioner binds it"):
        volume = claim_for_a_pod(cluster, storage_class)
    with step("The volume's directory on the nodes' disks"):
        directory = show_volume_directory(cluster, volume)
    with step("Releasing: pod and claim deleted, the provisioner removes directory and PV"):
        release(cluster, volume["metadata"]["name"], directory)
    with step(
        "A CSI claim: bound without a helper pod, mounted by the node plugin, its usage read"
        " from the kubelet's metrics, a VolumeSnapshot of it restored into a second claim whose"
        " pod reads the data back, released by the node plugin"
    ):
        csi_claim(cluster, namespace_of_stack())
    with step("pulumi destroy: everything the stack made is removed"):
        pulumi("destroy", "--yes")
        pulumi("stack", "rm", "--yes")


def main() -> int:
    started = time.monotonic()
    code = 0
    try:
        with step("The provisioner's image (built from this checkout's tracked files, cached)"):
            image = build_image.image()
            print(f"  {image.reference} {image.digest}; archive {image.archive}")
        with step(
            "Starting the local cluster (etcd, kube-apiserver, controller-manager, scheduler), a "
            "registry with the image pushed, and two real nodes (kubelet, containerd, runc)"
        ):
            options = ClusterOptions(
                announce=False,
                provisioner_image=image.directory,
                nodes=(),
                real_nodes=2,
                snapshots=True,
            )
            cluster = LocalCluster.start(options)
            seconds = cluster.startup_seconds
            print(f"  cluster ready in {seconds:.1f}s; kubeconfig {cluster.kubeconfig}")
    except (ClusterError, build_image.ImageBuildError) as error:
        print(error, file=sys.stderr)
        return 1
    try:
        run(cluster)
    except (DemoError, EngineUnavailableError, TimeoutError) as error:
        print(error, file=sys.stderr)
        code = 1
    finally:
        with step("Stopping the cluster"):
            directory: Path = cluster.dir
            cluster.stop()
            print(f"  stopped; {directory} removed: {not directory.exists()}")
    print("\n== Time per step")
    for title, seconds in timings:
        print(f"  {seconds:6.1f}s  {title}")
    print(f"  {time.monotonic() - started:6.1f}s  in all; exit code {code}")
    return code


if __name__ == "__main__":
    sys.exit(main())
