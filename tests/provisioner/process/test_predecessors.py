"""Which pods a takeover waits for: rancher's provisioner and helper pods, never ours, never a
workload's, never a finished one."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from provisioner.helper_pods.pod_shapes import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE
from provisioner.process.predecessors import (
    OurPods,
    Pod,
    PredecessorPod,
    describe_pods,
    our_pods,
    parse_selector,
    predecessor_pod,
)

RANCHER = {"app": "local-path-provisioner"}
OURS = our_pods(
    "lps-7d9f-abcde",
    {
        "app.kubernetes.io/name": "local-path-storage-provisioner",
        "app.kubernetes.io/instance": "local-path-storage",
        "pod-template-hash": "7d9f",
    },
)


def pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    host_path: str | None = None,
    owner: str | None = None,
    phase: str = "Pending",
    deleting: bool = False,
) -> Pod:
    metadata: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "labels": labels or {}}
    if owner is not None:
        metadata["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    volumes = [{"name": "data", "hostPath": {"path": host_path}}] if host_path else []
    raw = {"metadata": metadata, "spec": {"volumes": volumes}, "status": {"phase": phase}}
    return msgspec.json.decode(msgspec.json.encode(raw), type=Pod)


def test_rancher_s_provisioner_pods_are_told_by_the_selector_terminating_ones_included() -> None:
    found = predecessor_pod(
        pod("local-path-provisioner-0", labels=RANCHER, owner="ReplicaSet", deleting=True),
        RANCHER,
        OURS,
    )
    assert found == PredecessorPod(
        name="local-path-provisioner-0",
        uid="uid-local-path-provisioner-0",
        why="matches app=local-path-provisioner",
        terminating=True,
    )


@pytest.mark.parametrize(
    "name", ["helper-pod-delete-pvc-1", "helper-pod-create-pvc-1", "custom-template-delete-pvc-1"]
)
def test_rancher_s_helper_pods_are_bare_pods_with_a_hostpath_whatever_their_name(
    name: str,
) -> None:
    found = predecessor_pod(pod(name, host_path="/opt/local-path-provisioner"), RANCHER, OURS)
    assert found is not None
    assert found.why == "no controller owns it and it mounts hostPath /opt/local-path-provisioner"


@pytest.mark.parametrize(
    "other",
    [
        pod("helper-batch-1", labels={HELPER_POD_LABEL: HELPER_POD_LABEL_VALUE}, host_path="/x"),
        pod("lps-7d9f-abcde"),
        pod(
            "lps-5c4b-fghij",
            labels={
                "app.kubernetes.io/name": "local-path-storage-provisioner",
                "app.kubernetes.io/instance": "local-path-storage",
                "app": "local-path-provisioner",
                "pod-template-hash": "5c4b",
            },
            owner="ReplicaSet",
        ),
        pod("kube-proxy-x", host_path="/lib/modules", owner="DaemonSet"),
        pod("kube-apiserver-node-1", host_path="/etc/kubernetes/pki", owner="Node"),
        pod("debug", labels={"run": "debug"}),
        pod("helper-pod-delete-pvc-1", host_path="/opt/x", phase="Succeeded"),
        pod("local-path-provisioner-0", labels=RANCHER, phase="Failed"),
    ],
    ids=[
        "our helper pod",
        "our own pod",
        "another replica of ours, even one the selector matches",
        "a DaemonSet's pod with a hostPath",
        "a static pod with a hostPath",
        "a bare pod without a hostPath",
        "a finished helper pod",
        "a finished provisioner pod",
    ],
)
def test_ours_workloads_and_finished_pods_are_not_waited_for(other: Pod) -> None:
    assert predecessor_pod(other, RANCHER, OURS) is None


def test_without_our_own_pod_only_the_helper_label_and_nothing_else_tells_ours() -> None:
    replica = pod("lps-5c4b-fghij", labels=RANCHER, owner="ReplicaSet")
    assert predecessor_pod(replica, RANCHER, our_pods("", None)) is not None
    assert OurPods().include(pod("x", labels={HELPER_POD_LABEL: HELPER_POD_LABEL_VALUE}))
    assert not OurPods().include(pod("x"))


def test_a_selector_of_several_labels_must_match_all_of_them() -> None:
    selector = parse_selector("app=local-path-provisioner,tier=storage")
    assert selector == {"app": "local-path-provisioner", "tier": "storage"}
    assert predecessor_pod(pod("p", labels=RANCHER, owner="ReplicaSet"), selector, OURS) is None
    both = {**RANCHER, "tier": "storage"}
    assert predecessor_pod(pod("p", labels=both, owner="ReplicaSet"), selector, OURS) is not None


def test_pods_are_described_by_name_with_the_terminating_ones_marked() -> None:
    pods = [
        PredecessorPod("b", "", "", terminating=False),
        PredecessorPod("a", "", "", terminating=True),
    ]
    assert describe_pods(pods) == "a (terminating), b"
