"""Helper pods run for real by the local cluster's runner: success (the directory appears on
the node), failure with exit code and log tail, a start failure, timeout, and leftovers."""

import copy
import time
from pathlib import Path
from typing import Any

import pytest

from localcluster import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE, NEVER_STARTS_IMAGE, LocalCluster
from provisioner.helper_pods.pod_runner import (
    SPEC_HASH_ANNOTATION,
    HelperPodFailed,
    HelperPodNotStarted,
    HelperPodTimeout,
    PodRunner,
    spec_hash,
)
from provisioner.kube.client import KubeClients
from tests.provisioner.kube.fakes import wait_until

pytestmark = pytest.mark.cluster


def helper_pod(namespace: str, node: str, name: str, script: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {HELPER_POD_LABEL: HELPER_POD_LABEL_VALUE},
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "helper",
                    "image": "busybox:1.36",
                    "command": ["/bin/sh", "-c", script],
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "volumeMounts": [{"name": "data", "mountPath": "/opt/kube-shell"}],
                }
            ],
            "volumes": [
                {
                    "name": "data",
                    "hostPath": {"path": "/opt/kube-shell", "type": "DirectoryOrCreate"},
                }
            ],
        },
    }


def pod_exists(clients: KubeClients, namespace: str, name: str) -> bool:
    found = clients.request_json(
        "GET",
        f"/api/v1/namespaces/{namespace}/pods",
        query={"fieldSelector": f"metadata.name={name}"},
    )
    return bool(found["items"])


def test_success_creates_the_directory_on_the_node(
    cluster: LocalCluster, clients: KubeClients, namespace: str
) -> None:
    node = cluster.nodes[0]
    manifest = helper_pod(namespace, node, "helper-ok", "mkdir -p /opt/kube-shell/pvc-ok")
    duration = PodRunner(clients).run(manifest, timeout=60)
    assert 0 < duration < 60
    assert (Path(cluster.node_dir(node)) / "opt/kube-shell/pvc-ok").is_dir()
    assert wait_until(lambda: not pod_exists(clients, namespace, "helper-ok"), timeout=10)


def test_failure_reports_the_exit_code_and_log_tail_at_once(
    cluster: LocalCluster, clients: KubeClients, namespace: str
) -> None:
    script = "echo preparing; echo 'cannot create /opt/kube-shell/x: quota exceeded' >&2; exit 7"
    manifest = helper_pod(namespace, cluster.nodes[0], "helper-fails", script)
    started = time.monotonic()
    with pytest.raises(HelperPodFailed) as failure:
        PodRunner(clients).run(manifest, timeout=120)
    # Reported when the pod failed, not when the 120 s timeout ran out.
    assert time.monotonic() - started < 30
    assert failure.value.exit_code == 7
    assert "quota exceeded" in failure.value.log_tail
    assert wait_until(lambda: not pod_exists(clients, namespace, "helper-fails"), timeout=10)


def test_a_pod_that_cannot_start_is_reported_after_the_grace(
    cluster: LocalCluster, clients: KubeClients, namespace: str
) -> None:
    manifest = helper_pod(namespace, cluster.nodes[0], "helper-no-image", "true")
    manifest["spec"]["containers"][0]["image"] = NEVER_STARTS_IMAGE
    with pytest.raises(HelperPodNotStarted, match="ImagePullBackOff"):
        PodRunner(clients, start_failure_grace=2).run(manifest, timeout=60)
    assert wait_until(lambda: not pod_exists(clients, namespace, "helper-no-image"), timeout=10)


def test_timeout_deletes_the_pod(
    cluster: LocalCluster, clients: KubeClients, namespace: str
) -> None:
    manifest = helper_pod(namespace, cluster.nodes[0], "helper-slow", "sleep 60")
    started = time.monotonic()
    with pytest.raises(HelperPodTimeout):
        PodRunner(clients).run(manifest, timeout=3)
    assert time.monotonic() - started < 10
    assert wait_until(lambda: not pod_exists(clients, namespace, "helper-slow"), timeout=10)


def test_a_leftover_pod_from_the_same_manifest_is_adopted(
    cluster: LocalCluster, clients: KubeClients, namespace: str
) -> None:
    node = cluster.nodes[0]
    manifest = helper_pod(namespace, node, "helper-leftover", "sleep 1; echo done")
    leftover = copy.deepcopy(manifest)
    leftover["metadata"]["annotations"] = {SPEC_HASH_ANNOTATION: spec_hash(manifest)}
    created = clients.request_json("POST", f"/api/v1/namespaces/{namespace}/pods", body=leftover)
    PodRunner(clients).run(manifest, timeout=60)
    log = cluster.pod_log_path(namespace, "helper-leftover", created["metadata"]["uid"])
    # Adopted, not replaced: the pod we created is the one that ran.
    assert wait_until(log.exists, timeout=5)


def test_a_leftover_pod_from_another_manifest_is_replaced(
    cluster: LocalCluster, clients: KubeClients, namespace: str
) -> None:
    node = cluster.nodes[0]
    stale = helper_pod(namespace, node, "helper-stale", "sleep 60")
    created = clients.request_json("POST", f"/api/v1/namespaces/{namespace}/pods", body=stale)
    manifest = helper_pod(namespace, node, "helper-stale", "mkdir -p /opt/kube-shell/replaced")
    PodRunner(clients).run(manifest, timeout=60)
    assert (Path(cluster.node_dir(node)) / "opt/kube-shell/replaced").is_dir()
    assert created["metadata"]["uid"]
