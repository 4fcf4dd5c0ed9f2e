"""ReadWriteOncePod on real nodes, as Kubernetes' own storage tests try it: a second pod given the
claim with `spec.nodeName` (past the scheduler, which would hold it back) on the first pod's
node. The kubelet refuses it (FailedMount) only for a volume plugin that holds the mode: `local`
does; hostPath does not (its volumes are named per pod, so none is ever "in use elsewhere"),
and the second pod runs beside the first. So a ReadWriteOncePod claim is given a `local` volume
or refused, naming `volumeType: local`.
"""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.cluster_access import wait_for
from localcluster.raw_api import call_json, manifest
from tests.faults.support import unique_base_path
from tests.provisioner.e2e.real_nodes.support import (
    HOSTNAME,
    POD_TIMEOUT_SECONDS,
    Serve,
    registry_busybox,
)
from tests.provisioner.e2e.support import ProvisionerSetup, volume_path

pytestmark = [pytest.mark.realnode, pytest.mark.cluster]

ONE_POD = ["ReadWriteOncePod"]
RWOP_IN_USE = "volume uses the ReadWriteOncePod access mode and is already in use by another pod"


def create_holder(
    setup: ProvisionerSetup, name: str, claim: str, node: str, *, past_scheduler: bool = False
) -> None:
    """A busybox pod on `node` that writes its name into the claim's `pods` file and stays;
    `past_scheduler`: put there by spec.nodeName, as no scheduler would."""
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "holder",
                "image": registry_busybox(setup.cluster),
                "command": ["sh", "-c", f"echo {name} >> /data/pods && exec sleep 600"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
    }
    if past_scheduler:
        spec["nodeName"] = node
    else:
        spec["nodeSelector"] = {HOSTNAME: node}
    setup.core.create_namespaced_pod(
        setup.namespace, manifest({"metadata": {"name": name}, "spec": spec})
    )


def running(setup: ProvisionerSetup, name: str) -> None:
    setup.cluster.wait_for_pod_phase(setup.namespace, name, ("Running",), POD_TIMEOUT_SECONDS)


def event_on(setup: ProvisionerSetup, name: str, reason: str) -> dict[str, Any] | None:
    """The first event of that reason on this namespace's object of that name."""
    for event in setup.events(name):
        if event["involvedObject"].get("namespace") == setup.namespace and (
            event.get("reason") == reason
        ):
            return event
    return None


def test_a_second_pod_on_the_node_is_refused_a_local_read_write_once_pod_volume(
    serving: Serve,
) -> None:
    setup, _ = serving(unique_base_path("real-rwop-local"))
    storage_class = setup.create_class("one-pod", annotations={"defaultVolumeType": "local"})
    setup.create_claim("solo", storage_class, access_modes=ONE_POD)
    create_holder(setup, "first", "solo", "real-1")
    volume = setup.wait_bound("solo", timeout=POD_TIMEOUT_SECONDS)
    assert "local" in volume["spec"] and "hostPath" not in volume["spec"]
    running(setup, "first")

    create_holder(setup, "second", "solo", "real-1", past_scheduler=True)
    refused = wait_for(
        lambda: event_on(setup, "second", "FailedMount"),
        POD_TIMEOUT_SECONDS,
        "a FailedMount event on the second pod",
    )
    assert RWOP_IN_USE in refused["message"], refused
    second = call_json(setup.core.read_namespaced_pod, "second", setup.namespace)
    assert second["status"]["phase"] == "Pending", second["status"]
    pods = setup.node_path("real-1", volume_path(volume)) / "pods"
    assert pods.read_text() == "first\n"


def test_a_read_write_once_pod_claim_of_a_host_path_class_is_refused_naming_volume_type_local(
    serving: Serve,
) -> None:
    setup, _ = serving(unique_base_path("real-rwop-hostpath"))
    storage_class = setup.create_class("one-pod-hostpath")
    setup.create_claim("solo", storage_class, access_modes=ONE_POD)
    create_holder(setup, "first", "solo", "real-1")
    failed = wait_for(
        lambda: event_on(setup, "solo", "ProvisioningFailed"),
        POD_TIMEOUT_SECONDS,
        "a ProvisioningFailed event on the claim",
    )
    assert failed["type"] == "Warning"
    assert (
        "ReadWriteOncePod is held to one pod only on a volume of volumeType: local"
        in (failed["message"])
    ), failed
    assert f"defaultVolumeType: local on StorageClass {storage_class}" in failed["message"]
    claim = setup.claim("solo")
    assert claim["status"]["phase"] == "Pending" and not claim["spec"].get("volumeName")


def test_the_kubelet_does_not_hold_read_write_once_pod_on_a_host_path_volume(
    serving: Serve,
) -> None:
    """Why the refusal: a ReadWriteOncePod hostPath PV made by hand, bound to its claim, gets a
    second pod put on the node running beside the first. Should a kubelet ever hold it, this
    fails, and hostPath claims of that mode may be served again."""
    base = unique_base_path("real-rwop-proof")
    setup, _ = serving(base)
    path = f"{base}/by-hand"
    setup.node_path("real-1", path).mkdir(parents=True)
    name = f"rwop-by-hand-{setup.suffix}"
    on_real_1 = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": ["real-1"]}]}
    body = {
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ONE_POD,
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": path, "type": "Directory"},
            "claimRef": {"namespace": setup.namespace, "name": "by-hand"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [on_real_1]}},
        },
    }
    setup.core.create_persistent_volume(manifest(body))
    try:
        claim = {
            "metadata": {"name": "by-hand"},
            "spec": {
                "storageClassName": "",
                "volumeName": name,
                "accessModes": ONE_POD,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        setup.core.create_namespaced_persistent_volume_claim(setup.namespace, manifest(claim))
        create_holder(setup, "first", "by-hand", "real-1")
        running(setup, "first")
        create_holder(setup, "second", "by-hand", "real-1", past_scheduler=True)
        running(setup, "second")
        pods = setup.node_path("real-1", path) / "pods"
        assert sorted(pods.read_text().split()) == ["first", "second"]
    finally:
        setup.core.delete_persistent_volume(name)
