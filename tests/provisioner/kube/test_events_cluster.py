"""Events posted to the real apiserver, repeats folded into one Event's count."""

from typing import Any

import pytest

from provisioner.kube.client import EventRecorder, KubeClients, ObjectReference
from tests.provisioner.kube.fakes import wait_until

pytestmark = pytest.mark.cluster


def events_about(clients: KubeClients, namespace: str, name: str) -> list[dict[str, Any]]:
    found = clients.request_json(
        "GET",
        f"/api/v1/namespaces/{namespace}/events",
        query={"fieldSelector": f"involvedObject.name={name}"},
    )
    items: list[dict[str, Any]] = found["items"]
    return items


def test_events_are_recorded_and_repeats_aggregated(clients: KubeClients, namespace: str) -> None:
    claim = clients.request_json(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        body={"metadata": {"name": "stand-in-claim"}},
    )
    involved = ObjectReference.from_object(claim, "ConfigMap")
    recorder = EventRecorder(clients, "local-path-storage.io/local-path", host="test-host")
    try:
        for _ in range(3):
            recorder.warning(involved, "ProvisioningFailed", "no path configured for node-9")
        recorder.normal(involved, "Provisioning", "provisioning volume")
        assert recorder.flush()
    finally:
        recorder.stop()
    assert wait_until(lambda: len(events_about(clients, namespace, "stand-in-claim")) == 2)
    events = {e["reason"]: e for e in events_about(clients, namespace, "stand-in-claim")}
    failed = events["ProvisioningFailed"]
    assert failed["count"] == 3
    assert failed["type"] == "Warning"
    assert failed["involvedObject"]["uid"] == claim["metadata"]["uid"]
    assert failed["source"] == {
        "component": "local-path-storage.io/local-path",
        "host": "test-host",
    }
    assert events["Provisioning"]["count"] == 1


def test_events_about_cluster_scoped_objects_go_to_default(clients: KubeClients) -> None:
    involved = ObjectReference("PersistentVolume", "pvc-does-not-exist", uid="u-1")
    recorder = EventRecorder(clients, "local-path-storage.io/local-path")
    recorder.warning(involved, "VolumeFailedDelete", "teardown failed")
    assert recorder.flush()
    recorder.stop()
    assert wait_until(lambda: len(events_about(clients, "default", "pvc-does-not-exist")) == 1)
