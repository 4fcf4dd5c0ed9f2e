"""The provisioner that `pulumi up` deploys runs for real (the harness runs its Deployment's pod
as a kubelet would: in-cluster config from the projected token, the ConfigMap mounted with
kubelet's atomic updates, probes) and binds claims; a stack config change reaches the running
pod through a ConfigMap update alone; an invalid config pushed by hand leaves the pod on its
last good config and says so."""

from __future__ import annotations

import json

from localcluster import LocalCluster, wait_for
from tests.engine.support import (
    StackFactory,
    Tenant,
    api_get,
    api_request,
    base_config,
    restart_count,
    volume_location,
    wait_provisioner_ready,
)


def test_deployed_pod_binds_claims_and_follows_config_changes_without_restarting(
    stacks: StackFactory, cluster: LocalCluster
) -> None:
    stack = stacks.create()
    names = stack.names
    first_path = f"/opt/lps-first-{names.suffix}"
    second_path = f"/opt/lps-second-{names.suffix}"
    stack.set_config("nodePathMap", base_config(names, first_path)["nodePathMap"])
    stack.up()
    (pod,) = wait_provisioner_ready(cluster, names.namespace)

    tenant = Tenant(cluster, names.class_name)
    tenant.claim_with_consumer("first")
    node, path, on_disk = volume_location(cluster, tenant.wait_bound("first"))
    assert path.startswith(f"{first_path}/")
    assert on_disk.is_dir()
    assert node in cluster.nodes

    # `pulumi config set` of a new nodePathMap, then `pulumi up`: the ConfigMap alone changes.
    stack.set_config("nodePathMap", base_config(names, second_path)["nodePathMap"])
    up = stack.up()
    assert [(c.op, c.name) for c in up.changed()] == [("update", "local-path-storage-config")]

    def on_new_path() -> str | None:
        # Claims made until the pod sees the new file may still use the old path: each probe
        # is a fresh claim, as an application team's next claim would be.
        claim = f"next-{len(made)}"
        made.append(claim)
        tenant.claim_with_consumer(claim)
        _, next_path, next_disk = volume_location(cluster, tenant.wait_bound(claim))
        return next_path if next_path.startswith(f"{second_path}/") and next_disk.is_dir() else None

    made: list[str] = []
    wait_for(on_new_path, 60, "a claim provisioned on the new node path", interval=1)
    (same_pod,) = wait_provisioner_ready(cluster, names.namespace)
    assert same_pod["metadata"]["uid"] == pod["metadata"]["uid"]
    assert restart_count(same_pod) == 0


def test_invalid_config_pushed_by_hand_keeps_the_last_good_one(
    stacks: StackFactory, cluster: LocalCluster
) -> None:
    stack = stacks.create()
    names = stack.names
    good_path = f"/opt/lps-good-{names.suffix}"
    stack.set_config("nodePathMap", base_config(names, good_path)["nodePathMap"])
    stack.up()
    (pod,) = wait_provisioner_ready(cluster, names.namespace)

    config_map_path = f"/api/v1/namespaces/{names.namespace}/configmaps/local-path-config"
    bad = {"data": {"config.json": json.dumps({"nodePathMap": [{"node": "n", "paths": ["x"]}]})}}
    status, answer = api_request(
        cluster,
        "PATCH",
        f"{config_map_path}?fieldManager=kubectl-edit",
        bad,
        content_type="application/merge-patch+json",
    )
    assert status == 200, answer

    def invalid_config_event() -> dict[str, object] | None:
        events = api_get(
            cluster,
            f"/api/v1/namespaces/{names.namespace}/events"
            "?fieldSelector=involvedObject.name%3Dlocal-path-config",
        )
        assert events is not None
        for event in events["items"]:
            if event["reason"] == "InvalidConfig" and event["type"] == "Warning":
                return dict(event)
        return None

    event = wait_for(invalid_config_event, 30, "an InvalidConfig event on the ConfigMap")
    assert "the last valid one stays in force" in str(event["message"])
    assert 'nodePathMap[0].paths[0]: "x" must be an absolute path' in str(event["message"])

    tenant = Tenant(cluster, names.class_name)
    tenant.claim_with_consumer("after-bad-push")
    _, path, on_disk = volume_location(cluster, tenant.wait_bound("after-bad-push"))
    assert path.startswith(f"{good_path}/")
    assert on_disk.is_dir()
    (same_pod,) = wait_provisioner_ready(cluster, names.namespace)
    assert same_pod["metadata"]["uid"] == pod["metadata"]["uid"]
    assert restart_count(same_pod) == 0
