"""Real nodes in the local cluster: kubelet + containerd, every image from the local registry.

One cluster with two real nodes (and one kwok node) for the module; the last test stops it and
compares the host with what it was before the start.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from localcluster import ClusterError, ClusterOptions, LocalCluster, NodeSpec
from localcluster.cluster_access import wait_for
from localcluster.raw_api import call_json
from localcluster.real_node_config import BTRFS_MOUNT, BUSYBOX_IMAGE, REAL_NODE_LABEL
from localcluster.real_nodes import RealNodes, host_changes_record
from localcluster.state_file import ClusterState, read_state, remove_state
from scripts import build_image
from tests.localcluster.host_state import HostState, host_state

pytestmark = [pytest.mark.realnode, pytest.mark.cluster]

REAL_NODES = ("real-1", "real-2")
POD_TIMEOUT_SECONDS = 90.0


class RealCluster:
    """The module's cluster, with the host's state from before its start."""

    def __init__(self, cluster: LocalCluster, before: HostState) -> None:
        self.cluster = cluster
        self.before = before

    @property
    def real(self) -> RealNodes:
        assert self.cluster.real is not None
        return self.cluster.real


def test_a_killed_clusters_host_changes_are_undone_by_the_next_start(tmp_path: Path) -> None:
    """First in the module, before its cluster starts: a harness killed with SIGKILL cannot
    undo anything; its kubelet and containerd die with it (parent-death signal), its shims and
    containers do not. The next start with real nodes must clear all of it."""
    before = host_state()
    name = f"killed-{uuid.uuid4().hex[:6]}"
    # A duration nobody else's sleep has: the container's process is told apart from any
    # other `sleep` on the host by its whole command line.
    sleeper = f"sleep {3_000_000 + uuid.uuid4().int % 1_000_000}"
    command = [sys.executable, "-m", "localcluster", "run", "--name", name]
    with (tmp_path / "harness.log").open("wb") as log:
        harness = subprocess.Popen(
            [*command, "--nodes", "0", "--real-nodes", "1"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def ready() -> ClusterState | None:
            state = read_state(name)
            return state if state is not None and state.ready else None

        state = wait_for(ready, POD_TIMEOUT_SECONDS, "the killed-to-be cluster ready")
        admin = config.new_client_from_config(config_file=state.kubeconfig)  # type: ignore[no-untyped-call]
        api = client.CoreV1Api(admin)
        manifest = pod("sleeper", "real-1", BUSYBOX_IMAGE, command=sleeper.split())
        call_json(api.create_namespaced_pod, "default", manifest)

        def running() -> bool | None:
            status = call_json(api.read_namespaced_pod, "sleeper", "default")["status"]
            return status.get("phase") == "Running" or None

        wait_for(running, POD_TIMEOUT_SECONDS, "the sleeper Running")
        admin.close()
    finally:
        harness.kill()
        harness.wait()
        remove_state(name)
    left = host_state().differences(before)
    assert {"links", "cgroups", "sysctls"} <= set(left), left
    assert host_changes_record().exists()
    assert sleeper in command_lines(), "the container outlives its killed harness"
    RealNodes.claim_host()
    assert host_state().differences(before) == {}
    assert not host_changes_record().exists()
    assert sleeper not in command_lines()


def command_lines() -> list[str]:
    lines = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip())
    return lines


@pytest.fixture(scope="module")
def real_cluster() -> Iterator[RealCluster]:
    image = build_image.image()
    before = host_state()
    options = ClusterOptions(
        nodes=(NodeSpec("node-1"),), real_nodes=2, provisioner_image=image.directory
    )
    cluster = LocalCluster.start(options)
    try:
        yield RealCluster(cluster, before)
    finally:
        cluster.stop()


@pytest.fixture
def namespace(real_cluster: RealCluster) -> Iterator[str]:
    name = f"real-{uuid.uuid4().hex[:8]}"
    real_cluster.cluster.create_namespace(name)
    yield name
    real_cluster.cluster.core_v1().delete_namespace(name)


def pod(
    name: str,
    node: str,
    image: str,
    *,
    command: list[str] | None = None,
    args: list[str] | None = None,
    host_path: str | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": image}
    if command is not None:
        container["command"] = command
    if args is not None:
        container["args"] = args
    spec: dict[str, Any] = {
        "nodeName": node,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [container],
    }
    if host_path is not None:
        container["volumeMounts"] = [{"name": "disk", "mountPath": "/data"}]
        spec["volumes"] = [
            {"name": "disk", "hostPath": {"path": host_path, "type": "DirectoryOrCreate"}}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def run_to_end(real_cluster: RealCluster, namespace: str, manifest: dict[str, Any]) -> Any:
    cluster = real_cluster.cluster
    cluster.create_pod(namespace, manifest)
    name = manifest["metadata"]["name"]
    return cluster.wait_for_pod_phase(
        namespace, name, ("Succeeded", "Failed"), timeout=POD_TIMEOUT_SECONDS
    )


def only_container(finished: dict[str, Any]) -> dict[str, Any]:
    statuses = finished["status"]["containerStatuses"]
    assert len(statuses) == 1
    status: dict[str, Any] = statuses[0]
    return status


def test_real_nodes_are_ready_with_containerd_beside_kwok(real_cluster: RealCluster) -> None:
    listed = call_json(real_cluster.cluster.core_v1().list_node)["items"]
    nodes = {node["metadata"]["name"]: node for node in listed}
    assert set(nodes) == {"node-1", *REAL_NODES}
    for name in REAL_NODES:
        node = nodes[name]
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", node["status"]["conditions"]
        info = node["status"]["nodeInfo"]
        assert info["containerRuntimeVersion"] == "containerd://2.2.9"
        assert info["kubeletVersion"] == "v1.36.3"
        assert node["metadata"]["labels"][REAL_NODE_LABEL] == "true"
        addresses = {a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"}
        assert addresses == {real_cluster.real.node_by_name(name).plan.node_ip}
    assert REAL_NODE_LABEL not in nodes["node-1"]["metadata"]["labels"]
    assert nodes["node-1"]["status"]["nodeInfo"]["kubeletVersion"].startswith("kwok")


@pytest.mark.parametrize("node", REAL_NODES)
def test_busybox_pulled_from_the_local_registry_runs_on_each_real_node(
    real_cluster: RealCluster, namespace: str, node: str
) -> None:
    finished = run_to_end(
        real_cluster,
        namespace,
        pod("busybox", node, BUSYBOX_IMAGE, command=["sh", "-c", "echo hello from $(hostname)"]),
    )
    assert finished["status"]["phase"] == "Succeeded"
    status = only_container(finished)
    assert status["state"]["terminated"]["reason"] == "Completed"
    assert status["containerID"].startswith("containerd://")
    busybox = real_cluster.real.busybox
    assert busybox is not None
    # The digest of the image built from Debian's busybox-static and pushed at start: the node
    # pulled it through its docker.io mirror, which only the local registry answers.
    assert status["imageID"] == f"docker.io/library/busybox@{busybox.digest}"
    # The API server reads the log from the kubelet, as `kubectl logs` does.
    log = real_cluster.cluster.core_v1().read_namespaced_pod_log("busybox", namespace)
    assert log == "hello from busybox\n"


def test_in_cluster_configuration_reaches_the_api_server(
    real_cluster: RealCluster, namespace: str
) -> None:
    """A pod on a real node reaches the API server at the `kubernetes` Service address the
    kubelet gives it, authenticated by its service-account token: what the provisioner's
    Deployment does."""
    script = (
        "import json, os, ssl, urllib.request\n"
        "sa = '/var/run/secrets/kubernetes.io/serviceaccount'\n"
        "host = os.environ['KUBERNETES_SERVICE_HOST']\n"
        "port = os.environ['KUBERNETES_SERVICE_PORT']\n"
        "request = urllib.request.Request(f'https://{host}:{port}/version')\n"
        "request.add_header('Authorization', 'Bearer ' + open(sa + '/token').read())\n"
        "context = ssl.create_default_context(cafile=sa + '/ca.crt')\n"
        "answer = json.load(urllib.request.urlopen(request, context=context, timeout=10))\n"
        "print(host, port, answer['gitVersion'])\n"
    )
    provisioner = real_cluster.real.provisioner
    assert provisioner is not None
    manifest = pod("api", "real-2", provisioner.by_tag, command=["python3.11", "-c", script])
    finished = run_to_end(real_cluster, namespace, manifest)
    status = only_container(finished)
    log = real_cluster.real.node_by_name("real-2").plan.container_log(
        namespace, "api", finished["metadata"]["uid"], "main"
    )
    assert finished["status"]["phase"] == "Succeeded", (status, log.read_text())
    assert status["state"]["terminated"]["exitCode"] == 0
    assert "10.96.0.1 443 v1.36.3" in log.read_text()


def test_a_bridge_keeps_its_own_mac_while_pods_come_and_go(
    real_cluster: RealCluster, namespace: str
) -> None:
    """A node's bridge, the pods' gateway, keeps the MAC it was given whatever ports it has: a
    bridge given none takes its lowest port's, so a pod's cached gateway MAC went stale as
    helper pods came and went beside it, and the provisioner lost the API server (and its
    lease) for tens of seconds."""
    plan = real_cluster.real.node_by_name("real-1").plan
    link = Path("/sys/class/net") / plan.bridge
    cluster = real_cluster.cluster
    cluster.create_pod(namespace, pod("idle", "real-1", BUSYBOX_IMAGE, command=["sleep", "60"]))
    cluster.wait_for_pod_phase(namespace, "idle", ("Running",), timeout=POD_TIMEOUT_SECONDS)
    with_a_pod = (link / "address").read_text().strip()
    finished = run_to_end(
        real_cluster, namespace, pod("brief", "real-1", BUSYBOX_IMAGE, command=["true"])
    )
    assert finished["status"]["phase"] == "Succeeded"
    cluster.core_v1().delete_namespaced_pod("brief", namespace, grace_period_seconds=0)
    cluster.core_v1().delete_namespaced_pod("idle", namespace, grace_period_seconds=0)
    wait_for(
        lambda: not cluster.core_v1().list_namespaced_pod(namespace).items or None,
        POD_TIMEOUT_SECONDS,
        "the pods to be gone",
    )
    without_pods = (link / "address").read_text().strip()
    assert (with_a_pod, without_pods) == (plan.bridge_mac, plan.bridge_mac)
    # 3: NET_ADDR_SET, an address given, which the bridge's port changes leave alone.
    assert (link / "addr_assign_type").read_text().strip() == "3"


def test_a_host_path_written_on_one_real_node_is_not_on_the_other(
    real_cluster: RealCluster, namespace: str
) -> None:
    cluster = real_cluster.cluster
    directory = f"/opt/lps-real-node-test/{namespace}"
    write = pod(
        "writer",
        "real-1",
        BUSYBOX_IMAGE,
        command=["sh", "-c", "echo written-on-real-1 > /data/file"],
        host_path=directory,
    )
    assert run_to_end(real_cluster, namespace, write)["status"]["phase"] == "Succeeded"
    check = ["sh", "-c", "test -e /data/file"]
    on_real_1 = run_to_end(
        real_cluster,
        namespace,
        pod("reader-1", "real-1", BUSYBOX_IMAGE, command=check, host_path=directory),
    )
    on_real_2 = run_to_end(
        real_cluster,
        namespace,
        pod("reader-2", "real-2", BUSYBOX_IMAGE, command=check, host_path=directory),
    )
    assert on_real_1["status"]["phase"] == "Succeeded"
    assert on_real_2["status"]["phase"] == "Failed"
    assert only_container(on_real_2)["state"]["terminated"]["exitCode"] == 1
    relative = directory.lstrip("/")
    written = cluster.node_dir("real-1") / relative / "file"
    assert written.read_text() == "written-on-real-1\n"
    assert not (cluster.node_dir("real-2") / relative / "file").exists()
    # The node's disk is its own directory: nothing reached the host's /opt.
    assert not Path("/opt/lps-real-node-test").exists()


def test_each_real_node_has_a_btrfs_disk_of_its_own(
    real_cluster: RealCluster, namespace: str
) -> None:
    """Beside its plain directories, each node has a btrfs disk at BTRFS_MOUNT (a loop-mounted
    sparse file in its namespace): a pod sees btrfs there, and what it writes is that node's."""
    cluster = real_cluster.cluster
    for node in REAL_NODES:
        # busybox's stat names no btrfs: its magic number (linux/magic.h BTRFS_SUPER_MAGIC).
        script = f"stat -f -c %t /data && echo {node} > /data/{namespace}"
        manifest = pod(f"btrfs-{node}", node, BUSYBOX_IMAGE, command=["sh", "-c", script])
        manifest["spec"]["containers"][0]["volumeMounts"] = [{"name": "disk", "mountPath": "/data"}]
        manifest["spec"]["volumes"] = [
            {"name": "disk", "hostPath": {"path": str(BTRFS_MOUNT), "type": "Directory"}}
        ]
        finished = run_to_end(real_cluster, namespace, manifest)
        log = real_cluster.real.node_by_name(node).plan.container_log(
            namespace, f"btrfs-{node}", finished["metadata"]["uid"], "main"
        )
        assert finished["status"]["phase"] == "Succeeded", log.read_text()
        assert "stdout F 9123683e\n" in log.read_text(), log.read_text()
        holder = real_cluster.real.node_by_name(node).holder.pid
        seen = Path(f"/proc/{holder}/root") / BTRFS_MOUNT.relative_to("/") / namespace
        assert seen.read_text() == f"{node}\n"
        # Not the plain directory underneath the mount, and not the host's /mnt.
        assert not (cluster.node_dir(node) / BTRFS_MOUNT.relative_to("/") / namespace).exists()
    assert not (Path("/mnt/btrfs") / namespace).exists()


@pytest.mark.parametrize(("node", "by"), [("real-1", "tag"), ("real-2", "digest")])
def test_the_provisioner_image_pulled_from_the_registry_runs_help(
    real_cluster: RealCluster, namespace: str, node: str, by: str
) -> None:
    provisioner = real_cluster.real.provisioner
    assert provisioner is not None
    image = provisioner.by_tag if by == "tag" else provisioner.by_digest
    finished = run_to_end(real_cluster, namespace, pod("help", node, image, args=["--help"]))
    status = only_container(finished)
    log = real_cluster.real.node_by_name(node).plan.container_log(
        namespace, "help", finished["metadata"]["uid"], "main"
    )
    assert finished["status"]["phase"] == "Succeeded", (status, log.read_text())
    assert status["containerID"].startswith("containerd://")
    assert status["imageID"].endswith(f"@{provisioner.digest}")
    assert status["imageID"].startswith(real_cluster.real.registry.address)
    assert "usage" in log.read_text().lower()


def test_a_second_cluster_with_real_nodes_fails_with_one_line(real_cluster: RealCluster) -> None:
    """Real nodes use the fixed `kubernetes` Service address: a second cluster (the demo while
    tests run) must say so at once, and make nothing."""
    before = host_state()
    with pytest.raises(ClusterError) as raised:
        LocalCluster.start(ClusterOptions(nodes=(), real_nodes=1, announce=False))
    message = str(raised.value)
    assert "\n" not in message
    assert "another cluster with real nodes" in message
    assert "python -m localcluster stop" in message
    assert host_state().differences(before) == {}


def test_stop_leaves_no_host_change_behind(real_cluster: RealCluster) -> None:
    """Runs a pod on each real node (the kubelet sets its sysctls, containerd mounts, CNI
    makes a network namespace), checks the host did change, stops, and compares. Last in the
    module: it stops the module's cluster."""
    namespace = "default"
    for node in REAL_NODES:
        manifest = pod(f"last-{node}", node, BUSYBOX_IMAGE, command=["sleep", "300"])
        real_cluster.cluster.create_pod(namespace, manifest)
        real_cluster.cluster.wait_for_pod_phase(
            namespace, f"last-{node}", ("Running",), timeout=POD_TIMEOUT_SECONDS
        )
    running = host_state()
    assert running.differences(real_cluster.before), "starting real nodes changed nothing?"
    pids = real_cluster.cluster.pids()
    real_cluster.cluster.stop()
    after = host_state()
    assert real_cluster.before.differences(after) == {}
    alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert alive == []
