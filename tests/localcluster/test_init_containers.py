"""Init containers in helper pods, run by the harness as a kubelet runs them: one after another
before the main container, each with its own mounts, and the first failure fails the pod with
that container's own exit code and log tail, the main container never started."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster import LocalCluster
from tests.localcluster.pods import helper_pod

pytestmark = pytest.mark.cluster

TERMINAL = ("Succeeded", "Failed")


def _with_init(pod: dict[str, Any], *scripts: str, mount: str) -> dict[str, Any]:
    """`pod` with one init container per script, each mounting only `mount` of the node."""
    pod["spec"]["volumes"].append({"name": "own", "hostPath": {"path": mount}})
    main = pod["spec"]["containers"][0]
    pod["spec"]["initContainers"] = [
        {
            "name": f"init-{index}",
            "image": main["image"],
            "command": ["sh", "-c", script],
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": [{"name": "own", "mountPath": "/own"}],
        }
        for index, script in enumerate(scripts)
    ]
    return pod


def test_init_containers_run_in_order_with_their_own_mounts_before_the_main_one(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    node = cluster.nodes[0]
    own = f"/opt/init-{cluster_namespace}"
    main_dir = f"/opt/lps/{cluster_namespace}"
    pod = helper_pod(
        "ordered",
        node,
        # The main container sees its own mount, not the init containers' /own.
        f'test ! -e /own && mkdir -p "{main_dir}" && echo main >> "{main_dir}/trace"',
        host_path="/opt/lps",
    )
    _with_init(
        pod,
        "test ! -e /opt/lps && echo first >> /own/trace",
        'test "$(cat /own/trace)" = first && echo second >> /own/trace',
        mount=own,
    )
    cluster.create_pod(cluster_namespace, pod)
    done = cluster.wait_for_pod_phase(cluster_namespace, "ordered", TERMINAL)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    node_dir = cluster.node_dir(node)
    assert (node_dir / own.lstrip("/") / "trace").read_text() == "first\nsecond\n"
    assert (node_dir / main_dir.lstrip("/") / "trace").read_text() == "main\n"
    inits = done["status"]["initContainerStatuses"]
    assert [s["name"] for s in inits] == ["init-0", "init-1"]
    assert [s["state"]["terminated"]["exitCode"] for s in inits] == [0, 0]
    assert done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


def test_a_failed_init_container_fails_the_pod_and_the_main_one_never_runs(
    cluster: LocalCluster, cluster_namespace: str
) -> None:
    node = cluster.nodes[0]
    marker = f"/opt/lps/{cluster_namespace}-main-ran"
    pod = helper_pod("init-fails", node, f'touch "{marker}"', host_path="/opt/lps")
    _with_init(
        pod,
        "echo fine",
        "echo init broke >&2; exit 4",
        "echo never",
        mount=f"/opt/init-{cluster_namespace}",
    )
    cluster.create_pod(cluster_namespace, pod)
    done = cluster.wait_for_pod_phase(cluster_namespace, "init-fails", TERMINAL)
    assert done["status"]["phase"] == "Failed", done["status"]
    inits = done["status"]["initContainerStatuses"]
    assert inits[0]["state"]["terminated"]["exitCode"] == 0
    failed = inits[1]["state"]["terminated"]
    # The failed init container's own log tail, not its predecessor's output.
    assert (failed["exitCode"], failed["reason"], failed["message"]) == (
        4,
        "Error",
        "init broke\n",
    )
    assert inits[2]["state"] == {"waiting": {"reason": "PodInitializing"}}
    main = done["status"]["containerStatuses"][0]["state"]
    assert main == {"waiting": {"reason": "PodInitializing"}}
    assert not (cluster.node_dir(node) / marker.lstrip("/")).exists()
