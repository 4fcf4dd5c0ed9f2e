"""The objects the Pulumi program declares, applied to the real local cluster: the API server
accepts every manifest, and the provisioner, authenticated as the deployed ServiceAccount (a
TokenRequest token) with the deployed ConfigMap and the Deployment's own arguments, provisions
and deletes a claim end to end. The same identity is refused secrets.

The program runs under the SDK's mocks here (the Pulumi engine cannot be built on this
machine, see README); the manifests are the inputs it registers, which is what the Kubernetes
provider would send.
"""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from components.program import run
from localcluster import LocalCluster, wait_for
from localcluster.ports import pick_free_ports
from localcluster.raw_api import call_json, manifest
from tests.components.mocked_engine import Registration, run_mocked
from tests.components.stack_files import stack_engine_config
from tests.provisioner.e2e.support import (
    ProvisionerProcess,
    volume_node,
    volume_path,
    wait_gone,
)

pytestmark = pytest.mark.cluster

COLLECTIONS = {
    "Namespace": "/api/v1/namespaces",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "StorageClass": "/apis/storage.k8s.io/v1/storageclasses",
}


def plain(value: Any) -> Any:
    """The mocks hand numbers over as floats (protobuf Struct); the API wants integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def as_manifest(registration: Registration) -> dict[str, Any]:
    kind = registration.type.rsplit(":", 1)[-1]
    group_version = registration.type.split(":")[1]
    api_version = group_version.removeprefix("core/")
    return {"apiVersion": api_version, "kind": kind, **plain(registration.inputs)}


def response_status(api: Any, request: Any) -> int:
    """Sends a serialized request; the raw call reports the status instead of raising."""
    response = api.call_api(*request)
    response.read()
    return int(response.status)


class Applied:
    def __init__(self, cluster: LocalCluster, collections: dict[str, str] | None = None) -> None:
        self.api = cluster.admin_client
        self.collections = COLLECTIONS if collections is None else collections
        self.created: list[str] = []

    def create(self, body: dict[str, Any]) -> None:
        namespace = body["metadata"].get("namespace", "")
        collection = self.collections[body["kind"]].format(ns=namespace)
        request = self.api.param_serialize(
            "POST", collection, body=body, header_params={"Content-Type": "application/json"}
        )
        status = response_status(self.api, request)
        assert status == 201, f"the API server refused {body['kind']}: HTTP {status}"
        self.created.append(f"{collection}/{body['metadata']['name']}")

    def delete_all(self) -> None:
        for path in reversed(self.created):
            with contextlib.suppress(ApiException):
                response_status(self.api, self.api.param_serialize("DELETE", path))


@pytest.fixture
def deployed(cluster: LocalCluster) -> Iterator[tuple[dict[str, dict[str, Any]], str]]:
    suffix = uuid.uuid4().hex[:6]
    config = stack_engine_config("dev")
    config.update(
        {
            "local-path-storage:namespace": f"rbac-{suffix}",
            "local-path-storage:provisionerName": f"rbac-{suffix}.lps.io/local-path",
            "local-path-storage:storageClasses": json.dumps(
                [
                    {
                        "name": f"rbac-{suffix}",
                        "reclaimPolicy": "Delete",
                        "volumeBindingMode": "WaitForFirstConsumer",
                    }
                ]
            ),
        }
    )
    result = run_mocked(config, run, stack="dev")
    assert result.error is None
    manifests = [
        as_manifest(registration)
        for registration in result.registrations
        if registration.type.startswith("kubernetes:") and registration.custom
    ]
    order = list(COLLECTIONS)
    manifests.sort(key=lambda body: order.index(body["kind"]))
    applied = Applied(cluster)
    try:
        for body in manifests:
            applied.create(body)
        yield {body["kind"]: body for body in manifests}, suffix
    finally:
        applied.delete_all()


def test_the_deployed_identity_provisions_and_deletes_and_is_refused_secrets(
    cluster: LocalCluster, deployed: tuple[dict[str, dict[str, Any]], str], tmp_path: Path
) -> None:
    objects, _ = deployed
    namespace = objects["Namespace"]["metadata"]["name"]
    # The account the ClusterRoleBinding grants (the other one, for helper pods, has no rights).
    account = objects["ClusterRoleBinding"]["subjects"][0]["name"]
    assert objects["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"] == account
    kubeconfig = cluster.service_account_kubeconfig(namespace, account)

    # The identity the Deployment runs as may not read secrets, anywhere.
    token = cluster.service_account_token(namespace, account)
    with cluster.client_for_token(token) as api:
        for path in ("/api/v1/secrets", f"/api/v1/namespaces/{namespace}/secrets"):
            assert response_status(api, api.param_serialize("GET", path)) == 403

    # The deployed ConfigMap, as kubelet would mount it, and the Deployment's own arguments.
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    for key, text in objects["ConfigMap"]["data"].items():
        (config_dir / key).write_text(text)
    container = objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    arguments = [
        argument
        for argument in container["args"]
        if not argument.startswith(("--config=", "--metrics-port="))
    ]
    port = pick_free_ports(1)[0]
    replica = ProvisionerProcess(
        [
            sys.executable,
            "-m",
            "provisioner",
            *arguments,
            f"--config={config_dir / 'config.json'}",
            f"--metrics-port={port}",
            "--metrics-address=127.0.0.1",
            f"--kubeconfig={kubeconfig}",
            f"--namespace={namespace}",
        ],
        {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"},
        tmp_path / "provisioner.log",
        port,
    )
    core = cluster.core_v1()
    try:
        storage_class = objects["StorageClass"]["metadata"]["name"]
        core.create_namespaced_persistent_volume_claim(
            namespace,
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
            namespace,
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
            claim = call_json(core.read_namespaced_persistent_volume_claim, "data", namespace)
            if claim.get("status", {}).get("phase") == "Bound":
                return str(claim["spec"]["volumeName"])
            assert replica.alive(), replica.log()[-3000:]
            return None

        volume_name = wait_for(bound, 90, "the claim to bind under the deployed identity")
        volume = call_json(core.read_persistent_volume, volume_name)
        directory = cluster.node_dir(volume_node(volume)) / volume_path(volume).lstrip("/")
        assert directory.is_dir()

        core.delete_namespaced_pod("app", namespace, grace_period_seconds=0)
        core.delete_namespaced_persistent_volume_claim("data", namespace)

        def volume_exists() -> object:
            try:
                return call_json(core.read_persistent_volume, volume_name)
            except ApiException as error:
                if error.status == 404:
                    return None
                raise

        wait_gone(volume_exists, 90, f"{volume_name} to be deleted")
        assert not directory.exists()
        # Refused requests, as the API server words them ("HTTP 403 Forbidden", "forbidden:
        # User ... cannot ..."): a bare "403" also turns up in log times (",403") and UIDs.
        assert "forbidden" not in replica.log().lower(), replica.log()[-3000:]
    finally:
        replica.stop()
