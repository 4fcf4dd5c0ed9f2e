"""Drift: an out-of-band edit of an object the stack owns is named by a scheduled
`preview --refresh --expect-no-changes`, and one `up --refresh` puts the stack's values back,
even though another field manager (here `kubectl-edit`, as `kubectl edit` writes) now owns the
edited fields."""

from __future__ import annotations

import json

import pytest
from pulumi import automation as auto

from localcluster import LocalCluster
from tests.engine.support import StackFactory, api_get, api_request

DEPLOYMENT = "/apis/apps/v1/namespaces/{ns}/deployments/local-path-storage-provisioner"
CONFIG_MAP = "/api/v1/namespaces/{ns}/configmaps/local-path-config"
COMPONENT_LABEL = "app.kubernetes.io/component"


def edit_by_hand(cluster: LocalCluster, path: str, keys: tuple[str, ...], value: str) -> None:
    """A read-modify-write update, as `kubectl edit` does (field manager `kubectl-edit`)."""
    current = api_get(cluster, path)
    assert current is not None
    target = current
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    status, body = api_request(cluster, "PUT", f"{path}?fieldManager=kubectl-edit", current)
    assert status == 200, body


def apply_by_hand(cluster: LocalCluster, path: str, fields: dict[str, object]) -> None:
    """A server-side apply by another manager taking the field over, as
    `kubectl apply --server-side --force-conflicts` or a GitOps controller does."""
    current = api_get(cluster, path)
    assert current is not None
    body = {"apiVersion": current["apiVersion"], "kind": current["kind"], **fields}
    body["metadata"]["name"] = current["metadata"]["name"]
    api = cluster.admin_client
    request = api.param_serialize(
        "PATCH",
        f"{path}?fieldManager=hand-applied&force=true",
        body=body,
        header_params={"Content-Type": "application/apply-patch+yaml"},
    )
    response = api.call_api(*request)
    assert response.status == 200, response.read()  # type: ignore[no-untyped-call]


def test_out_of_band_edits_are_reported_and_repaired_by_one_up(
    stacks: StackFactory, cluster: LocalCluster
) -> None:
    stack = stacks.create()
    stack.up()
    namespace = stack.names.namespace
    config_map_path = CONFIG_MAP.format(ns=namespace)
    deployment_path = DEPLOYMENT.format(ns=namespace)
    deployed_config = api_get(cluster, config_map_path)
    assert deployed_config is not None
    good_json = deployed_config["data"]["config.json"]
    hand_json = json.dumps({"nodePathMap": [{"node": "x", "paths": ["/hand/edited"]}]})

    edit_by_hand(cluster, config_map_path, ("data", "config.json"), hand_json)
    apply_by_hand(
        cluster, deployment_path, {"metadata": {"labels": {COMPONENT_LABEL: "hand-edited"}}}
    )

    with pytest.raises(auto.CommandError) as drift:
        stack.preview(refresh=True, expect_no_changes=True)
    report = str(drift.value)
    assert "local-path-storage-config" in report
    assert "local-path-storage-deployment" in report

    repaired = stack.up(refresh=True)
    updated = sorted(change.name for change in repaired.changed() if change.op == "update")
    assert updated == ["local-path-storage-config", "local-path-storage-deployment"]
    config_map = api_get(cluster, config_map_path)
    deployment = api_get(cluster, deployment_path)
    assert config_map is not None and deployment is not None
    assert config_map["data"]["config.json"] == good_json
    assert deployment["metadata"]["labels"][COMPONENT_LABEL] == "provisioner"

    stack.preview(refresh=True, expect_no_changes=True)
