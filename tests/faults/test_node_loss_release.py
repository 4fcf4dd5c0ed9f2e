"""Nodes that go away, for a class that opts in (`nodeLossGracePeriod`): a StatefulSet's claim
on a deleted node is released once the node has been gone that long, and the StatefulSet gets a
new volume on another node; the old PV goes without a helper pod and its data stays on the lost
node. A class without the parameter keeps its claim and PV; a node back within the period keeps
its volumes untouched."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from http import HTTPStatus
from typing import Any

import pytest
from kubernetes import client

from localcluster import LocalCluster, wait_for
from localcluster.raw_api import manifest
from tests.faults.api_answer_faults import provisioner_with_faults
from tests.faults.support import events_with_reason, helper_pods, unique_base_path
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    default_config,
    volume_node,
    volume_path,
    wait_gone,
)

pytestmark = pytest.mark.cluster

ZONE = "faults.lps.io/zone"
GRACE_SECONDS = 10


def create_stateful_set(
    setup: ProvisionerSetup, name: str, storage_class: str, zone: dict[str, str]
) -> None:
    """One replica with one claim from `storage_class`, on the nodes of `zone`."""
    labels = {"app": name}
    body = {
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": zone,
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.invalid/app:1",
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                        }
                    ],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": storage_class,
                        "resources": {"requests": {"storage": "1Mi"}},
                    },
                }
            ],
        },
    }
    apps = client.AppsV1Api(setup.cluster.admin_client)
    apps.create_namespaced_stateful_set(setup.namespace, manifest(body))


def bound_volume(setup: ProvisionerSetup, claim: str, not_uid: str = "") -> dict[str, Any] | None:
    """The PV bound to the claim of that name (but for one of UID `not_uid`), once it is Bound;
    None while there is no such claim."""
    try:
        current = setup.claim(claim)
    except client.ApiException as error:
        if error.status == HTTPStatus.NOT_FOUND:
            return None
        raise
    if current["metadata"]["uid"] == not_uid or current.get("status", {}).get("phase") != "Bound":
        return None
    return setup.volume(current["spec"]["volumeName"])


def test_a_statefulsets_claim_on_a_lost_node_is_released_and_made_again_elsewhere(
    make_setup: Callable[..., ProvisionerSetup], node_names: Callable[[str], str]
) -> None:
    base = unique_base_path("nodeloss")
    setup = make_setup(ConfigFiles(config=default_config(base)))
    cluster = setup.cluster
    zone = {ZONE: setup.suffix}
    lost, spare = node_names("lost"), node_names("spare")
    cluster.add_node(lost, zone)
    setup.start()
    releasing = setup.create_class(
        "release", parameters={"nodeLossGracePeriod": f"{GRACE_SECONDS}s"}
    )
    keeping = setup.create_class("keep")
    create_stateful_set(setup, "web", releasing, zone)
    create_stateful_set(setup, "db", keeping, zone)
    first = {
        claim: wait_for(partial(bound_volume, setup, claim), 120, f"{claim} bound")
        for claim in ("data-web-0", "data-db-0")
    }
    data = {}
    for claim, volume in first.items():
        assert volume_node(volume) == lost
        data[claim] = cluster.node_dir(lost) / volume_path(volume).lstrip("/") / "data.txt"
        data[claim].write_text(f"data of {claim}")
    old_uid = setup.claim("data-web-0")["metadata"]["uid"]

    cluster.add_node(spare, zone)
    cluster.delete_node(lost)
    gone_at = time.monotonic()
    # The lost node's pods are deleted as the pod garbage collector does once their node is
    # gone (after its quarantine; a drain does it at once): the StatefulSet makes them again,
    # Pending, for the scheduler.
    for pod in ("web-0", "db-0"):
        setup.core.delete_namespaced_pod(pod, setup.namespace, grace_period_seconds=0)

    remade = wait_for(
        partial(bound_volume, setup, "data-web-0", old_uid),
        GRACE_SECONDS + 60,
        "data-web-0 made again and bound",
    )
    took = time.monotonic() - gone_at
    assert volume_node(remade) == spare
    assert GRACE_SECONDS <= took <= GRACE_SECONDS + 20, f"made again after {took:.1f}s"
    old_pv = first["data-web-0"]["metadata"]["name"]
    wait_gone(lambda: setup.volume(old_pv), 60, f"{old_pv} to be let go")
    assert data["data-web-0"].read_text() == "data of data-web-0", "the data stays on the node"
    released = events_with_reason(setup, "data-web-0", "ClaimReleasedForNodeLoss")
    assert released, "the released claim says why"
    message = released[0]["message"]
    assert lost in message and f"{GRACE_SECONDS}s" in message, message

    # The class without the parameter keeps today's behaviour: claim and PV stay, untouched.
    db = setup.claim("data-db-0")
    assert db["status"]["phase"] == "Bound"
    assert db["spec"]["volumeName"] == first["data-db-0"]["metadata"]["name"]
    assert setup.volume(first["data-db-0"]["metadata"]["name"]) is not None
    assert data["data-db-0"].read_text() == "data of data-db-0"
    assert not [pod for pod in helper_pods(setup) if pod["spec"].get("nodeName") == lost], (
        "no helper pod is sent to a node that is gone"
    )


def test_a_node_back_within_the_grace_period_keeps_its_volumes(
    make_setup: Callable[..., ProvisionerSetup], node_names: Callable[[str], str]
) -> None:
    base = unique_base_path("nodeback")
    setup = make_setup(ConfigFiles(config=default_config(base)))
    cluster = setup.cluster
    zone = {ZONE: setup.suffix}
    flaky = node_names("flaky")
    cluster.add_node(flaky, zone)
    setup.start()
    releasing = setup.create_class("release", parameters={"nodeLossGracePeriod": "15s"})
    create_stateful_set(setup, "web", releasing, zone)
    volume = wait_for(lambda: bound_volume(setup, "data-web-0"), 120, "data-web-0 bound")
    uid = setup.claim("data-web-0")["metadata"]["uid"]
    data = cluster.node_dir(flaky) / volume_path(volume).lstrip("/") / "data.txt"
    data.write_text("kept")

    cluster.delete_node(flaky)
    time.sleep(3)
    cluster.add_node(flaky, zone)
    time.sleep(15 + 5)  # past the period counted from the node's deletion
    claim = setup.claim("data-web-0")
    assert claim["metadata"]["uid"] == uid and claim["metadata"].get("deletionTimestamp") is None
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    current = setup.volume(volume["metadata"]["name"])
    assert current is not None and current["status"]["phase"] == "Bound"
    assert data.read_text() == "kept"
    assert not events_with_reason(setup, "data-web-0", "ClaimReleasedForNodeLoss")


CLAIMS = "/api/v1/namespaces/{namespace}/persistentvolumeclaims/data-web-0"
DELETE_FAULTS = {
    "5xx": (HTTPStatus.SERVICE_UNAVAILABLE, False),
    "refused-403": (HTTPStatus.FORBIDDEN, False),
    "answer-lost-after-commit": (HTTPStatus.SERVICE_UNAVAILABLE, True),
}


@pytest.mark.parametrize(("status", "committed"), DELETE_FAULTS.values(), ids=DELETE_FAULTS)
def test_a_release_whose_delete_failed_leaves_an_ordinary_volume_once_the_node_is_back(
    make_setup: Callable[..., ProvisionerSetup],
    cluster: LocalCluster,
    node_names: Callable[[str], str],
    status: int,
    committed: bool,
) -> None:
    """The release's DELETE of the claim fails (a 5xx or a 403, the server never carrying it
    out) and the node comes back: the claim stays, and when its tenant deletes it weeks later
    the volume is torn down as any Delete volume. A DELETE carried out whose answer was lost
    is a release all the same: the PV is let go, its data kept, node back or not."""
    base = unique_base_path("halfrelease")
    setup = make_setup(ConfigFiles(config=default_config(base)))
    zone = {ZONE: setup.suffix}
    flaky = node_names("flaky")
    cluster.add_node(flaky, zone)
    with provisioner_with_faults(setup, cluster) as (_, faults):
        releasing = setup.create_class("release", parameters={"nodeLossGracePeriod": "5s"})
        create_stateful_set(setup, "web", releasing, zone)
        volume = wait_for(lambda: bound_volume(setup, "data-web-0"), 120, "data-web-0 bound")
        pv = volume["metadata"]["name"]
        uid = setup.claim("data-web-0")["metadata"]["uid"]
        data = cluster.node_dir(flaky) / volume_path(volume).lstrip("/") / "data.txt"
        data.write_text("the tenant's")
        claim_path = CLAIMS.format(namespace=setup.namespace)
        failing = faults.arm(
            "DELETE", lambda path: path == claim_path, status, times=10**6, send_first=committed
        )

        cluster.delete_node(flaky)
        setup.core.delete_namespaced_pod("web-0", setup.namespace, grace_period_seconds=0)
        failing.wait_answered(1, 60)
        cluster.add_node(flaky, zone)
        if committed:
            wait_gone(lambda: setup.volume(pv), 60, f"{pv} to be let go")
            assert data.read_text() == "the tenant's", "the released claim's data stays"
            wait_for(
                lambda: events_with_reason(setup, pv, "VolumeLetGo") or None, 30, "VolumeLetGo"
            )
            return
        time.sleep(5)  # the node is back: the release is not tried again
        tries = failing.answered
        time.sleep(5)
        assert failing.answered == tries, "the release goes on with the node back"
        claim = setup.claim("data-web-0")
        assert claim["metadata"]["uid"] == uid and not claim["metadata"].get("deletionTimestamp")
        current = setup.volume(pv)
        assert current is not None and current["status"]["phase"] == "Bound"

        # Weeks later, its tenant deletes the claim the ordinary way.
        apps = client.AppsV1Api(cluster.admin_client)
        apps.delete_namespaced_stateful_set("web", setup.namespace)
        wait_gone(lambda: delete_pod(setup, "web-0"), 60, "web-0 to go")
        setup.core.delete_namespaced_persistent_volume_claim("data-web-0", setup.namespace)
        wait_gone(lambda: setup.volume(pv), 120, f"{pv} to be torn down")
        assert not data.parent.exists(), "the volume went without its teardown: data left"
        assert not events_with_reason(setup, pv, "VolumeLetGo")


def delete_pod(setup: ProvisionerSetup, name: str) -> dict[str, Any] | None:
    """Deletes the pod of that name at once; None once there is none (its StatefulSet, deleted,
    makes it no more)."""
    try:
        pod = setup.core.delete_namespaced_pod(name, setup.namespace, grace_period_seconds=0)
    except client.ApiException as error:
        if error.status == HTTPStatus.NOT_FOUND:
            return None
        raise
    return dict(pod.to_dict())
