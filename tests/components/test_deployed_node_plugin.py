"""The node plugin's objects the program declares for a CSI class, applied to the real local
cluster: the API server accepts them (the privileged DaemonSet with its Bidirectional mount,
the CSIDriver, the admission policy's CEL), and the node plugin's identity, holding a token
bound to a pod on node-1, may patch the annotations of node-1's CSI volumes and nothing else:
not node-2's, not a spec, not the label that names the node, not without a pod-bound token,
and no delete. The program runs under the SDK's mocks (test_deployed_rbac.py says why)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from components import node_plugin
from components.program import run
from localcluster import LocalCluster, wait_for
from localcluster.raw_api import call_json, manifest
from provisioner.objects.node_handoff import NODE_LABEL
from tests.components.mocked_engine import run_mocked
from tests.components.stack_files import stack_engine_config
from tests.components.test_deployed_rbac import COLLECTIONS as DEPLOYED_COLLECTIONS
from tests.components.test_deployed_rbac import Applied, as_manifest, response_status

pytestmark = pytest.mark.cluster

Objects = dict[tuple[str, str], dict[str, Any]]
COLLECTIONS = {
    "ValidatingAdmissionPolicy": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    ),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    ),
    "CSIDriver": "/apis/storage.k8s.io/v1/csidrivers",
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets",
    "PersistentVolume": "/api/v1/persistentvolumes",
    "Pod": "/api/v1/namespaces/{ns}/pods",
}


@pytest.fixture
def deployed(cluster: LocalCluster) -> Iterator[tuple[Objects, Applied, str]]:
    suffix = uuid.uuid4().hex[:6]
    config = stack_engine_config("dev")
    config.update(
        {
            "local-path-storage:namespace": f"np-{suffix}",
            "local-path-storage:provisionerName": f"np-{suffix}.lps.io/local-path",
            "local-path-storage:storageClasses": json.dumps(
                [{"name": f"np-{suffix}", "volumeType": "csi"}]
            ),
        }
    )
    result = run_mocked(config, run, stack="dev")
    assert result.error is None, result.error
    collections = {**DEPLOYED_COLLECTIONS, **COLLECTIONS}
    order = list(collections)
    manifests = [
        as_manifest(r)
        for r in result.registrations
        if r.type.startswith("kubernetes:") and r.custom
    ]
    manifests.sort(key=lambda body: order.index(body["kind"]))
    applied = Applied(cluster, collections)
    try:
        for body in manifests:
            applied.create(body)
        yield {(b["kind"], b["metadata"]["name"]): b for b in manifests}, applied, suffix
    finally:
        applied.delete_all()


def volume(name: str, node: str, driver: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {NODE_LABEL: node}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": driver, "volumeHandle": name},
        },
    }


def patch(api: client.ApiClient, name: str, body: dict[str, Any]) -> tuple[int, str]:
    request = api.param_serialize(
        "PATCH",
        f"/api/v1/persistentvolumes/{name}",
        body=body,
        header_params={"Content-Type": "application/merge-patch+json"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request)
    return int(response.status), response.read().decode()  # type: ignore[no-untyped-call]


def annotate(value: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {"local-path-storage.io/test": value}}}


def test_the_node_plugin_patches_only_its_own_nodes_volumes(
    cluster: LocalCluster, deployed: tuple[Objects, Applied, str]
) -> None:
    objects, applied, suffix = deployed
    namespace = f"np-{suffix}"
    driver = f"local-path.np-{suffix}.lps.io"
    assert ("CSIDriver", driver) in objects
    own, other = f"np-{suffix}-own", f"np-{suffix}-other"
    applied.create(volume(own, "node-1", driver))
    applied.create(volume(other, "node-2", driver))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plugin", "namespace": namespace},
        "spec": {
            "nodeName": "node-1",
            "serviceAccountName": node_plugin.SERVICE_ACCOUNT,
            "containers": [{"name": "c", "image": "registry.invalid/none:1"}],
        },
    }
    applied.create(pod)
    created = call_json(cluster.core_v1().read_namespaced_pod, "plugin", namespace)
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [],
            "expirationSeconds": 3600,
            # A token bound to a pod carries its node (userInfo.extra), as the kubelet's
            # projected service account token does.
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "plugin",
                "uid": created["metadata"]["uid"],
            },
        },
    }
    issued = call_json(
        cluster.core_v1().create_namespaced_service_account_token,
        node_plugin.SERVICE_ACCOUNT,
        namespace,
        manifest(request),
    )
    token = str(issued["status"]["token"])
    api = cluster.client_for_token(token)
    try:
        # The policy takes effect once the API server has loaded it: until node-2's volume
        # is refused, the plugin could still patch it.
        def refused() -> tuple[int, str] | None:
            status, text = patch(api, other, annotate("x"))
            return (status, text) if status in (403, 422) else None

        status, text = wait_for(refused, 30, "the admission policy to refuse node-2's volume")
        assert "may update only the PVs labelled" in text, text
        assert patch(api, own, annotate("y"))[0] == 200
        for body in (
            {"spec": {"capacity": {"storage": "2Gi"}}},
            {"metadata": {"labels": {NODE_LABEL: "node-2"}}},
        ):
            status, text = patch(api, own, body)
            assert status in (403, 422), (body, status, text)
        delete = api.param_serialize(
            "DELETE", f"/api/v1/persistentvolumes/{own}", auth_settings=["BearerToken"]
        )
        assert response_status(api, delete) == 403
    finally:
        api.close()  # type: ignore[no-untyped-call]
    unbound = cluster.client_for_token(
        cluster.service_account_token(namespace, node_plugin.SERVICE_ACCOUNT)
    )
    try:
        status, text = patch(unbound, own, annotate("z"))
        assert status in (403, 422)
        assert "a token bound to its pod" in text, text
    finally:
        unbound.close()  # type: ignore[no-untyped-call]
