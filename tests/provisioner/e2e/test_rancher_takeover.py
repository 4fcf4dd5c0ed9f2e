"""Taking over a running rancher/local-path-provisioner v0.0.37 in place, with rancher's real
binary: rancher provisions volumes with data, then stops, and ours starts under its provisioner
name, on its namespace, ConfigMap (rancher's own scripts) and classes, as the adopting stack
runs it. Rancher's volumes are ours from then on: the data stays, a released Delete volume is
removed by rancher's teardown under our path checks, a Retain one is kept, and a claim rancher
had in flight gets exactly one PV.

rancher v0.0.37 runs without leader election (`pvController.LeaderElection(false)` in its
main.go), so there is no lock the two could share: the switch is exactly-once because rancher
is stopped before ours starts and both name a claim's PV `pvc-<claim UID>` and its directory
`<base>/pvc-<uid>_<namespace>_<name>`, so whatever rancher finished, ours finds and keeps.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import NEVER_STARTS_IMAGE
from localcluster.raw_api import call_json, manifest
from provisioner.configuration.config import RANCHER_DEFAULT_PATH
from provisioner.objects.quantities import format_bytes
from provisioner.provisioning.annotations import (
    NODE_ANNOTATION,
    PROVISIONED_BY,
    RANCHER_NODE_ANNOTATION,
)
from tests.localcluster.image_pods import IMAGE as SHELL_IMAGE
from tests.provisioner.e2e.rancher_process import (
    RANCHER_SETUP,
    RANCHER_TEARDOWN,
    RancherProcess,
    labelled_helper_pod,
)
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    eventually,
    volume_node,
    volume_path,
    wait_gone,
)

pytestmark = pytest.mark.cluster

DATA = "written while rancher served this volume\n"
RANCHER_SELECTOR = "app=local-path-provisioner"
GATE = "test.local-path-storage.io/held"
BY_NAMESPACE_AND_NAME = {"pathPattern": "{{ .PVC.Namespace }}/{{ .PVC.Name }}"}
NODE_1 = {"kubernetes.io/hostname": "node-1"}


@pytest.fixture
def rancher_installation(
    make_setup: Callable[..., ProvisionerSetup], tmp_path: Path
) -> Iterator[tuple[ProvisionerSetup, Callable[[], RancherProcess]]]:
    """A namespace with rancher's ConfigMap (its scripts, its helperPod.yaml with the harness's
    label) and a way to start rancher on it; rancher is stopped at the end in any case."""
    setup = make_setup(
        ConfigFiles(
            setup=RANCHER_SETUP, teardown=RANCHER_TEARDOWN, helper_pod=labelled_helper_pod()
        )
    )
    started: list[RancherProcess] = []

    def start() -> RancherProcess:
        rancher = RancherProcess(
            setup.cluster,
            setup.config_dir,
            setup.name,
            setup.namespace,
            tmp_path / f"rancher-{len(started)}.log",
        )
        started.append(rancher)
        rancher.wait_ready()
        return rancher

    yield setup, start
    for rancher in started:
        rancher.stop(signal.SIGKILL)


def volumes_of(setup: ProvisionerSetup, claim: str) -> list[dict[str, Any]]:
    uid = setup.claim(claim)["metadata"]["uid"]
    listed = call_json(setup.core.list_persistent_volume)
    return [
        volume
        for volume in listed["items"]
        if (volume["spec"].get("claimRef") or {}).get("uid") == uid
    ]


def on_disk(setup: ProvisionerSetup, volume: dict[str, Any]) -> Path:
    return setup.node_path(volume_node(volume), volume_path(volume))


def release(setup: ProvisionerSetup, claim: str) -> None:
    setup.core.delete_namespaced_pod(claim, setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim(claim, setup.namespace)


def test_ours_serves_rancher_s_volumes_after_taking_over_its_installation(
    rancher_installation: tuple[ProvisionerSetup, Callable[[], RancherProcess]],
) -> None:
    setup, start_rancher = rancher_installation
    delete_class = setup.create_class("rancher-delete")
    retain_class = setup.create_class("rancher-retain", reclaim_policy="Retain")
    rancher = start_rancher()
    claims = {
        "kept-delete": delete_class,
        "kept-retain": retain_class,
        "old-delete": delete_class,
        "old-retain": retain_class,
    }
    for claim, storage_class in claims.items():
        setup.create_claim(claim, storage_class)
        setup.create_consumer(claim, claim)
    volumes = {claim: setup.wait_bound(claim) for claim in claims}
    for claim, volume in volumes.items():
        annotations = volume["metadata"]["annotations"]
        assert annotations[PROVISIONED_BY] == setup.name
        assert RANCHER_NODE_ANNOTATION in annotations, "not rancher's PV shape"
        assert volume_path(volume).endswith(f"_{setup.namespace}_{claim}")
        (on_disk(setup, volume) / "data").write_text(DATA)
    # A claim whose node the scheduler has just chosen: rancher may or may not get to it.
    setup.create_claim("in-flight", delete_class)
    setup.create_consumer("in-flight", "in-flight")
    eventually(
        lambda: setup.annotations("in-flight").get("volume.kubernetes.io/selected-node"),
        60,
        "the scheduler to choose the in-flight claim's node",
    )
    rancher.stop()

    setup.start()

    for volume in volumes.values():
        assert (on_disk(setup, volume) / "data").read_text() == DATA
    in_flight = setup.wait_bound("in-flight")
    assert [v["metadata"]["name"] for v in volumes_of(setup, "in-flight")] == [
        in_flight["metadata"]["name"]
    ]
    assert on_disk(setup, in_flight).is_dir()

    setup.create_claim("new", delete_class)
    setup.create_consumer("new", "new")
    new = setup.wait_bound("new")
    assert new["metadata"]["annotations"][PROVISIONED_BY] == setup.name
    assert NODE_ANNOTATION in new["metadata"]["annotations"], "not made by ours"

    # Retain first: by the time the Delete volume released after it is gone, ours has seen it.
    retained = volumes["old-retain"]
    release(setup, "old-retain")
    eventually(
        lambda: (
            (setup.volume(retained["metadata"]["name"]) or {}).get("status", {}).get("phase")
            == "Released"
            or None
        ),
        60,
        "the Retain volume to be Released",
    )
    deleted = volumes["old-delete"]
    release(setup, "old-delete")
    wait_gone(lambda: setup.volume(deleted["metadata"]["name"]), 60, "the released Delete PV")
    assert not on_disk(setup, deleted).exists()
    assert setup.volume(retained["metadata"]["name"]) is not None
    assert (on_disk(setup, retained) / "data").read_text() == DATA
    for claim in ("kept-delete", "kept-retain"):
        assert setup.phase(claim) == "Bound"


def test_a_claim_whose_rancher_died_mid_setup_gets_exactly_one_volume_from_ours(
    rancher_installation: tuple[ProvisionerSetup, Callable[[], RancherProcess]],
) -> None:
    setup, start_rancher = rancher_installation
    # Rancher's helper pods never start: its setup of the claim is in flight when it dies.
    stuck = ConfigFiles(
        setup=RANCHER_SETUP,
        teardown=RANCHER_TEARDOWN,
        helper_pod=labelled_helper_pod(image=NEVER_STARTS_IMAGE),
    )
    setup.update_config(stuck)
    storage_class = setup.create_class("rancher-delete")
    rancher = start_rancher()
    setup.create_claim("switching", storage_class)
    setup.create_consumer("switching", "switching")
    uid = setup.claim("switching")["metadata"]["uid"]
    helper = f"helper-pod-create-pvc-{uid}"
    eventually(
        lambda: (
            any(
                pod["metadata"]["name"] == helper
                for pod in call_json(setup.core.list_namespaced_pod, setup.namespace)["items"]
            )
            or None
        ),
        60,
        "rancher's setup helper pod for the claim",
    )
    rancher.stop(signal.SIGKILL)
    # The takeover writes the ConfigMap with a helper image that runs.
    setup.update_config(
        ConfigFiles(
            setup=RANCHER_SETUP, teardown=RANCHER_TEARDOWN, helper_pod=labelled_helper_pod()
        )
    )

    setup.start()

    volume = setup.wait_bound("switching")
    assert volume["metadata"]["name"] == f"pvc-{uid}"
    assert [v["metadata"]["name"] for v in volumes_of(setup, "switching")] == [f"pvc-{uid}"]
    assert on_disk(setup, volume).is_dir()


def test_rancher_s_volumes_count_against_a_budget_set_after_the_takeover(
    rancher_installation: tuple[ProvisionerSetup, Callable[[], RancherProcess]],
) -> None:
    setup, start_rancher = rancher_installation
    storage_class = setup.create_class("rancher-delete")
    rancher = start_rancher()
    node_1 = {"kubernetes.io/hostname": "node-1"}
    for claim in ("first", "second"):
        setup.create_claim(claim, storage_class, size="2Gi")
        setup.create_consumer(claim, claim, node_selector=node_1)
    for claim in ("first", "second"):
        setup.wait_bound(claim)
    rancher.stop()
    # rancher cannot read a budget (a path object): the admin adds it once ours runs.
    budget = {
        "nodePathMap": [
            {
                "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                "paths": [{"path": RANCHER_DEFAULT_PATH, "capacity": "5Gi"}],
            }
        ]
    }
    setup.update_config(
        ConfigFiles(
            config=budget,
            setup=RANCHER_SETUP,
            teardown=RANCHER_TEARDOWN,
            helper_pod=labelled_helper_pod(),
        )
    )
    setup.start()

    setup.create_claim("over", storage_class, size="2Gi")
    setup.create_consumer("over", "over", node_selector=node_1)
    event = setup.wait_event("over", "ProvisioningFailed")
    committed = format_bytes(4 * 2**30)
    assert f"({committed} committed)" in event["message"], event["message"]
    setup.create_claim("fits", storage_class, size="1Gi")
    setup.create_consumer("fits", "fits", node_selector=node_1)
    assert volume_node(setup.wait_bound("fits")) == "node-1"
    assert setup.phase("over") == "Pending"


def test_ours_provisions_only_once_rancher_s_pods_are_gone_even_terminating_ones(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup = make_setup()
    storage_class = setup.create_class("rancher-delete")
    hold = "test.local-path-storage.io/hold"
    # rancher's pod as its Deployment labels it, kept Terminating by a finalizer once deleted.
    setup.core.create_namespaced_pod(
        setup.namespace,
        manifest(
            {
                "metadata": {
                    "name": "local-path-provisioner-0",
                    "labels": {"app": "local-path-provisioner"},
                    "finalizers": [hold],
                },
                "spec": {
                    "nodeName": "node-1",
                    "containers": [{"name": "rancher", "image": "registry.invalid/rancher:1"}],
                },
            }
        ),
    )
    replica = setup.start("--predecessor-selector", "app=local-path-provisioner", wait_ready=False)
    setup.create_claim("waits", storage_class)
    setup.create_consumer("waits", "waits")
    eventually(
        lambda: "local-path-provisioner-0" in replica.log() or None,
        60,
        "ours to say it waits for rancher's pod",
    )
    assert replica.probe("/readyz") == (
        503,
        "waiting for the predecessor's pods (app=local-path-provisioner) to be gone:"
        " local-path-provisioner-0\n",
    )
    setup.core.delete_namespaced_pod("local-path-provisioner-0", setup.namespace)
    eventually(
        lambda: setup.annotations("waits").get("volume.kubernetes.io/selected-node"),
        60,
        "the scheduler to choose the claim's node",
    )
    uid = setup.claim("waits")["metadata"]["uid"]
    assert setup.volume(f"pvc-{uid}") is None, "provisioned while rancher's pod was there"
    assert "the predecessor's pods (app=local-path-provisioner) are gone" not in replica.log()
    assert replica.probe("/readyz") == (
        503,
        "waiting for the predecessor's pods (app=local-path-provisioner) to be gone:"
        " local-path-provisioner-0 (terminating)\n",
    )

    setup.core.patch_namespaced_pod(
        "local-path-provisioner-0", setup.namespace, {"metadata": {"finalizers": None}}
    )

    assert setup.wait_bound("waits")["metadata"]["name"] == f"pvc-{uid}"
    assert "the predecessor's pods (app=local-path-provisioner) are gone" in replica.log()


def rancher_teardown_pod(name: str, directory: str) -> Any:
    """A teardown pod as rancher v0.0.37 makes it (no label, no owner, no deadline, the
    directory's parent as a hostPath, `rm -rf "$VOL_DIR"`), for node-1, held Pending by a
    scheduling gate: one rancher left behind when it was stopped while polling it, which starts
    whenever the node gets to it. The image is one the harness runs for real."""
    parent = directory.rsplit("/", 1)[0]
    node_1 = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}
    return manifest(
        {
            "metadata": {"name": name},
            "spec": {
                "schedulingGates": [{"name": GATE}],
                "restartPolicy": "Never",
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [node_1]}]
                        }
                    }
                },
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "helper-pod",
                        "image": SHELL_IMAGE,
                        "command": ["/bin/sh", "-c", 'rm -rf "$VOL_DIR"'],
                        "env": [{"name": "VOL_DIR", "value": directory}],
                        "volumeMounts": [{"name": "data", "mountPath": parent}],
                    }
                ],
                "volumes": [
                    {"name": "data", "hostPath": {"path": parent, "type": "DirectoryOrCreate"}}
                ],
            },
        }
    )


def rancher_provisioner_pod(name: str) -> Any:
    """rancher's own pod as its Deployment labels it (kwok keeps it Running)."""
    return manifest(
        {
            "metadata": {"name": name, "labels": {"app": "local-path-provisioner"}},
            "spec": {
                "nodeName": "node-1",
                "containers": [{"name": "rancher", "image": "registry.invalid/rancher:1"}],
            },
        }
    )


def pod_phase(setup: ProvisionerSetup, name: str) -> str:
    pod = call_json(setup.core.read_namespaced_pod, name, setup.namespace)
    return str((pod.get("status") or {}).get("phase", ""))


def test_ours_waits_for_rancher_s_unlabelled_teardown_pod_whose_late_run_spares_a_new_claim(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup = make_setup()
    storage_class = setup.create_class("rancher-pattern", parameters=BY_NAMESPACE_AND_NAME)
    # The directory a claim `data` gets, the old one rancher was tearing down and a new one alike.
    directory = f"{RANCHER_DEFAULT_PATH}/{setup.namespace}/data"
    teardown = "helper-pod-delete-pvc-0f0e2a8c-1c52-4d39-9d6e-7a1f3e1b2c4d"
    setup.core.create_namespaced_pod(setup.namespace, rancher_teardown_pod(teardown, directory))
    replica = setup.start("--predecessor-selector", RANCHER_SELECTOR, wait_ready=False)

    setup.create_claim("data", storage_class)
    setup.create_consumer("data", "data", node_selector=NODE_1)
    eventually(
        lambda: setup.annotations("data").get("volume.kubernetes.io/selected-node"),
        60,
        "the scheduler to choose the claim's node",
    )
    uid = setup.claim("data")["metadata"]["uid"]
    eventually(
        lambda: teardown in replica.log() or setup.volume(f"pvc-{uid}") or None,
        60,
        "ours to say it waits for rancher's teardown pod, or to provision the claim",
    )
    provisioned_early = setup.volume(f"pvc-{uid}")
    status, body = replica.probe("/readyz")

    # The node gets to rancher's teardown at last: it runs, and ends.
    setup.core.patch_namespaced_pod(teardown, setup.namespace, {"spec": {"schedulingGates": None}})
    eventually(
        lambda: pod_phase(setup, teardown) == "Succeeded" or None, 60, "rancher's teardown to run"
    )

    volume = setup.wait_bound("data")
    assert volume_path(volume) == directory
    assert on_disk(setup, volume).is_dir(), "rancher's late teardown removed the new claim's data"
    assert provisioned_early is None, "provisioned while rancher's teardown pod was pending"
    assert (status, body) == (
        503,
        f"waiting for the predecessor's pods ({RANCHER_SELECTOR}) to be gone: {teardown}\n",
    )


@pytest.mark.parametrize(
    ("predecessor", "pod"),
    [
        ("local-path-provisioner-1", rancher_provisioner_pod("local-path-provisioner-1")),
        (
            "helper-pod-create-pvc-5d1c",
            rancher_teardown_pod("helper-pod-create-pvc-5d1c", "/opt/local-path-provisioner/x"),
        ),
    ],
    ids=["rancher scaled up again", "a helper pod of a rancher running elsewhere"],
)
def test_a_predecessor_pod_appearing_while_ours_leads_stops_it_until_the_pod_is_gone(
    make_setup: Callable[..., ProvisionerSetup], predecessor: str, pod: Any
) -> None:
    setup = make_setup()
    storage_class = setup.create_class("rancher-delete")
    leader = setup.start("--predecessor-selector", RANCHER_SELECTOR)
    setup.create_claim("before", storage_class)
    setup.create_consumer("before", "before")
    setup.wait_bound("before")

    setup.core.create_namespaced_pod(setup.namespace, pod)

    eventually(lambda: not leader.alive() or None, 60, "ours to stop")
    assert leader.stop() == 1, leader.log()[-2000:]
    assert f"pod {predecessor} of the provisioner this one took over" in leader.log()
    warning = setup.wait_event(predecessor, "PredecessorRunning")
    assert warning["type"] == "Warning"
    assert "Stop the provisioner that made it" in warning["message"], warning["message"]
    setup.create_claim("after", storage_class)
    setup.create_consumer("after", "after")
    eventually(
        lambda: setup.annotations("after").get("volume.kubernetes.io/selected-node"),
        60,
        "the scheduler to choose the claim's node",
    )
    # The Deployment restarts it: the new process waits.
    restarted = setup.start("--predecessor-selector", RANCHER_SELECTOR, wait_ready=False)
    eventually(
        lambda: predecessor in restarted.log() or None, 60, "ours to say it waits for the pod"
    )
    uid = setup.claim("after")["metadata"]["uid"]
    assert setup.volume(f"pvc-{uid}") is None, "provisioned while the predecessor's pod was there"
    assert restarted.probe("/readyz") == (
        503,
        f"waiting for the predecessor's pods ({RANCHER_SELECTOR}) to be gone: {predecessor}\n",
    )

    setup.core.delete_namespaced_pod(predecessor, setup.namespace, grace_period_seconds=0)

    assert setup.wait_bound("after")["metadata"]["name"] == f"pvc-{uid}"
    assert restarted.alive()
