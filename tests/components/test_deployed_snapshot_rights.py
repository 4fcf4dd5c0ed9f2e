"""The node plugin's rights over VolumeSnapshotContents, applied to the real local cluster with
the snapshot CRDs served: the program's objects for a csi class with a snapshotClass are
accepted (the VolumeSnapshotClass too), and the node plugin's identity, holding a token bound
to a pod on node-1, may lift being-created, mark snapshot-removed and write the status of
node-1's contents, and nothing else: not node-2's, not the spec, not a label, a finalizer or
another annotation (the setup and the removal permit are the controller's), not without a
pod-bound token, and no delete. The program runs under the SDK's mocks (test_deployed_rbac.py
says why)."""

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
from localcluster.snapshot_controller import (
    SNAPSHOT_CRD_FILES,
    apply_crds,
    crd_documents,
    locate_snapshot_tools,
)
from provisioner.objects.node_handoff import NODE_LABEL
from provisioner.objects.snapshot_handoff import (
    BEING_CREATED_ANNOTATION,
    SNAPSHOT_REMOVAL_PERMIT_ANNOTATION,
    SNAPSHOT_REMOVED_ANNOTATION,
    SNAPSHOT_SETUP_ANNOTATION,
)
from tests.components.mocked_engine import run_mocked
from tests.components.stack_files import stack_engine_config
from tests.components.test_deployed_node_plugin import COLLECTIONS as NODE_PLUGIN_COLLECTIONS
from tests.components.test_deployed_rbac import COLLECTIONS as DEPLOYED_COLLECTIONS
from tests.components.test_deployed_rbac import Applied, as_manifest, response_status

pytestmark = pytest.mark.cluster

CONTENTS = "/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents"
COLLECTIONS = {
    **DEPLOYED_COLLECTIONS,
    **NODE_PLUGIN_COLLECTIONS,
    "VolumeSnapshotClass": "/apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses",
    "VolumeSnapshotContent": CONTENTS,
}


@pytest.fixture(scope="module")
def snapshot_api(cluster: LocalCluster) -> LocalCluster:
    """The snapshot CRDs, as the cluster's snapshot opt-in applies them, without the common
    controller: the contents here are made by hand and must stay as they are. They stay
    installed (applying them again is a no-op, and removing them under a later test that
    enabled snapshots would break it)."""
    tools = locate_snapshot_tools()
    crds = tuple(path for path in tools.crds if path.name in SNAPSHOT_CRD_FILES)
    apply_crds(cluster.admin_client, crd_documents(crds), 60)
    return cluster


@pytest.fixture
def deployed(snapshot_api: LocalCluster) -> Iterator[tuple[Applied, str, str]]:
    suffix = uuid.uuid4().hex[:6]
    config = stack_engine_config("dev")
    config.update(
        {
            "local-path-storage:namespace": f"sn-{suffix}",
            "local-path-storage:provisionerName": f"sn-{suffix}.lps.io/local-path",
            "local-path-storage:storageClasses": json.dumps(
                [
                    {
                        "name": f"sn-{suffix}",
                        "volumeType": "csi",
                        "snapshotClass": {"default": True},
                    }
                ]
            ),
        }
    )
    result = run_mocked(config, run, stack="dev")
    assert result.error is None, result.error
    order = list(COLLECTIONS)
    manifests = [
        as_manifest(r)
        for r in result.registrations
        if r.type.startswith("kubernetes:") and r.custom
    ]
    manifests.sort(key=lambda body: order.index(body["kind"]))
    assert "VolumeSnapshotClass" in {body["kind"] for body in manifests}
    applied = Applied(snapshot_api, COLLECTIONS)
    try:
        for body in manifests:
            applied.create(body)
        yield applied, f"sn-{suffix}", f"local-path.sn-{suffix}.lps.io"
    finally:
        applied.delete_all()


def content(name: str, node: str, driver: str) -> dict[str, Any]:
    """A content as the controller leaves it once admitted (hand-made: no controller runs)."""
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotContent",
        "metadata": {
            "name": name,
            "labels": {NODE_LABEL: node},
            "annotations": {BEING_CREATED_ANNOTATION: "yes", SNAPSHOT_SETUP_ANNOTATION: "{}"},
        },
        "spec": {
            "deletionPolicy": "Retain",
            "driver": driver,
            "source": {"volumeHandle": f"{name}-pv"},
            "volumeSnapshotRef": {"name": name, "namespace": "default"},
        },
    }


def patch(api: client.ApiClient, path: str, body: dict[str, Any]) -> tuple[int, str]:
    request = api.param_serialize(
        "PATCH",
        path,
        body=body,
        header_params={"Content-Type": "application/merge-patch+json"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request)
    return int(response.status), response.read().decode()  # type: ignore[no-untyped-call]


def annotated(values: dict[str, str | None]) -> dict[str, Any]:
    return {"metadata": {"annotations": values}}


def pod_bound_token(cluster: LocalCluster, applied: Applied, namespace: str, node: str) -> str:
    """A token of the node plugin's account bound to a pod on `node`, as the kubelet projects
    it: the API server puts the node in the request's userInfo.extra."""
    applied.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "plugin", "namespace": namespace},
            "spec": {
                "nodeName": node,
                "serviceAccountName": node_plugin.SERVICE_ACCOUNT,
                "containers": [{"name": "c", "image": "registry.invalid/none:1"}],
            },
        }
    )
    created = call_json(cluster.core_v1().read_namespaced_pod, "plugin", namespace)
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [],
            "expirationSeconds": 3600,
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
    return str(issued["status"]["token"])


def test_the_node_plugin_serves_only_its_own_nodes_contents(
    snapshot_api: LocalCluster, deployed: tuple[Applied, str, str]
) -> None:
    cluster = snapshot_api
    applied, namespace, driver = deployed
    own, other = f"{namespace}-own", f"{namespace}-other"
    applied.create(content(own, "node-1", driver))
    applied.create(content(other, "node-2", driver))
    api = cluster.client_for_token(pod_bound_token(cluster, applied, namespace, "node-1"))
    try:
        # The policy takes effect once the API server has loaded it: until node-2's content
        # is refused, the plugin could still patch it.
        def refused() -> tuple[int, str] | None:
            status, text = patch(
                api, f"{CONTENTS}/{other}", annotated({BEING_CREATED_ANNOTATION: None})
            )
            return (status, text) if status in (403, 422) else None

        _, text = wait_for(refused, 30, "the admission policy to refuse node-2's content")
        assert "may update only the VolumeSnapshotContents labelled" in text, text
        status, text = patch(api, f"{CONTENTS}/{other}/status", {"status": {"readyToUse": True}})
        assert status in (403, 422), (status, text)

        # What taking and removing a snapshot needs, on its own node's content.
        status_body = {
            "status": {
                "snapshotHandle": "v1/node-1/" + "0" * 32,
                "readyToUse": True,
                "creationTime": 1_700_000_000_000_000_000,
                "restoreSize": 1 << 30,
            }
        }
        status, text = patch(api, f"{CONTENTS}/{own}/status", status_body)
        assert status == 200, text
        status, text = patch(api, f"{CONTENTS}/{own}", annotated({BEING_CREATED_ANNOTATION: None}))
        assert status == 200, text
        status, text = patch(
            api, f"{CONTENTS}/{own}", annotated({SNAPSHOT_REMOVED_ANNOTATION: "true"})
        )
        assert status == 200, text
        stored = call_json(
            client.CustomObjectsApi(cluster.admin_client).get_cluster_custom_object,
            "snapshot.storage.k8s.io",
            "v1",
            "volumesnapshotcontents",
            own,
        )
        assert stored["status"]["readyToUse"] is True
        assert stored["metadata"]["annotations"] == {
            SNAPSHOT_SETUP_ANNOTATION: "{}",
            SNAPSHOT_REMOVED_ANNOTATION: "true",
        }

        # Nothing else of it.
        for body in (
            annotated({SNAPSHOT_SETUP_ANNOTATION: '{"id": "x"}'}),
            annotated({SNAPSHOT_SETUP_ANNOTATION: None}),
            annotated({SNAPSHOT_REMOVAL_PERMIT_ANNOTATION: "{}"}),
            annotated({"example.com/anything": "x"}),
            {"metadata": {"labels": {NODE_LABEL: "node-2"}}},
            {"metadata": {"labels": {"example.com/other": "x"}}},
            {"metadata": {"finalizers": ["example.com/hold"]}},
            {"spec": {"deletionPolicy": "Delete"}},
        ):
            status, text = patch(api, f"{CONTENTS}/{own}", body)
            assert status in (403, 422), (body, status, text)
            assert "the node plugin" in text, (body, text)
        delete = api.param_serialize("DELETE", f"{CONTENTS}/{own}", auth_settings=["BearerToken"])
        assert response_status(api, delete) == 403
    finally:
        api.close()  # type: ignore[no-untyped-call]
    unbound = cluster.client_for_token(
        cluster.service_account_token(namespace, node_plugin.SERVICE_ACCOUNT)
    )
    try:
        status, text = patch(
            unbound, f"{CONTENTS}/{own}", annotated({BEING_CREATED_ANNOTATION: "yes"})
        )
        assert status in (403, 422)
        assert "a token bound to its pod" in text, text
    finally:
        unbound.close()  # type: ignore[no-untyped-call]
