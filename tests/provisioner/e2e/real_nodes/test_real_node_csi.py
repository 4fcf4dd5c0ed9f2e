"""CSI volumes on real nodes: the controller (`python -m provisioner start`) and the node plugin
(`python -m provisioner.csi --manage-volumes`, one process per node used, in that node's mount
namespace with its kubelet's root) serve a `volumeType: csi` class, and a real kubelet (v1.36.3)
mounts, measures, chowns and unmounts the volumes through the plugin alone: no helper pod runs.

The CSIDriver object is made here as the stack makes it (attachRequired false, podInfoOnMount
true, fsGroupPolicy File): without it the kubelet would wait for an attacher, and apply no fsGroup.
The real nodes' kubelets run with a volume stats period of a few seconds and the CSIVolumeHealth
gate (localcluster/real_node_config.py), so the kubelet_volume_stats_* series, the health one
included, appear within seconds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from localcluster import LocalCluster
from localcluster.cluster_access import wait_for
from localcluster.csi_node_plugins import node_plugin_command, node_plugin_plans
from localcluster.raw_api import call_json, manifest
from localcluster.real_node import RealNode
from localcluster.real_node_config import KUBELET_ROOT
from provisioner.csi.driver_name import driver_name_for
from provisioner.objects.node_handoff import VOLUME_PATH_KEY
from provisioner.provisioning.annotations import DIRECTORY_REMOVED_ANNOTATION
from tests.faults.support import HelperPodRecorder, unique_base_path
from tests.provisioner.e2e.real_nodes.support import (
    HOSTNAME,
    helper_pod_yaml,
    real_nodes,
    registry_busybox,
)
from tests.provisioner.e2e.real_nodes.test_real_node_access_modes import (
    ONE_POD,
    create_holder,
    event_on,
    running,
)
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    default_config,
    eventually,
    wait_gone,
)
from tests.provisioner.e2e.test_clones import create_clone

pytestmark = [pytest.mark.realnode, pytest.mark.cluster]

TIMEOUT_SECONDS = 60.0
STATS_TIMEOUT_SECONDS = 40.0
"""The kubelet's volume stats period there is 5 s, jittered up to twice that, and a new pod's
calculator starts on the analyzer's next 5 s round: 20 s at worst, doubled for a busy machine."""
MIB = 1 << 20
BLOCK = 4096
WRITTEN_MIB = 3
FS_GROUP = 4321
RUN_AS_USER = 1000
CSI_PLUGIN_DIRECTORY = "kubernetes.io~csi"
# The pod's loop: a heartbeat it writes, and `ping` copied to `pong` whenever it is there: the
# test writes the one on the node's disk and reads the other back, so the pod's own read and
# write through its mount are seen without exec.
PING_PONG = (
    "i=0; while true; do i=$((i+1)); echo $i > /data/beat;"
    " if [ -f /data/ping ]; then cp /data/ping /data/pong; fi; sleep 0.3; done"
)


@dataclass
class NodePlugin:
    """One node plugin process (nsenter execs it: the PID is the plugin's)."""

    node: RealNode
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class CsiStack:
    """The controller of one test's provisioner, its CSI class and CSIDriver, and its node
    plugins, started on demand, per node."""

    cluster: LocalCluster
    setup: ProvisionerSetup
    recorder: HelperPodRecorder
    storage_class: str
    scratch: Path
    """A short directory for the plugins' CSI sockets (a unix socket's path is 107 bytes)."""
    plugins: dict[str, NodePlugin] = field(default_factory=dict)
    """The plugins running, by node."""
    stopped: list[NodePlugin] = field(default_factory=list)
    starts: int = 0

    @property
    def driver(self) -> str:
        return driver_name_for(self.setup.name)

    @property
    def namespace(self) -> str:
        return self.setup.namespace

    def start_plugin(self, node_name: str) -> NodePlugin:
        """Starts the node's plugin and waits until the kubelet has registered it."""
        node = real_nodes(self.cluster).node_by_name(node_name)
        self.starts += 1
        log = self.scratch / f"{node_name}-{self.starts}.log"
        # The command the benchmark's plugins run (localcluster/csi_node_plugins.py).
        (plan,) = node_plugin_plans(
            [node],
            provisioner_name=self.setup.name,
            config_file=self.setup.config_dir / "config.json",
            kubeconfig=self.cluster.kubeconfig,
            log_dir=self.scratch,
        )
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["PYTHONUNBUFFERED"] = "1"
        with log.open("ab") as output:
            process = subprocess.Popen(
                node_plugin_command(plan), stdout=output, stderr=subprocess.STDOUT, env=env
            )
        plugin = NodePlugin(node, process, log)
        self.plugins[node_name] = plugin
        started = time.monotonic()

        def registered() -> bool | None:
            if process.poll() is not None:
                raise AssertionError(f"the node plugin exited:\n{plugin.output()}")
            heard = "the kubelet registered" in plugin.output()
            return (heard and self.driver in csi_node_drivers(self.cluster, node_name)) or None

        eventually(registered, TIMEOUT_SECONDS, f"the kubelet of {node_name} to register it")
        print(f"plugin on {node_name} registered in {time.monotonic() - started:.1f} s")
        return plugin

    def kill_plugin(self, node_name: str) -> None:
        plugin = self.plugins.pop(node_name)
        self.stopped.append(plugin)
        plugin.process.send_signal(signal.SIGKILL)
        assert plugin.process.wait(timeout=30) == -signal.SIGKILL

    def stop_plugins(self) -> None:
        self.stopped.extend(self.plugins.values())
        self.plugins.clear()
        for plugin in self.stopped:
            if plugin.process.poll() is None:
                plugin.process.terminate()
                try:
                    plugin.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    plugin.process.kill()
                    plugin.process.wait(timeout=10)

    def claim_and_pod(
        self, name: str, node: str, script: str, *, security: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A claim and a pod on `node` running `script` with it at /data: (PV, pod) once the
        pod runs, the waits printed."""
        started = time.monotonic()
        self.setup.create_claim(name, self.storage_class)
        create_pod(self.setup, name, name, node, script, security=security)
        volume = self.setup.wait_bound(name, timeout=TIMEOUT_SECONDS)
        bound = time.monotonic() - started
        pod = self.cluster.wait_for_pod_phase(
            self.namespace, name, ("Running", "Succeeded", "Failed"), timeout=TIMEOUT_SECONDS
        )
        running = time.monotonic() - started
        print(
            f"{name}: Bound after {bound:.1f} s, pod {pod['status']['phase']} after {running:.1f} s"
        )
        return volume, pod

    def directory(self, volume: Mapping[str, Any], node: str) -> Path:
        """The volume's directory on the node's disk, as this machine sees it."""
        return self.setup.node_path(
            node, volume["spec"]["csi"]["volumeAttributes"][VOLUME_PATH_KEY]
        )

    def release(self, name: str, volume: Mapping[str, Any], node: str) -> None:
        """Deletes the pod and the claim: the pod's volume is unpublished, the node plugin
        removes the directory on the gate's permit and the controller deletes the PV."""
        started = time.monotonic()
        delete_pod_and_wait(self.setup, name)
        self.setup.core.delete_namespaced_persistent_volume_claim(name, self.namespace)
        volume_name = volume["metadata"]["name"]
        directory = self.directory(volume, node)
        wait_gone(
            lambda: self.setup.volume(volume_name),
            TIMEOUT_SECONDS,
            f"PV {volume_name} to be deleted once its node removed the directory",
        )
        print(f"{name}: PV deleted {time.monotonic() - started:.1f} s after the pod's deletion")
        assert not directory.exists(), f"{directory} is still on {node}'s disk"
        assert self.recorder.pods() == [], "a CSI volume needs no helper pod, ever"


@pytest.fixture
def csi(
    cluster: LocalCluster,
    make_setup: Callable[..., ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
    request: pytest.FixtureRequest,
) -> Iterator[CsiStack]:
    base = unique_base_path("real-csi")
    setup = make_setup(
        ConfigFiles(config=default_config(base), helper_pod=helper_pod_yaml(cluster))
    )
    # A short provisioner name: its driver name (t<hex>.example.com) is in the kubelet's
    # registration socket's path, at most 107 bytes under the cluster's deep kubelet root.
    setup.name = f"example.com/t{setup.suffix}"
    recorder = record_helper_pods(setup)
    setup.start()
    storage_class = setup.create_class("csi", parameters={"volumeType": "csi"})
    driver = driver_name_for(setup.name)
    create_csi_driver(cluster, driver)
    scratch = Path(tempfile.mkdtemp(prefix="csi-"))
    stack = CsiStack(cluster, setup, recorder, storage_class, scratch)
    try:
        yield stack
    finally:
        # The pods go while their plugins still run, so the kubelet can unpublish them.
        with contextlib.suppress(ApiException, TimeoutError):
            pods = call_json(setup.core.list_namespaced_pod, setup.namespace)["items"]
            for pod in pods:
                setup.core.delete_namespaced_pod(pod["metadata"]["name"], setup.namespace)
            for pod in pods:
                delete_pod_and_wait(setup, pod["metadata"]["name"])
        stack.stop_plugins()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            for plugin in stack.stopped:
                print(f"--- node plugin {plugin.log} ---\n{plugin.output()[-5000:]}")
        with contextlib.suppress(ApiException):
            cluster.storage_v1().delete_csi_driver(driver)
        shutil.rmtree(scratch, ignore_errors=True)


def create_csi_driver(cluster: LocalCluster, driver: str) -> None:
    """The CSIDriver as the stack makes it: no attach (a local directory), the pod's identity
    in NodePublish's volume context, and the kubelet applies a pod's fsGroup itself."""
    body = {
        "metadata": {"name": driver},
        "spec": {
            "attachRequired": False,
            "podInfoOnMount": True,
            "fsGroupPolicy": "File",
            "volumeLifecycleModes": ["Persistent"],
        },
    }
    cluster.storage_v1().create_csi_driver(manifest(body))


def csi_node_drivers(cluster: LocalCluster, node: str) -> set[str]:
    """Read raw: the client's model refuses a CSINode whose `drivers` is null."""
    csi_node = call_json(cluster.storage_v1().read_csi_node, node)
    return {driver["name"] for driver in csi_node["spec"].get("drivers") or []}


def create_pod(
    setup: ProvisionerSetup,
    name: str,
    claim: str,
    node: str,
    script: str,
    *,
    security: Mapping[str, Any] | None = None,
) -> None:
    spec: dict[str, Any] = {
        "nodeSelector": {HOSTNAME: node},
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        # The node's own resolver (an empty file): the kubelet has no cluster DNS to give, and
        # would say so in a Warning event on every pod (ClusterFirst, the default).
        "dnsPolicy": "Default",
        "containers": [
            {
                "name": "app",
                "image": registry_busybox(setup.cluster),
                "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
    }
    if security:
        spec["securityContext"] = dict(security)
    setup.core.create_namespaced_pod(
        setup.namespace, manifest({"metadata": {"name": name}, "spec": spec})
    )


def delete_pod_and_wait(setup: ProvisionerSetup, name: str) -> None:
    """The kubelet removes a deleted pod's object only once its volumes are torn down."""
    with contextlib.suppress(ApiException):
        setup.core.delete_namespaced_pod(name, setup.namespace)

    def pod() -> object:
        try:
            return call_json(setup.core.read_namespaced_pod, name, setup.namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    wait_gone(pod, TIMEOUT_SECONDS, f"pod {name} to be gone")


def kubelet_metrics(cluster: LocalCluster, node: str) -> str:
    """The kubelet's /metrics through the API server's node proxy."""
    return str(cluster.core_v1().connect_get_node_proxy_with_path(node, "metrics"))


def claim_sample(text: str, metric: str, namespace: str, claim: str) -> float | None:
    labels = (f'namespace="{namespace}"', f'persistentvolumeclaim="{claim}"')
    for line in text.splitlines():
        if line.startswith(metric + "{") and all(label in line for label in labels):
            return float(line.rsplit(" ", 1)[1])
    return None


def wait_for_sample(
    stack: CsiStack, node: str, metric: str, claim: str, accept: Callable[[float], bool]
) -> float:
    started = time.monotonic()
    seen: list[float | None] = []

    def sample() -> float | None:
        value = claim_sample(kubelet_metrics(stack.cluster, node), metric, stack.namespace, claim)
        seen.append(value)
        return value if value is not None and accept(value) else None

    value = eventually(sample, STATS_TIMEOUT_SECONDS, f"{metric} of {claim} (seen {seen[-3:]})")
    print(f"{metric}={value:.0f} after {time.monotonic() - started:.1f} s")
    return value


def node_mount_points(node: RealNode) -> list[str]:
    """The mount points of the node's mount namespace (the kubelet's and the plugin's)."""
    holder = node.holder.pid
    assert holder is not None
    text = Path(f"/proc/{holder}/mountinfo").read_text(errors="surrogateescape")
    return [line.split(" ")[4] for line in text.splitlines()]


def target_path(pod: Mapping[str, Any], volume: Mapping[str, Any]) -> str:
    """Where the kubelet has the volume published for the pod, as the node's mount namespace
    shows it (the kubelet's root there is KUBELET_ROOT)."""
    uid, name = pod["metadata"]["uid"], volume["metadata"]["name"]
    return str(KUBELET_ROOT / "pods" / uid / "volumes" / CSI_PLUGIN_DIRECTORY / name / "mount")


def warnings(setup: ProvisionerSetup, name: str) -> list[str]:
    return [
        f"{event.get('reason')}: {event.get('message')}"
        for event in setup.events(name)
        if event.get("type") == "Warning"
    ]


def helper_runs(setup: ProvisionerSetup) -> float:
    """How many helper pods the controller ran, by its own histogram's counts."""
    total = 0.0
    for line in setup.replicas[0].metrics().splitlines():
        if line.startswith("local_path_helper_pod_duration_seconds_count"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_the_kubelet_mounts_a_csi_volume_and_the_pod_s_file_lands_on_the_node_s_disk(
    csi: CsiStack,
) -> None:
    csi.start_plugin("real-1")
    volume, _ = csi.claim_and_pod("data", "real-1", "echo written by the pod > /data/file")
    finished = csi.cluster.wait_for_pod_phase(
        csi.namespace, "data", ("Succeeded", "Failed"), timeout=TIMEOUT_SECONDS
    )
    assert finished["status"]["phase"] == "Succeeded", finished["status"]
    assert volume["spec"]["csi"]["driver"] == csi.driver
    directory = csi.directory(volume, "real-1")
    assert (directory / "file").read_text() == "written by the pod\n"
    assert not csi.directory(volume, "real-2").exists()
    assert "NodePublishVolume refused" not in csi.plugins["real-1"].output()
    csi.release("data", volume, "real-1")


def test_the_kubelet_reports_the_claim_s_used_bytes_from_the_plugin(csi: CsiStack) -> None:
    csi.start_plugin("real-2")
    write = f"dd if=/dev/zero of=/data/blob bs=1M count={WRITTEN_MIB} && sync && exec sleep 3600"
    volume, pod = csi.claim_and_pod("usage", "real-2", write)
    assert pod["status"]["phase"] == "Running", pod["status"]
    blob = csi.directory(volume, "real-2") / "blob"
    eventually(
        lambda: (blob.exists() and blob.stat().st_size == WRITTEN_MIB * MIB) or None, 30, "blob"
    )
    used = wait_for_sample(
        csi,
        "real-2",
        "kubelet_volume_stats_used_bytes",
        "usage",
        lambda value: value >= WRITTEN_MIB * MIB,
    )
    assert WRITTEN_MIB * MIB <= used < WRITTEN_MIB * MIB + 16 * BLOCK, used
    metrics = kubelet_metrics(csi.cluster, "real-2")
    capacity = claim_sample(metrics, "kubelet_volume_stats_capacity_bytes", csi.namespace, "usage")
    inodes = claim_sample(metrics, "kubelet_volume_stats_inodes_used", csi.namespace, "usage")
    assert capacity is not None and capacity > used
    assert inodes == 2, "the directory and the one file"
    csi.release("usage", volume, "real-2")


def test_a_pod_s_fs_group_owns_what_it_writes_on_the_node(csi: CsiStack) -> None:
    csi.start_plugin("real-1")
    security = {"runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER, "fsGroup": FS_GROUP}
    volume, _ = csi.claim_and_pod(
        "grouped", "real-1", "id > /data/id && echo mine > /data/owned", security=security
    )
    finished = csi.cluster.wait_for_pod_phase(
        csi.namespace, "grouped", ("Succeeded", "Failed"), timeout=TIMEOUT_SECONDS
    )
    assert finished["status"]["phase"] == "Succeeded", finished["status"]
    directory = csi.directory(volume, "real-1")
    owned = (directory / "owned").stat()
    assert (owned.st_uid, owned.st_gid) == (RUN_AS_USER, FS_GROUP)
    assert directory.stat().st_gid == FS_GROUP, "the kubelet gave the volume to the fsGroup"
    assert directory.stat().st_mode & 0o2000, "setgid: new files take the group"
    identity = (directory / "id").read_text()
    assert str(FS_GROUP) in identity.split("groups=", 1)[1].strip().split(","), identity
    csi.release("grouped", volume, "real-1")


def test_a_directory_removed_behind_a_running_pod_is_reported_abnormal(csi: CsiStack) -> None:
    csi.start_plugin("real-2")
    volume, pod = csi.claim_and_pod("gone", "real-2", PING_PONG)
    assert pod["status"]["phase"] == "Running", pod["status"]
    health = "kubelet_volume_stats_health_status_abnormal"
    wait_for_sample(csi, "real-2", health, "gone", lambda value: value == 0)

    directory = csi.directory(volume, "real-2")
    shutil.rmtree(directory)
    wait_for_sample(csi, "real-2", health, "gone", lambda value: value == 1)

    def abnormal_event() -> dict[str, Any] | None:
        for event in csi.setup.events("gone"):
            if event.get("reason") == "VolumeConditionAbnormal":
                return event
        return None

    event = eventually(abnormal_event, STATS_TIMEOUT_SECONDS, "a VolumeConditionAbnormal event")
    assert event["type"] == "Warning"
    path = volume["spec"]["csi"]["volumeAttributes"][VOLUME_PATH_KEY]
    assert f"the volume's directory {path} is missing on the node" in event["message"], event
    csi.release("gone", volume, "real-2")


def test_a_released_csi_volume_is_removed_by_its_node_without_any_helper_pod(
    csi: CsiStack,
) -> None:
    csi.start_plugin("real-1")
    volume, _ = csi.claim_and_pod("temp", "real-1", "echo bye > /data/file && exec sleep 3600")
    directory = csi.directory(volume, "real-1")
    eventually(lambda: (directory / "file").exists() or None, 30, "the pod's file")
    name = volume["metadata"]["name"]
    csi.release("temp", volume, "real-1")
    # The node removed it (by the gate's permit) and marked the PV; no helper pod ever ran.
    log = csi.plugins["real-1"].output()
    assert (
        f"volume {name}: removed {volume['spec']['csi']['volumeAttributes'][VOLUME_PATH_KEY]}"
        in log
    )
    assert f"volume {name}: marked {DIRECTORY_REMOVED_ANNOTATION}" in log
    assert csi.recorder.pods() == [], [pod.name for pod in csi.recorder.pods()]
    assert helper_runs(csi.setup) == 0


def test_a_restarted_plugin_leaves_a_running_pod_s_mount_and_unpublishes_it_after(
    csi: CsiStack,
) -> None:
    node = real_nodes(csi.cluster).node_by_name("real-2")
    csi.start_plugin("real-2")
    volume, pod = csi.claim_and_pod("kept", "real-2", PING_PONG)
    assert pod["status"]["phase"] == "Running", pod["status"]
    directory = csi.directory(volume, "real-2")
    target = target_path(pod, volume)
    assert target in node_mount_points(node), "the kubelet had the plugin publish it there"

    def round_trip(text: str) -> None:
        (directory / "ping").write_text(text)
        eventually(
            lambda: (
                ((directory / "pong").exists() and (directory / "pong").read_text() == text) or None
            ),
            20,
            f"the pod to read and write {text!r}",
        )

    round_trip("before\n")
    csi.kill_plugin("real-2")
    round_trip("while the plugin is down\n")
    csi.start_plugin("real-2")
    round_trip("after the restart\n")
    assert target in node_mount_points(node)

    delete_pod_and_wait(csi.setup, "kept")
    assert target not in node_mount_points(node), "the restarted plugin unpublished it"
    assert not Path(target).exists(), "and removed the target directory"
    assert warnings(csi.setup, "kept") == []
    assert "NodeUnpublishVolume refused" not in csi.plugins["real-2"].output()
    csi.release("kept", volume, "real-2")
    assert csi.recorder.pods() == []


def test_a_second_pod_on_the_node_is_refused_a_csi_read_write_once_pod_volume(
    csi: CsiStack,
) -> None:
    """As for a `local` volume (test_real_node_access_modes.py): a second pod put on the first
    one's node by spec.nodeName, past the scheduler, does not get the volume (FailedMount)."""
    csi.start_plugin("real-1")
    csi.setup.create_claim("solo", csi.storage_class, access_modes=ONE_POD)
    create_holder(csi.setup, "first", "solo", "real-1")
    volume = csi.setup.wait_bound("solo", timeout=TIMEOUT_SECONDS)
    running(csi.setup, "first")
    create_holder(csi.setup, "second", "solo", "real-1", past_scheduler=True)
    refused = wait_for(
        lambda: event_on(csi.setup, "second", "FailedMount"),
        TIMEOUT_SECONDS,
        "a FailedMount event on the second pod",
    )
    print(f"second pod: {refused['message']}")
    assert "ReadWriteOncePod" in refused["message"], refused
    second = call_json(csi.setup.core.read_namespaced_pod, "second", csi.namespace)
    assert second["status"]["phase"] == "Pending", second["status"]
    assert (csi.directory(volume, "real-1") / "pods").read_text() == "first\n"
    delete_pod_and_wait(csi.setup, "second")
    delete_pod_and_wait(csi.setup, "first")
    csi.setup.core.delete_namespaced_persistent_volume_claim("solo", csi.namespace)
    wait_gone(
        lambda: csi.setup.volume(volume["metadata"]["name"]),
        TIMEOUT_SECONDS,
        "the ReadWriteOncePod volume to be released",
    )


def test_a_clone_of_a_csi_claim_holds_what_a_pod_wrote_into_its_source(csi: CsiStack) -> None:
    """The node plugin copies a clone's source into its new directory before the kubelet
    gets it: a pod of the clone reads back the source pod's file, a subdirectory's mode and a
    symbolic link kept as a link; no helper pod runs for the source, the clone or either's
    removal."""
    csi.start_plugin("real-1")
    written = (
        "echo written before the clone > /data/file; mkdir -m 0700 /data/sub;"
        " echo deeper > /data/sub/inner; ln -s file /data/link"
    )
    source, _ = csi.claim_and_pod("source", "real-1", written)
    finished = csi.cluster.wait_for_pod_phase(
        csi.namespace, "source", ("Succeeded", "Failed"), timeout=TIMEOUT_SECONDS
    )
    assert finished["status"]["phase"] == "Succeeded", finished["status"]
    create_clone(csi.setup, "copy", "source", csi.storage_class)
    reads = (
        'test "$(cat /data/file)" = "written before the clone"'
        ' && test "$(cat /data/sub/inner)" = deeper'
        ' && test "$(readlink /data/link)" = file'
        ' && test "$(stat -c %a /data/sub)" = 700'
    )
    create_pod(csi.setup, "copy", "copy", "real-1", reads)
    clone = csi.setup.wait_bound("copy", timeout=TIMEOUT_SECONDS)
    read = csi.cluster.wait_for_pod_phase(
        csi.namespace, "copy", ("Succeeded", "Failed"), timeout=TIMEOUT_SECONDS
    )
    assert read["status"]["phase"] == "Succeeded", (read["status"], warnings(csi.setup, "copy"))
    assert csi.directory(clone, "real-1") != csi.directory(source, "real-1")
    assert (csi.directory(clone, "real-1") / "file").read_text() == "written before the clone\n"
    assert "with a copy of" in csi.plugins["real-1"].output()
    csi.release("copy", clone, "real-1")
    csi.release("source", source, "real-1")
    assert helper_runs(csi.setup) == 0
