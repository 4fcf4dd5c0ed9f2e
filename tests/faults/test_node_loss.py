"""Nodes that go away: one that claims are waiting for, and one that holds live volumes.

A claim whose selected node is deleted gets the annotation removed so the scheduler picks again
(the library's reschedule). A volume whose node is gone cannot be cleaned: the documented
behaviour (provisioner/provisioning/claims.py, NodeGone) is a Released PV kept with a Warning and
its data untouched; an admin deleting that PV lets it go without cleanup, and if the node comes back
the teardown of a still-Released volume resumes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from localcluster import wait_for
from tests.faults.support import (
    assert_each_claim_bound_once,
    assert_no_orphan_directories,
    create_claims_with_consumers,
    event_count,
    events_with_reason,
    helper_pods,
    unique_base_path,
    wait_all_bound,
    wait_no_helper_pods,
)
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
SELECTED_NODE = "volume.kubernetes.io/selected-node"
# A node whose disk is broken: setup fails there while the marker is in its base path.
BROKEN_DISK_SETUP = """#!/bin/sh
set -eu
# The base path, as setup code sees it: read-only, at LPS_BASE_VIEW.
if [ -e "$LPS_BASE_VIEW/.broken" ]; then
  echo "disk broken on this node" >&2
  exit 5
fi
mkdir -m 0777 -p "$VOL_DIR"
"""


def test_claims_waiting_for_a_deleted_node_are_rescheduled_and_bound_elsewhere(
    make_setup: Callable[..., ProvisionerSetup], node_names: Callable[[str], str]
) -> None:
    base = unique_base_path("resched")
    config = {**default_config(base), "cmdTimeoutSeconds": 30}
    setup = make_setup(ConfigFiles(config=config, setup=BROKEN_DISK_SETUP))
    cluster = setup.cluster
    zone = {ZONE: setup.suffix}
    doomed, survivor = node_names("doomed"), node_names("survivor")
    cluster.add_node(doomed, zone)
    broken = cluster.node_dir(doomed) / base.lstrip("/") / ".broken"
    broken.parent.mkdir(parents=True)
    broken.touch()
    setup.start()
    storage_class = setup.create_class("resched")
    names = [f"waiting-{number}" for number in range(4)]
    create_claims_with_consumers(setup, storage_class, names, zone)

    # Twice: the node is deleted in the lull before the retries after the second failures
    # (2 s), not while a retry may be running there (a setup that runs as its node is deleted
    # leaves its directory on the dead node, where nothing can remove it). One failure each
    # was not enough once one node's setups share pods: they fail up to a pod run apart, so
    # the first one's retry (1 s) could start as the node went.
    def all_waiting_on_doomed() -> bool | None:
        for name in names:
            if setup.annotations(name).get(SELECTED_NODE) != doomed:
                return None
            if event_count(events_with_reason(setup, name, "ProvisioningFailed")) < 2:
                return None
        return True

    wait_for(all_waiting_on_doomed, 60, f"every claim to wait for {doomed}", interval=0.5)
    cluster.add_node(survivor, zone)
    cluster.delete_node(doomed)

    wait_all_bound(setup, names, timeout=180)
    volumes = assert_each_claim_bound_once(setup, names)
    assert {volume_node(volume) for volume in volumes} == {survivor}
    for name in names:
        messages = [
            event["message"] for event in events_with_reason(setup, name, "ProvisioningFailed")
        ]
        assert any("disk broken on this node" in message for message in messages), messages
        assert any(
            f"selected node {doomed} no longer exists" in message and SELECTED_NODE in message
            for message in messages
        ), messages
    wait_no_helper_pods(setup, timeout=60)
    assert_no_orphan_directories(cluster, [base], volumes)


def released_and_refused(setup: ProvisionerSetup, volume: str) -> dict[str, Any] | None:
    current = setup.volume(volume)
    if current is None or current["status"]["phase"] != "Released":
        return None
    events = events_with_reason(setup, volume, "VolumeFailedDelete")
    return events[0] if events else None


def test_a_deleted_node_keeps_its_volumes_until_an_admin_deletes_them_or_it_returns(
    make_setup: Callable[..., ProvisionerSetup], node_names: Callable[[str], str]
) -> None:
    base = unique_base_path("nodegone")
    setup = make_setup(ConfigFiles(config=default_config(base)))
    cluster = setup.cluster
    zone = {ZONE: setup.suffix}
    lost = node_names("lost")
    cluster.add_node(lost, zone)
    setup.start()
    storage_class = setup.create_class("nodegone")
    names = ["deleted-by-admin", "kept-until-return"]
    create_claims_with_consumers(setup, storage_class, names, zone)
    wait_all_bound(setup, names, timeout=120)
    volumes = {
        volume["spec"]["claimRef"]["name"]: volume
        for volume in assert_each_claim_bound_once(setup, names)
    }
    data = {}
    for name, volume in volumes.items():
        assert volume_node(volume) == lost
        data[name] = cluster.node_dir(lost) / volume_path(volume).lstrip("/") / "data.txt"
        data[name].write_text(f"data of {name}")

    cluster.delete_node(lost)
    time.sleep(1)  # the provisioner's node watch sees the node go before the volumes are freed
    for name in names:
        setup.core.delete_namespaced_pod(name, setup.namespace, grace_period_seconds=0)
        setup.core.delete_namespaced_persistent_volume_claim(name, setup.namespace)
    for name, volume in volumes.items():
        pv = volume["metadata"]["name"]
        event = wait_for(partial(released_and_refused, setup, pv), 90, f"{pv} refused")
        assert event["type"] == "Warning"
        assert f"node {lost} no longer exists" in event["message"], event["message"]
        assert "was not removed" in event["message"]
        assert data[name].read_text() == f"data of {name}", "data untouched"
    assert not helper_pods(setup), "no helper may be sent to a node that is gone"

    # The admin lets one go: our finalizer is removed without any cleanup.
    gone_pv = volumes["deleted-by-admin"]["metadata"]["name"]
    setup.core.delete_persistent_volume(gone_pv)
    wait_gone(lambda: setup.volume(gone_pv), 60, f"{gone_pv} to be deleted")
    assert data["deleted-by-admin"].read_text() == "data of deleted-by-admin"
    kept_pv = volumes["kept-until-return"]["metadata"]["name"]
    current = setup.volume(kept_pv)
    assert current is not None and current["status"]["phase"] == "Released"

    # The node comes back: the teardown of the volume still Released resumes.
    cluster.add_node(lost, zone)
    wait_gone(lambda: setup.volume(kept_pv), 90, f"{kept_pv} to be torn down")
    assert not data["kept-until-return"].parent.exists()
    assert data["deleted-by-admin"].read_text() == "data of deleted-by-admin"
    wait_no_helper_pods(setup, timeout=60)
