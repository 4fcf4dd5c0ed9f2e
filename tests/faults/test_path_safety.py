"""No two volumes on one directory, no step through a tenant's symlink, no directory left behind.

Each test forces the interleaving that lost or leaked data before the path book existed: a
teardown made slow so that a recreated claim's setup runs while it is in flight, a tenant's
symbolic link pointing into another volume, a retry that would have chosen another base path,
a PV of the claim's name that is not the claim's, a disk that is not mounted.
"""

from __future__ import annotations

import contextlib
import stat
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from localcluster import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE, LocalCluster, wait_for
from localcluster.raw_api import manifest
from provisioner.configuration.config import (
    DEFAULT_NODE,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
)
from tests.faults.support import (
    events_with_reason,
    our_volumes,
    unique_base_path,
    wait_no_helper_pods,
)
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    creatable,
    volume_node,
    volume_path,
    wait_gone,
)

pytestmark = pytest.mark.cluster

HOSTNAME = "kubernetes.io/hostname"
BY_NAME = "{{ .PVC.Namespace }}/{{ .PVC.Name }}"
BY_ANNOTATION = '{{ index .PVC.Annotations "dir" }}'


def config_for(*base_paths: str) -> dict[str, Any]:
    return {
        "nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(path) for path in base_paths]}]
    }


def delete_claim(setup: ProvisionerSetup, claim: str, consumer: str) -> None:
    setup.core.delete_namespaced_pod(consumer, setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim(claim, setup.namespace)


def create_claim_when_name_is_free(setup: ProvisionerSetup, name: str, storage_class: str) -> None:
    """The old claim object lingers until its protection finalizer goes: retry until then."""

    def created() -> bool | None:
        try:
            setup.create_claim(name, storage_class)
        except ApiException as error:
            if error.status == 409:
                return None
            raise
        return True

    wait_for(created, 60, f"the name {name} to be free again", interval=0.1)


def first_event(setup: ProvisionerSetup, name: str, reason: str, timeout: float = 60) -> str:
    def find() -> str | None:
        events = events_with_reason(setup, name, reason)
        return str(events[0]["message"]) if events else None

    return wait_for(find, timeout, f"a {reason} event on {name}", interval=0.3)


def test_a_recreated_claim_waits_for_the_old_volumes_teardown(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """`<ns>/<name>`: delete and recreate a claim and both volumes have one directory. The old
    one's teardown is made slow (3 s), so before the fix the new claim's setup ran while it was
    in flight, and the teardown then wiped the fresh volume."""
    base = unique_base_path("recreate")
    slow_teardown = DEFAULT_TEARDOWN_SCRIPT.replace("set -eu\n", "set -eu\nsleep 3\n", 1)
    setup = make_setup(ConfigFiles(config=config_for(base), teardown=slow_teardown))
    setup.start()
    storage_class = setup.create_class("recreate", parameters={"pathPattern": BY_NAME})
    setup.create_claim("data", storage_class)
    setup.create_consumer("first", "data", {HOSTNAME: "node-1"})
    old = setup.wait_bound("data")
    old_name, path = old["metadata"]["name"], volume_path(old)
    (setup.node_path("node-1", path) / "old.txt").write_text("old data")

    delete_claim(setup, "data", "first")
    create_claim_when_name_is_free(setup, "data", storage_class)
    setup.create_consumer("second", "data", {HOSTNAME: "node-1"})

    new = setup.wait_bound("data", timeout=90)
    assert volume_path(new) == path
    wait_gone(lambda: setup.volume(old_name), 60, f"the old volume {old_name} to go")
    time.sleep(1)
    directory = setup.node_path("node-1", path)
    assert directory.is_dir(), "the old volume's teardown removed the new volume's directory"
    assert not (directory / "old.txt").exists(), "the new volume got the old volume's data"
    (directory / "new.txt").write_text("new data")
    time.sleep(4)  # a teardown still in flight would have run by now
    assert (directory / "new.txt").read_text() == "new data"
    message = first_event(setup, "data", "WaitingForPath")
    assert old_name in message and path in message, message


def test_a_tenants_symlink_leads_no_volume_into_another(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """A tenant owns what is inside its volume and plants `evil -> ../victim` there, pointing at
    another tenant's volume (the kubelet resolves a hostPath on the host). A claim whose path
    runs through the link (a pattern from an annotation) must not get a volume there: inside a
    live volume it waits; through a directory no volume owns, the setup refuses the link; a
    forged PV through it is never torn down through it."""
    base = unique_base_path("symlink-in")
    setup = make_setup(ConfigFiles(config=config_for(base)))
    setup.start()
    storage_class = setup.create_class(
        "annotated", parameters={"pathPattern": BY_ANNOTATION, "allowUnsafePathPattern": "true"}
    )

    def bind(name: str, directory: str) -> dict[str, Any]:
        setup.create_claim(name, storage_class, annotations={"dir": directory})
        setup.create_consumer(name, name, {HOSTNAME: "node-1"})
        return setup.wait_bound(name)

    victim = bind("victim", "victim")
    victim_dir = setup.node_path("node-1", volume_path(victim))
    (victim_dir / "keep").write_text("victim data")
    tenant = bind("tenant", "tenant")
    (setup.node_path("node-1", volume_path(tenant)) / "evil").symlink_to("../victim")
    stray = setup.node_path("node-1", f"{base}/stray")  # e.g. left by a retained volume
    stray.mkdir()
    (stray / "evil").symlink_to("../victim")

    # Through the tenant's live volume, and through a directory no volume owns.
    setup.create_claim("inside", storage_class, annotations={"dir": "tenant/evil/x"})
    setup.create_consumer("inside", "inside", {HOSTNAME: "node-1"})
    setup.create_claim("through", storage_class, annotations={"dir": "stray/evil/y"})
    setup.create_consumer("through", "through", {HOSTNAME: "node-1"})

    def settled() -> bool | None:
        for name in ("inside", "through"):
            reasons = ("WaitingForPath", "ProvisioningFailed", "ProvisioningSucceeded")
            if not any(events_with_reason(setup, name, reason) for reason in reasons):
                return None
        return True

    wait_for(settled, 60, "both claims to be provisioned, refused or told to wait")
    wait_no_helper_pods(setup, timeout=30)
    assert sorted(p.name for p in victim_dir.iterdir()) == ["keep"], "a volume in the victim's"
    # The one through the live volume waits for it, and says which.
    message = first_event(setup, "inside", "WaitingForPath")
    assert tenant["metadata"]["name"] in message, message
    # The one through a directory no volume owns: the setup helper refuses the link.
    message = first_event(setup, "through", "ProvisioningFailed")
    assert f"{base}/stray/evil is a symbolic link" in message, message

    # A PV through the link, forged with our annotation and Released: never torn down.
    (victim_dir / "z").mkdir()
    forged = f"forged-{setup.suffix}"
    setup.core.create_persistent_volume(
        manifest(
            {
                "metadata": {
                    "name": forged,
                    "annotations": {"pv.kubernetes.io/provisioned-by": setup.name},
                },
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Delete",
                    "storageClassName": storage_class,
                    "claimRef": {"namespace": setup.namespace, "name": "ghost", "uid": "0"},
                    "hostPath": {"path": f"{base}/stray/evil/z"},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": HOSTNAME, "operator": "In", "values": ["node-1"]}
                                    ]
                                }
                            ]
                        }
                    },
                },
            }
        )
    )
    try:
        message = first_event(setup, forged, "VolumeFailedDelete")
        assert f"its real path is {base}/victim/z" in message, message
        wait_no_helper_pods(setup, timeout=30)
        assert setup.phase("inside") == "Pending"
        assert setup.phase("through") == "Pending"
        assert sorted(p.name for p in victim_dir.iterdir()) == ["keep", "z"]
        assert (victim_dir / "keep").read_text() == "victim data"
    finally:
        with contextlib.suppress(ApiException):
            setup.core.patch_persistent_volume(forged, manifest({"metadata": {"finalizers": None}}))
            setup.core.delete_persistent_volume(forged)


def test_a_retry_keeps_the_base_path_it_chose(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """Two base paths; the first setup makes the directory, then fails. While it runs, two
    volumes land on the base path it chose, so a fresh choice would pick the other one (before
    the fix: a second directory there, the first one leaked)."""
    first, second = sorted([unique_base_path("choice-a"), unique_base_path("choice-b")])
    flaky_setup = (
        '#!/bin/sh\nset -eu\nmkdir -p "$VOL_DIR"\n'
        'if [ ! -e "$VOL_DIR/.tried" ]; then touch "$VOL_DIR/.tried"; sleep 3; exit 1; fi\n'
    )
    setup = make_setup(ConfigFiles(config=config_for(first, second), setup=flaky_setup))
    setup.start()
    storage_class = setup.create_class("choice")
    setup.create_claim("data", storage_class)
    uid = setup.claim("data")["metadata"]["uid"]
    setup.create_consumer("data", "data", {HOSTNAME: "node-1"})

    wait_for(
        lambda: helper_pod_exists(setup, f"helper-create-pvc-{uid}"),
        60,
        "the first setup helper",
        interval=0.2,
    )
    crowd = [f"crowd-{setup.suffix}-{i}" for i in range(2)]
    for name in crowd:
        setup.core.create_persistent_volume(
            manifest(
                {
                    "metadata": {
                        "name": name,
                        "annotations": {"pv.kubernetes.io/provisioned-by": setup.name},
                    },
                    "spec": {
                        "capacity": {"storage": "1Gi"},
                        "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain",
                        "storageClassName": "crowd",
                        "hostPath": {"path": f"{first}/{name}"},
                        "nodeAffinity": {
                            "required": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": HOSTNAME,
                                                "operator": "In",
                                                "values": ["node-1"],
                                            }
                                        ]
                                    }
                                ]
                            }
                        },
                    },
                }
            )
        )
    try:
        volume = setup.wait_bound("data", timeout=90)
        assert volume_path(volume).startswith(first + "/"), volume_path(volume)
        assert setup.annotations("data")["local-path-storage.io/base-path"] == first
        leaked = setup.node_path("node-1", second)
        assert not leaked.exists() or not any(leaked.iterdir()), "a directory on the other path"
    finally:
        for name in crowd:
            with contextlib.suppress(ApiException):
                setup.core.delete_persistent_volume(name)


def test_a_pv_of_the_claims_name_that_is_not_its_volume_is_not_taken_for_it(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """While the setup helper runs, someone creates `pvc-<claim uid>` for another claim.
    AlreadyExists on saving the PV used to count as success: the claim never bound and its
    directory leaked. Now the existing PV is read and checked, the directory given back."""
    base = unique_base_path("squatted")
    slow_setup = DEFAULT_SETUP_SCRIPT.replace("set -eu\n", "set -eu\nsleep 3\n", 1)
    setup = make_setup(ConfigFiles(config=config_for(base), setup=slow_setup))
    setup.start()
    storage_class = setup.create_class("squatted")
    setup.create_claim("data", storage_class)
    uid = setup.claim("data")["metadata"]["uid"]
    setup.create_consumer("data", "data", {HOSTNAME: "node-1"})
    wait_for(lambda: helper_pod_exists(setup, f"helper-create-pvc-{uid}"), 60, "the setup helper")
    squatter = f"pvc-{uid}"
    setup.core.create_persistent_volume(
        manifest(
            {
                "metadata": {
                    "name": squatter,
                    "annotations": {"pv.kubernetes.io/provisioned-by": setup.name},
                },
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "squatted-elsewhere",
                    "claimRef": {"namespace": setup.namespace, "name": "other", "uid": "1"},
                    "hostPath": {"path": f"{base}/squatted"},
                },
            }
        )
    )
    try:
        message = first_event(setup, "data", "ProvisioningFailed", timeout=60)
        assert f"PV {squatter} exists for claim uid 1, not {uid}" in message, message
        wait_no_helper_pods(setup, timeout=60)
        assert not events_with_reason(setup, "data", "ProvisioningSucceeded")
        assert setup.phase("data") == "Pending"
        # Given back after the event (the claim keeps retrying while the squatter stays, each
        # attempt making the directory and giving it back): it must be seen empty.
        directory = setup.node_path("node-1", base)
        wait_for(
            lambda: not directory.exists() or not any(directory.iterdir()) or None,
            60,
            "the directory to be given back",
        )
    finally:
        with contextlib.suppress(ApiException):
            setup.core.delete_persistent_volume(squatter)


def helper_pod_exists(setup: ProvisionerSetup, name: str) -> bool | None:
    with contextlib.suppress(ApiException):
        setup.core.read_namespaced_pod(name, setup.namespace)
        return True
    return None


def test_a_volume_whose_disk_is_not_mounted_does_not_start(
    make_setup: Callable[..., ProvisionerSetup], cluster: LocalCluster, cluster_namespace: str
) -> None:
    """The PV's hostPath is type Directory: with the volume's directory missing (its disk not
    mounted) a pod using it stays ContainerCreating instead of writing to the root disk."""
    base = unique_base_path("unmounted")
    setup = make_setup(ConfigFiles(config=config_for(base)))
    setup.start()
    storage_class = setup.create_class("unmounted")
    setup.create_claim("data", storage_class)
    setup.create_consumer("data", "data", {HOSTNAME: "node-1"})
    volume = setup.wait_bound("data")
    assert volume["spec"]["hostPath"]["type"] == "Directory"
    node, path = volume_node(volume), volume_path(volume)
    setup.node_path(node, path).rmdir()  # the disk under the mount point is empty
    # A pod with the PV's own volume source, run for real by the harness (helper-labelled).
    user = "unmounted-user"
    cluster.core_v1().create_namespaced_pod(
        cluster_namespace,
        manifest(
            {
                "metadata": {
                    "name": user,
                    "labels": {HELPER_POD_LABEL: HELPER_POD_LABEL_VALUE},
                },
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "app",
                            "image": "busybox",
                            "command": ["/bin/sh", "-c", "echo written > /data/file"],
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                        }
                    ],
                    "volumes": [{"name": "data", "hostPath": dict(volume["spec"]["hostPath"])}],
                },
            }
        ),
    )
    time.sleep(5)
    pod = cluster.read_pod(cluster_namespace, user)
    assert pod is not None
    assert pod["status"].get("phase") == "Pending", pod["status"]
    assert not setup.node_path(node, path).exists(), "the pod wrote under the mount point"


def test_the_default_setup_honours_perm_user_and_group(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = unique_base_path("perm")
    setup = make_setup(ConfigFiles(config=config_for(base)))
    setup.start()
    storage_class = setup.create_class(
        "perm", parameters={"permPattern": "0770", "groupPattern": "2000"}
    )
    setup.create_claim("data", storage_class)
    setup.create_consumer("data", "data", {HOSTNAME: "node-1"})
    volume = setup.wait_bound("data")
    info = setup.node_path(volume_node(volume), volume_path(volume)).stat()
    assert stat.S_IMODE(info.st_mode) == 0o770
    assert info.st_gid == 2000


def test_nested_base_paths_are_refused_at_start(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = unique_base_path("nested")
    setup = make_setup(ConfigFiles(config=config_for(base, f"{base}/inner")))
    replica = setup.start(wait_ready=False)
    reason = f'"{base}/inner" lies inside the base path "{base}"'

    def not_ready_saying_why() -> bool | None:
        assert replica.alive(), "an invalid config at start-up must not end the process"
        status, body = replica.probe("/readyz")
        return True if status == 503 and reason in body else None

    wait_for(not_ready_saying_why, 30, "/readyz to refuse the nested base paths")
    assert reason in replica.log()
    assert replica.stop() == 0
    assert not our_volumes(setup)
