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

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml

from components.naming import DEFAULT_NAMESPACE
from localcluster import (
    ClusterError,
    ClusterOptions,
    LocalCluster,
    wait_for,
)
from localcluster.raw_api import call_json, manifest
from localcluster.real_node_config import BUSYBOX_IMAGE
from scripts import build_image
from scripts.pulumi_engine import ROOT, EngineUnavailableError, find_engine, project_copy

STACK = "demo"
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


def deploy(cluster: LocalCluster, pulumi: Pulumi) -> dict[str, Any]:
    pulumi("stack", "init")
    pulumi("up", "--yes")
    namespace = yaml.safe_load(STACK_TEMPLATE.read_text(encoding="utf-8"))["config"].get(
        "local-path-storage:namespace", DEFAULT_NAMESPACE
    )

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


def claim_for_a_pod(cluster: LocalCluster, storage_class: str) -> dict[str, Any]:
    core = cluster.core_v1()
    started = time.monotonic()
    core.create_namespaced_persistent_volume_claim(
        "default",
        manifest(
            {
                "metadata": {"name": "data"},
                "spec": {
                    "storageClassName": storage_class,
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
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "app",
                            "image": BUSYBOX_IMAGE,
                            "command": ["sh", "-c", "echo hello > /data/greeting; sleep 3600"],
                            "volumeMounts": [{"name": "d", "mountPath": "/data"}],
                        }
                    ],
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

    def running() -> str | None:
        pod = call_json(core.read_namespaced_pod, "app", "default")
        return str(pod["spec"]["nodeName"]) if pod["status"].get("phase") == "Running" else None

    node = _poll(running, "the claim's pod to run")
    print(f"  pod default/app Running on {node} in {time.monotonic() - started:.1f}s")
    return call_json(core.read_persistent_volume, volume_name)


def show_volume_directory(cluster: LocalCluster, volume: dict[str, Any]) -> Path:
    path = (volume["spec"].get("hostPath") or volume["spec"]["local"])["path"]
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


def release(cluster: LocalCluster, volume_name: str, directory: Path) -> None:
    core = cluster.core_v1()
    core.delete_namespaced_pod("app", "default", grace_period_seconds=0)
    core.delete_namespaced_persistent_volume_claim("data", "default")

    def deleted() -> bool | None:
        volumes = call_json(core.list_persistent_volume)["items"]
        return True if all(v["metadata"]["name"] != volume_name for v in volumes) else None

    _poll(deleted, f"{volume_name} to be deleted")
    if directory.exists():
        raise DemoError(f"demo: {directory} is still there after its volume was deleted")
    print(f"  PV {volume_name} deleted; directory {directory}: removed")


def run(cluster: LocalCluster) -> None:
    with step("Nodes"):
        for node in call_json(cluster.core_v1().list_node)["items"]:
            name = node["metadata"]["name"]
            ready = next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")
            print(f"  {name:<10} Ready={ready:<6} disk: {cluster.node_dir(name)}")
    with step("pulumi up: namespace, RBAC, ConfigMap, provisioner Deployment, StorageClass"):
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
                announce=False, provisioner_image=image.directory, nodes=(), real_nodes=2
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
