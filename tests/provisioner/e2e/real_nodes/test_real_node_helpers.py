"""Setup and teardown helper pods run by a real kubelet: claims Bound on real nodes, the data
their pods write on that node's disk, released volumes removed from their own node only, and
batch pods whose volumes keep their own outcomes and data.

Every helper pod is recorded as the API server saw it, so the tests read what the real kubelet
reported: containerd's container IDs and the image digest of the busybox pulled from the local
registry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localcluster import LocalCluster
from provisioner.configuration.config import DEFAULT_TEARDOWN_SCRIPT
from provisioner.helper_pods.pod_shapes import PREPARE_CONTAINER
from tests.faults.support import (
    SHARED_HELPER_PODS,
    assert_each_claim_bound_once,
    assert_no_orphan_directories,
    overlapping_runs,
    unique_base_path,
    wait_all_bound,
    wait_no_helper_pods,
)
from tests.provisioner.e2e.real_nodes.support import (
    Serve,
    assert_ran_under_containerd_from_the_registry,
    create_writer,
    wait_succeeded,
    with_prelude,
)
from tests.provisioner.e2e.support import (
    ProvisionerSetup,
    volume_node,
    volume_path,
    wait_gone,
)

pytestmark = [pytest.mark.realnode, pytest.mark.cluster]


def bind_on_real_1(
    setup: ProvisionerSetup, names: list[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, Path]]:
    """Claims created at once, each with a pod on real-1 writing its name into the volume:
    their PVs and their directories on real-1's disk, once Bound and written."""
    storage_class = setup.create_class("batch")
    for name in names:
        setup.create_claim(name, storage_class)
        create_writer(setup, name, name, "real-1", f"echo {name} > /data/file")
    claims = wait_all_bound(setup, names, timeout=180)
    wait_succeeded(setup, names)
    volumes = {name: setup.volume(claims[name]["spec"]["volumeName"]) or {} for name in names}
    paths = {name: setup.node_path("real-1", volume_path(volumes[name])) for name in names}
    for name in names:
        assert (paths[name] / "file").read_text() == f"{name}\n", name
    return volumes, paths


def release(setup: ProvisionerSetup, claim: str, pod: str) -> None:
    setup.core.delete_namespaced_pod(pod, setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim(claim, setup.namespace)


def test_a_claim_binds_on_a_real_node_and_its_release_removes_only_that_node_s_directory(
    cluster: LocalCluster,
    serving: Serve,
) -> None:
    base = unique_base_path("real-single")
    setup, recorder = serving(base)
    storage_class = setup.create_class("single")
    setup.create_claim("data", storage_class)
    create_writer(setup, "writer", "data", "real-1", "echo written on $(hostname) > /data/file")

    volume = setup.wait_bound("data", timeout=90)
    wait_succeeded(setup, ["writer"])
    path = volume_path(volume)
    assert volume_node(volume) == "real-1"
    assert path.startswith(f"{base}/")
    # The pod's hostname is its name: the file came from the pod, through the kubelet's mount.
    assert (setup.node_path("real-1", path) / "file").read_text() == "written on writer\n"
    assert not setup.node_path("real-2", path).exists()
    # The same path on the other node, with data: a teardown run on the wrong node removes it.
    elsewhere = setup.node_path("real-2", path)
    elsewhere.mkdir(parents=True)
    (elsewhere / "file").write_text("real-2's own")

    release(setup, "data", "writer")
    wait_gone(lambda: setup.volume(volume["metadata"]["name"]), 90, "the released volume")
    assert not setup.node_path("real-1", path).exists()
    assert (elsewhere / "file").read_text() == "real-2's own"
    wait_no_helper_pods(setup, timeout=60)
    pods = recorder.stop()
    assert [pod.action for pod in pods] == ["create", "delete"], pods
    assert all(pod.volumes == (volume["metadata"]["name"],) for pod in pods), pods
    assert_ran_under_containerd_from_the_registry(cluster, pods)


def test_a_claim_on_a_base_path_that_must_exist_takes_one_helper_pod_prepare_then_setup(
    cluster: LocalCluster,
    serving: Serve,
) -> None:
    """`prepare` makes the directory in an init container; the setup, in the same pod, sees it
    as a subPath of the base path, which the real kubelet resolves only when the setup starts
    (a hostPath of the directory would be checked at the pod's start, before it existed)."""
    base = unique_base_path("real-must-exist")
    for node in ("real-1", "real-2"):
        (cluster.node_dir(node) / base.lstrip("/")).mkdir(parents=True)
    setup, recorder = serving(base, create=False)
    volumes, paths = bind_on_real_1(setup, ["data"])
    release(setup, "data", "data")
    wait_gone(lambda: setup.volume(volumes["data"]["metadata"]["name"]), 90, "the released volume")
    assert not paths["data"].exists()
    assert setup.node_path("real-1", base).is_dir(), "the base path stays"
    wait_no_helper_pods(setup, timeout=60)
    pods = recorder.stop()
    assert [pod.action for pod in pods] == ["create", "delete"], pods
    create = pods[0]
    (prepared,) = create.status["initContainerStatuses"]
    assert prepared["name"] == PREPARE_CONTAINER
    assert prepared["state"]["terminated"]["exitCode"] == 0, prepared
    (setup_status,) = create.status["containerStatuses"]
    assert setup_status["state"]["terminated"]["exitCode"] == 0, setup_status
    assert_ran_under_containerd_from_the_registry(cluster, pods)


def test_a_burst_on_a_real_node_shares_batch_pods_and_a_kept_volume_survives_the_teardowns(
    cluster: LocalCluster,
    serving: Serve,
) -> None:
    """Six claims for real-1 at once: the first gets the node's pod to itself, the others
    queue behind it and share the next (one init container each). Four are released at once
    (a teardown batch); the two kept, under the same base path, keep their data."""
    base = unique_base_path("real-batch")
    setup, recorder = serving(base, start_args=SHARED_HELPER_PODS)
    names = [f"burst-{number}" for number in range(6)]
    volumes, paths = bind_on_real_1(setup, names)
    created = [pod for pod in recorder.pods() if pod.action == "create"]
    assert any(len(pod.volumes) == 1 for pod in created), created
    assert any(len(pod.volumes) > 1 for pod in created), "no setup pod served several volumes"
    assert sorted(v for pod in created for v in pod.volumes) == sorted(
        volume["metadata"]["name"] for volume in volumes.values()
    ), "one setup each"

    released, kept = names[:4], names[4:]
    for name in released:
        release(setup, name, name)
    for name in released:
        volume = volumes[name]["metadata"]["name"]
        wait_gone(lambda: setup.volume(volume), 120, f"the volume of {name}")  # noqa: B023
        assert not paths[name].exists(), name
    wait_no_helper_pods(setup, timeout=60)
    for name in kept:
        assert (paths[name] / "file").read_text() == f"{name}\n", name
    pods = recorder.stop()
    deleted = [pod for pod in pods if pod.action == "delete"]
    assert any(len(pod.volumes) > 1 for pod in deleted), "no teardown pod served several volumes"
    assert not overlapping_runs(pods)
    assert_ran_under_containerd_from_the_registry(cluster, pods)
    kept_volumes = assert_each_claim_bound_once(setup, kept)
    assert_no_orphan_directories(cluster, [base], kept_volumes)


# Fails while the volume holds a marker the test puts there (and takes away to let it pass).
STUCK_MARKER = ".teardown-fails"
FAILING_TEARDOWN = with_prelude(
    DEFAULT_TEARDOWN_SCRIPT,
    f'if [ -e "$VOL_DIR/{STUCK_MARKER}" ]; then\n'
    '  echo "cannot remove $VOL_DIR yet" >&2; exit 1\n'
    "fi\n",
)


def test_a_volume_whose_teardown_fails_in_a_batch_pod_keeps_its_data_as_its_neighbours_go(
    cluster: LocalCluster,
    serving: Serve,
) -> None:
    """gone-0 is released first and gets the node's pod to itself; the others, stuck among
    them, queue behind it and share the next teardown pod, in which stuck's teardown fails:
    its neighbours' directories go, its data stays with its PV, until the marker goes."""
    base = unique_base_path("real-batch-keep")
    setup, recorder = serving(base, teardown=FAILING_TEARDOWN, start_args=SHARED_HELPER_PODS)
    names = [f"gone-{number}" for number in range(5)]
    volumes, paths = bind_on_real_1(setup, names)
    stuck = "gone-3"
    (paths[stuck] / STUCK_MARKER).write_text("keep me a while")
    for name in names:
        release(setup, name, name)

    for name in names:
        if name != stuck:
            volume = volumes[name]["metadata"]["name"]
            wait_gone(lambda: setup.volume(volume), 120, f"the volume of {name}")  # noqa: B023
            assert not paths[name].exists(), name
    stuck_volume = volumes[stuck]["metadata"]["name"]
    failed = setup.wait_event(stuck_volume, "VolumeFailedDelete", timeout=60)
    assert f"cannot remove {volume_path(volumes[stuck])} yet" in failed["message"], failed
    assert "helper-batch-delete-" in failed["message"], "it failed inside a batch"
    assert setup.volume(stuck_volume) is not None, "its PV stays while its data does"
    assert (paths[stuck] / "file").read_text() == f"{stuck}\n"
    shared = [p for p in recorder.pods() if p.action == "delete" and stuck_volume in p.volumes]
    assert any(len(pod.volumes) > 1 for pod in shared), shared
    assert_ran_under_containerd_from_the_registry(cluster, shared)

    (paths[stuck] / STUCK_MARKER).unlink()
    wait_gone(lambda: setup.volume(stuck_volume), 120, "the stuck volume, once it may go")
    assert not paths[stuck].exists()
    assert not overlapping_runs(recorder.stop())
