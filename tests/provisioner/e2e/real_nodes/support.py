"""The provisioner serving claims on real nodes: its helper pods and the claims' pods are run by
a real kubelet (containerd, runc), every image pulled from the cluster's local registry.

This package's conftest overrides the session's `cluster` with `real_node_cluster()`, so the
end-to-end fixtures (`make_setup`, `record_helper_pods`) work unchanged against real-1 and
real-2. The provisioner itself runs as a process beside the cluster, as in the other
end-to-end tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from localcluster import ClusterOptions, LocalCluster
from localcluster.raw_api import manifest
from localcluster.real_node_config import BUSYBOX_IMAGE
from localcluster.real_nodes import PushedImage, RealNodes
from provisioner.configuration.config import DEFAULT_HELPER_POD_YAML
from scripts import build_image
from tests.faults.support import HelperPodRecorder, HelperPodSeen
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup, default_config

Serve = Callable[..., tuple[ProvisionerSetup, HelperPodRecorder]]
"""The `serving` fixture: `serve` on the package's cluster, given the base path and files."""
REAL_NODES = ("real-1", "real-2")
HOSTNAME = "kubernetes.io/hostname"
POD_TIMEOUT_SECONDS = 90.0
# What the default helper template names, as the local registry holds it (real_nodes.py
# pushes Debian's busybox there under docker.io's path).
REGISTRY_BUSYBOX_PATH = BUSYBOX_IMAGE.split("/", 1)[1]
DEFAULT_HELPER_IMAGE = "image: busybox:1.37.0"


@contextmanager
def real_node_cluster() -> Iterator[LocalCluster]:
    """A cluster with two real nodes and no kwok node: every pod here runs for real."""
    image = build_image.image()
    options = ClusterOptions(nodes=(), real_nodes=2, provisioner_image=image.directory)
    cluster = LocalCluster.start(options)
    try:
        yield cluster
    finally:
        cluster.stop()


def real_nodes(cluster: LocalCluster) -> RealNodes:
    assert cluster.real is not None, "the cluster has no real nodes"
    return cluster.real


def registry_busybox(cluster: LocalCluster) -> str:
    """Busybox by the local registry's own address: the helper pods' imageID then names the
    registry they were pulled from (through docker.io's mirror it would name docker.io)."""
    return f"{real_nodes(cluster).registry.address}/{REGISTRY_BUSYBOX_PATH}"


def helper_pod_yaml(cluster: LocalCluster, image: str | None = None) -> str:
    """The default helper template, its image `image`, else busybox from the local registry."""
    assert DEFAULT_HELPER_IMAGE in DEFAULT_HELPER_POD_YAML
    return DEFAULT_HELPER_POD_YAML.replace(
        DEFAULT_HELPER_IMAGE, f"image: {image or registry_busybox(cluster)}"
    )


def with_prelude(script: str, prelude: str) -> str:
    """A default script (DEFAULT_SETUP_SCRIPT, DEFAULT_TEARDOWN_SCRIPT) with `prelude` run
    first, after its `set -eu`."""
    assert "set -eu\n" in script
    return script.replace("set -eu\n", f"set -eu\n{prelude}", 1)


def serve(
    cluster: LocalCluster,
    make_setup: Callable[[ConfigFiles], ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
    base: str,
    *,
    create: bool = True,
    start_args: Sequence[str] = (),
    **files: Any,
) -> tuple[ProvisionerSetup, HelperPodRecorder]:
    """A provisioner leading with `base` as every node's base path (made by the helpers unless
    `create` is false) and helper pods pulled from the local registry (unless `files` gives a
    helper_pod), recorded from the start; `files` sets ConfigFiles' scripts and helper_pod,
    and its `config` adds keys (cmdTimeoutSeconds, say)."""
    config = default_config(base)
    if not create:
        config["nodePathMap"][0]["paths"] = [base]
    config.update(files.pop("config", {}))
    files.setdefault("helper_pod", helper_pod_yaml(cluster))
    setup = make_setup(ConfigFiles(config=config, **files))
    setup.start(*start_args)
    return setup, record_helper_pods(setup)


def create_writer(setup: ProvisionerSetup, name: str, claim: str, node: str, script: str) -> None:
    """A busybox pod on `node` that mounts the claim at /data, runs `script` and exits: the
    real kubelet mounts the volume the provisioner made, so what it writes is on that disk."""
    spec: dict[str, Any] = {
        "nodeSelector": {HOSTNAME: node},
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "writer",
                "image": registry_busybox(setup.cluster),
                "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
    }
    setup.core.create_namespaced_pod(
        setup.namespace, manifest({"metadata": {"name": name}, "spec": spec})
    )


def wait_succeeded(setup: ProvisionerSetup, names: Iterable[str]) -> None:
    for name in names:
        finished = setup.cluster.wait_for_pod_phase(
            setup.namespace, name, ("Succeeded", "Failed"), timeout=POD_TIMEOUT_SECONDS
        )
        assert finished["status"]["phase"] == "Succeeded", finished["status"]


def container_statuses(pod: HelperPodSeen) -> list[Mapping[str, Any]]:
    status = pod.status
    return [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]


def assert_ran_under_containerd_from_the_registry(
    cluster: LocalCluster, pods: Iterable[HelperPodSeen], image: PushedImage | None = None
) -> None:
    """Every container of every pod has a containerd ID and the image ID of `image` (else the
    busybox) the local registry holds, by its address and digest: the real kubelet pulled it
    from there and ran it."""
    real = real_nodes(cluster)
    if image is None:
        assert real.busybox is not None
        image = PushedImage(registry_busybox(cluster), real.busybox.digest)
    assert image.digest.startswith("sha256:")
    assert image.by_tag.startswith(f"{real.registry.address}/")
    image_id = image.by_digest
    seen = 0
    for pod in pods:
        statuses = container_statuses(pod)
        assert statuses, f"{pod.name}: no container status recorded"
        for status in statuses:
            where = f"{pod.name}/{status['name']}"
            assert str(status.get("containerID", "")).startswith("containerd://"), where
            assert status.get("imageID") == image_id, (where, status.get("imageID"))
            seen += 1
    assert seen, "no helper pod recorded"
