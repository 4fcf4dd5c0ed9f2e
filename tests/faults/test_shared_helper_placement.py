"""Helpers for a shared filesystem are placed by the real kube-scheduler, like any pod: never on a
node that is cordoned or tainted NoSchedule. (rancher pins them to a node of its own choosing;
before the fix, so did we: the first Ready node, cordoned or not.)

The local cluster runs a helper in the directory of the node it is bound to, so where a
volume's directory appears, and where it is removed, says where its helpers ran."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

import pytest

from localcluster import LocalCluster
from localcluster.raw_api import manifest
from tests.faults.support import unique_base_path, wait_all_bound, wait_no_helper_pods
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup, volume_path, wait_gone

pytestmark = pytest.mark.cluster

TAINT = {"key": "local-path-storage.io/test-maintenance", "effect": "NoSchedule"}


@pytest.fixture
def only_node_3_schedulable(cluster: LocalCluster) -> Iterator[None]:
    """node-1 cordoned, node-2 tainted NoSchedule; both put back afterwards (shared cluster)."""
    core = cluster.core_v1()
    core.patch_node("node-1", manifest({"spec": {"unschedulable": True}}))
    core.patch_node("node-2", manifest({"spec": {"taints": [TAINT]}}))
    try:
        yield
    finally:
        core.patch_node("node-1", manifest({"spec": {"unschedulable": None}}))
        core.patch_node("node-2", manifest({"spec": {"taints": None}}))


@pytest.mark.usefixtures("only_node_3_schedulable")
def test_shared_filesystem_helpers_run_only_where_pods_may_be_scheduled(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = unique_base_path("shared")
    setup = make_setup(ConfigFiles(config={"nodePathMap": [], "sharedFileSystemPath": base}))
    setup.start()
    storage_class = setup.create_class("shared", binding_mode="Immediate")
    names = [f"burst-{i}" for i in range(8)]
    for name in names:
        setup.create_claim(name, storage_class, access_modes=("ReadWriteMany",))
    claims = wait_all_bound(setup, names, timeout=120)
    paths = [volume_path(setup.volume(claims[n]["spec"]["volumeName"]) or {}) for n in names]

    for path in paths:
        where = [n for n in ("node-1", "node-2", "node-3") if setup.node_path(n, path).is_dir()]
        assert where == ["node-3"], f"the setup helper of {path} ran on {where}"

    for name in names:
        setup.core.delete_namespaced_persistent_volume_claim(name, setup.namespace)
    for name in names:
        volume_name = str(claims[name]["spec"]["volumeName"])
        wait_gone(partial(setup.volume, volume_name), 90, f"volume {volume_name} to be deleted")
    wait_no_helper_pods(setup, 30)
    left = [path for path in paths if setup.node_path("node-3", path).exists()]
    assert not left, f"teardown helpers ran elsewhere than node-3: {left} are still there"
