"""The `snapshots` scenario (issue 39, item 6): on one real node, a VolumeSnapshot of a 1 GiB
volume and its restore, for a CSI class on the node's plain (ext4) directory and one on its
btrfs disk (`BTRFS_MOUNT`), beside `cp -a` and `cp -a --reflink=always` of the same data on the
same disk. Its goals and report lines are `bench.snapshot_goals`.

One cluster: one real node and no kwok node, the snapshot CRDs and the common snapshot
controller, ours' controller (`ours-csi`'s command) and the node plugin in the node's mount
namespace. The classes wait for a first consumer (node-local paths must): the restore claim's
consumer is created with it, so its time to Bound counts the scheduler's pick as a user's would;
its pod's start is not counted.

Per disk, in this order:
1. a claim of 1 GiB and a busybox pod that writes three files of 320 MiB and 512 of 96 KiB
   (1008 MiB: a btrfs volume is held to its size, metadata included, so a full GiB of data
   would not fit) from /dev/urandom, then `sync`s;
2. `sync -f` (untimed), then a VolumeSnapshot, polled every 20 ms until readyToUse; the node's
   own take from its record's creation time to its "taken" log line, and the controller's
   admission from its "admitted" log line; `sync -f`, timed;
3. a restore claim of the snapshot, polled until its PV exists and until Bound; the node's log
   line "restored from" ends its copy; `sync -f`, timed;
4. the floors, through nsenter into the node's mount namespace: `cp -a` of the volume's data
   into a new directory of the same disk, `sync -f` (each timed), the same with
   `cp -a --reflink=always` (its failure where the filesystem has no reflinks is NaN).
Ours runs first, so both read the data from the page cache the writer left (24 GiB of memory,
1 GiB of data); nsenter's own start (`true`, timed) is taken off the floors.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.api import RawApi
from bench.csi import CSI_CLASS_PARAMETERS, CSI_PROVISIONER_NAME, start_node_plugins
from bench.csi import csi_driver as csi_volumes_driver
from bench.implementations import OURS_CSI, RunningProvisioner
from bench.real_nodes import host_taken
from bench.snapshot_goals import DiskRun
from bench.workspace import (
    CONFIGMAP,
    HELPER_SERVICE_ACCOUNT,
    PROVISIONER_NAMESPACE,
    Workspace,
    config_files,
)
from localcluster import ClusterOptions, LocalCluster
from localcluster.errors import ClusterError
from localcluster.real_node import RealNode
from localcluster.real_node_config import BTRFS_MOUNT, BUSYBOX_IMAGE
from provisioner.csi.driver_name import driver_name_for
from provisioner.objects.node_handoff import VOLUME_PATH_KEY
from provisioner.objects.snapshot_handoff import snapshot_id

NAMESPACE = "bench-snapshots"
SNAPSHOT_API = "/apis/snapshot.storage.k8s.io/v1"
CLAIMS = f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
SNAPSHOTS = f"{SNAPSHOT_API}/namespaces/{NAMESPACE}/volumesnapshots"
DISKS = (("plain", "/opt/bench-snapshots"), ("btrfs", f"{BTRFS_MOUNT}/bench-snapshots"))
"""Each disk's base path, as the node sees it."""
CLAIM_SIZE = "1Gi"
BIG_FILES, BIG_MIB = 3, 320
SMALL_FILES, SMALL_KIB = 512, 96
DATA_BYTES = BIG_FILES * BIG_MIB * (1 << 20) + SMALL_FILES * SMALL_KIB * 1024
WRITER_SCRIPT = (
    f"set -e; i=0; while [ $i -lt {BIG_FILES} ]; do"
    f" dd if=/dev/urandom of=/data/big-$i bs=1M count={BIG_MIB} 2>/dev/null; i=$((i+1)); done;"
    f" mkdir /data/small; i=0; while [ $i -lt {SMALL_FILES} ]; do"
    f" head -c {SMALL_KIB * 1024} /dev/urandom > /data/small/f-$i; i=$((i+1)); done; sync"
)
POLL_SECONDS = 0.02
WAIT_SECONDS = 300.0
HOST_WAIT_SECONDS = 1800.0
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _base_config() -> dict[str, Any]:
    return {
        "storageClassConfigs": {
            f"snap-{disk}": {
                "nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [base]}]
            }
            for disk, base in DISKS
        }
    }


def _start_cluster(say: Callable[[str], None]) -> LocalCluster:
    deadline = time.monotonic() + HOST_WAIT_SECONDS
    options = ClusterOptions(nodes=(), announce=False, real_nodes=1, snapshots=True)
    while True:
        try:
            return LocalCluster.start(options)
        except ClusterError as error:
            if not host_taken(error) or time.monotonic() > deadline:
                raise
            say(f"snapshots: {error}; waiting 30 s for the machine")
            time.sleep(30)


def _prepare(cluster: LocalCluster, api: RawApi, work_dir: Path) -> Workspace:
    """Ours' CSI workspace: a class per disk (bound at the first consumer) and a snapshot class
    for each."""
    config_dir = work_dir / "config"
    config_dir.mkdir(parents=True, exist_ok=True)
    files = {**config_files(), "config.json": json.dumps(_base_config())}
    for key, text in files.items():
        (config_dir / key).write_text(text)
    cluster.create_namespace(PROVISIONER_NAMESPACE)
    cluster.create_namespace(NAMESPACE)
    namespaced = f"/api/v1/namespaces/{PROVISIONER_NAMESPACE}"
    api.create(
        f"{namespaced}/serviceaccounts",
        {"metadata": {"name": HELPER_SERVICE_ACCOUNT}, "automountServiceAccountToken": False},
    )
    api.create(f"{namespaced}/configmaps", {"metadata": {"name": CONFIGMAP}, "data": files})
    driver = driver_name_for(CSI_PROVISIONER_NAME)
    for disk, _ in DISKS:
        api.create(
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "metadata": {"name": f"snap-{disk}"},
                "provisioner": CSI_PROVISIONER_NAME,
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "WaitForFirstConsumer",
                "parameters": CSI_CLASS_PARAMETERS,
            },
        )
        api.create(
            f"{SNAPSHOT_API}/volumesnapshotclasses",
            {
                "apiVersion": "snapshot.storage.k8s.io/v1",
                "kind": "VolumeSnapshotClass",
                "metadata": {"name": f"snap-{disk}"},
                "driver": driver,
                "deletionPolicy": "Delete",
            },
        )
    api.create("/apis/storage.k8s.io/v1/csidrivers", csi_volumes_driver(CSI_PROVISIONER_NAME))
    return Workspace(cluster, config_dir, CSI_PROVISIONER_NAME, None, True)


def _until(what: str, check: Callable[[], Any], timeout: float = WAIT_SECONDS) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"snapshots: {what} not in {timeout:.0f}s")
        time.sleep(POLL_SECONDS)


def _claim(name: str, storage_class: str, source: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "storageClassName": storage_class,
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": CLAIM_SIZE}},
    }
    if source is not None:
        spec["dataSource"] = {
            "apiGroup": "snapshot.storage.k8s.io",
            "kind": "VolumeSnapshot",
            "name": source,
        }
    return {"metadata": {"name": name}, "spec": spec}


def _pod(name: str, node: str, claim: str, script: str) -> dict[str, Any]:
    """A busybox pod on the node running `script` with the claim at /data."""
    return {
        "metadata": {"name": name},
        "spec": {
            # A node selector, not nodeName: the scheduler must pick the node, so that it marks
            # the claim (WaitForFirstConsumer) with the node for the provisioner.
            "nodeSelector": {"kubernetes.io/hostname": node},
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": BUSYBOX_IMAGE,
                    "command": ["sh", "-c", script],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


def _bound_volume(api: RawApi, claim: str) -> dict[str, Any] | None:
    found = api.get(f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims/{claim}")
    if (found.get("status") or {}).get("phase") != "Bound":
        return None
    return api.get(f"/api/v1/persistentvolumes/{found['spec']['volumeName']}")


def _volume_of(api: RawApi, claim: str) -> dict[str, Any] | None:
    volumes, _ = api.list_all("/api/v1/persistentvolumes")
    for volume in volumes:
        ref = volume["spec"].get("claimRef") or {}
        if ref.get("namespace") == NAMESPACE and ref.get("name") == claim:
            return volume
    return None


def _log_time(line: str) -> float:
    """A log line's time (asctime, the machine's local time) as seconds since the epoch."""
    found = LOG_TIME.match(line)
    if found is None:
        return math.nan
    return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _logged(log: Path, needle: str) -> float | None:
    """The time of the plugin's first log line holding `needle` (None: none yet)."""
    for line in log.read_text(errors="replace").splitlines():
        if needle in line:
            return _log_time(line)
    return None


def _wait_logged(log: Path, needle: str) -> float:
    found: float = _until(f"the log line {needle!r}", lambda: _logged(log, needle))
    return found


class NodeShell:
    """Commands in the real node's mount namespace, where its base paths are."""

    def __init__(self, node: RealNode) -> None:
        if node.holder.pid is None:
            raise RuntimeError(f"snapshots: {node.plan.name} is not running")
        self.pid = node.holder.pid
        self.overhead = min(self.timed("true") for _ in range(5))

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["nsenter", f"--mount=/proc/{self.pid}/ns/mnt", "--", *command],
            capture_output=True,
            text=True,
            check=check,
        )

    def timed(self, *command: str) -> float:
        """Seconds the command took (NaN: it failed)."""
        started = time.monotonic()
        result = self.run(*command, check=False)
        seconds = time.monotonic() - started
        return seconds if result.returncode == 0 else math.nan

    def floor(self, *command: str) -> float:
        """A floor's time, less nsenter's own start."""
        return self.timed(*command) - self.overhead

    def host_path(self, path: str) -> Path:
        return Path(f"/proc/{self.pid}/root") / path.lstrip("/")


@dataclass(frozen=True)
class Bench:
    """What every disk's measurement uses: the API, the node, its plugin's log and records."""

    api: RawApi
    shell: NodeShell
    node: str
    plugin_log: Path
    records: Path
    """The node plugin's snapshot records (`<id>.json`), as this machine sees them."""
    controller_log: Path
    say: Callable[[str], None]
    content_ready: dict[str, float] = field(default_factory=dict)
    """By disk: VolumeSnapshot created -> its content's readyToUse seen (NaN: not before the
    snapshot's own)."""

    def fill(self, disk: str) -> tuple[str, str]:
        """The source claim, written full by a pod and synced: its name and its path."""
        source = f"data-{disk}"
        self.api.create(CLAIMS, _claim(source, f"snap-{disk}"))
        self.api.create(PODS, _pod(f"writer-{disk}", self.node, source, WRITER_SCRIPT))

        def finished() -> str | None:
            phase = (self.api.get(f"{PODS}/writer-{disk}").get("status") or {}).get("phase")
            return phase if phase in ("Succeeded", "Failed") else None

        phase = _until(f"the writer on {disk}", finished)
        if phase != "Succeeded":
            raise RuntimeError(f"snapshots: the writer on the {disk} disk failed: {phase}")
        volume = _until(f"{source} Bound", lambda: _bound_volume(self.api, source))
        path: str = volume["spec"]["csi"]["volumeAttributes"][VOLUME_PATH_KEY]
        self.shell.run("sync", "-f", path)
        return source, path

    def snapshot(self, disk: str, source: str, path: str) -> tuple[str, float, float, float, float]:
        """Ours' snapshot of the source: its kind, ready, admitted by the controller (from its
        log), the node's take, the sync after."""
        name = f"snap-{disk}"
        started, started_wall = time.monotonic(), time.time()
        self.api.create(
            SNAPSHOTS,
            {
                "apiVersion": "snapshot.storage.k8s.io/v1",
                "kind": "VolumeSnapshot",
                "metadata": {"name": name},
                "spec": {
                    "volumeSnapshotClassName": f"snap-{disk}",
                    "source": {"persistentVolumeClaimName": source},
                },
            },
        )

        content_ready = [math.nan]

        def ready() -> dict[str, Any] | None:
            status = self.api.get(f"{SNAPSHOTS}/{name}").get("status") or {}
            content = status.get("boundVolumeSnapshotContentName")
            if content and math.isnan(content_ready[0]):
                # When the node's status reached the content: what is left after it is the
                # common snapshot controller's.
                found = self.api.get(f"{SNAPSHOT_API}/volumesnapshotcontents/{content}")
                if (found.get("status") or {}).get("readyToUse") is True:
                    content_ready[0] = time.monotonic() - started
            return status if status.get("readyToUse") is True else None

        status = _until(f"snapshot {name} ready", ready)
        seconds = time.monotonic() - started
        self.content_ready[disk] = content_ready[0]
        sync = self.shell.timed("sync", "-f", path)
        found = snapshot_id(status["boundVolumeSnapshotContentName"])
        record = json.loads((self.records / f"{found}.json").read_text())
        kind: str = record["kind"]
        taken = _wait_logged(self.plugin_log, f"snapshot {found}: {kind} of")
        admitted = _wait_logged(self.controller_log, f"snapshot {found} admitted") - started_wall
        return kind, seconds, admitted, taken - record["created_ns"] / 1e9, sync

    def restore(self, disk: str, path: str) -> tuple[float, float, float, float, float]:
        """Ours' restore of the snapshot: PV seen, Bound, the node's copy done, the node's copy
        alone, the sync after."""
        restored = f"restored-{disk}"
        started = time.monotonic()
        self.api.create(CLAIMS, _claim(restored, f"snap-{disk}", source=f"snap-{disk}"))
        # Its consumer at once: the class waits for one (a node-local path).
        self.api.create(PODS, _pod(restored, self.node, restored, "ls /data > /dev/null"))
        pv = _until(f"{restored}'s PV", lambda: _volume_of(self.api, restored))
        pv_seen_wall, pv_seen = time.time(), time.monotonic() - started
        _until(f"{restored} Bound", lambda: _bound_volume(self.api, restored))
        bound = time.monotonic() - started
        done_wall = _wait_logged(self.plugin_log, f"volume {pv['metadata']['name']}: made ")
        # The PV is seen up to one poll after it is made: the node's copy is counted from then.
        node_copy = done_wall - pv_seen_wall
        sync = self.shell.timed("sync", "-f", path)
        return pv_seen, bound, pv_seen + node_copy, node_copy, sync

    def floors(self, path: str) -> tuple[float, float, float, float]:
        """cp -a and its sync, cp -a --reflink=always and its sync, beside the base path."""
        floors = str(Path(path).parent.parent / "bench-floors")
        self.shell.run("rm", "-rf", floors)
        self.shell.run("mkdir", "-p", f"{floors}/cp", f"{floors}/reflink")
        cp = self.shell.floor("cp", "-a", f"{path}/.", f"{floors}/cp/")
        cp_sync = self.shell.timed("sync", "-f", floors)
        reflink = self.shell.floor(
            "cp", "-a", "--reflink=always", f"{path}/.", f"{floors}/reflink/"
        )
        reflink_sync = math.nan if math.isnan(reflink) else self.shell.timed("sync", "-f", floors)
        self.shell.run("rm", "-rf", floors)
        return cp, cp_sync, reflink, reflink_sync

    def measure(self, disk: str) -> DiskRun:
        source, path = self.fill(disk)
        filesystem = self.shell.run("stat", "-f", "-c", "%T", path).stdout.strip()
        self.say(f"snapshots: {disk}: {DATA_BYTES >> 20} MiB written in {path} ({filesystem})")
        kind, ready, admitted, take, snapshot_sync = self.snapshot(disk, source, path)
        self.say(
            f"snapshots: {disk}: snapshot ({kind}) ready in {ready:.3f}s (admitted at"
            f" {admitted:.3f}s, the node's take {take:.3f}s, its content ready at"
            f" {self.content_ready.get(disk, math.nan):.3f}s), sync {snapshot_sync:.3f}s"
        )
        pv_seen, bound, done, node_copy, restore_sync = self.restore(disk, path)
        self.say(
            f"snapshots: {disk}: restore PV in {pv_seen:.3f}s, Bound in {bound:.3f}s, the"
            f" node's copy {node_copy:.3f}s, sync {restore_sync:.3f}s"
        )
        cp, cp_sync, reflink, reflink_sync = self.floors(path)
        self.say(
            f"snapshots: {disk}: cp -a {cp:.3f}s + sync {cp_sync:.3f}s;"
            f" cp -a --reflink=always {reflink:.3f}s + sync {reflink_sync:.3f}s"
        )
        return DiskRun(
            disk=disk,
            filesystem=filesystem,
            snapshot_kind=kind,
            data_bytes=DATA_BYTES,
            snapshot_ready=ready,
            snapshot_admitted=admitted,
            content_ready=self.content_ready.get(disk, math.nan),
            node_take=take,
            snapshot_sync=snapshot_sync,
            restore_pv=pv_seen,
            restore_bound=bound,
            restore_done=done,
            node_restore=node_copy,
            restore_sync=restore_sync,
            cp=cp,
            cp_sync=cp_sync,
            reflink=reflink,
            reflink_sync=reflink_sync,
        )


def run_snapshots(work_dir: Path, say: Callable[[str], None]) -> list[DiskRun]:
    """The scenario on a fresh cluster of one real node; its runs, plain disk first."""
    cluster_dir = work_dir / "snapshots"
    cluster_dir.mkdir(parents=True, exist_ok=True)
    cluster = _start_cluster(say)
    api = RawApi.for_cluster(cluster, pool_size=8)
    controller = None
    plugins = None
    try:
        assert cluster.real is not None
        node = cluster.real.nodes[0]
        say(f"snapshots: {node.plan.name} ready in {cluster.startup_seconds:.1f}s")
        workspace = _prepare(cluster, api, cluster_dir)
        controller = RunningProvisioner(OURS_CSI, workspace, cluster_dir / "ours.log")
        controller.wait_ready()
        plugins = start_node_plugins(
            cluster, workspace.provisioner_name, workspace.config_file, cluster_dir
        )
        shell = NodeShell(node)
        # The base paths are made by hand, as an admin makes a disk's directory: config.json
        # does not let the plugin make them.
        shell.run("mkdir", "-p", *(base for _, base in DISKS))
        (plan,) = plugins.plans
        records = shell.host_path(str(plan.kubelet_root / "plugins" / plan.driver / "snapshots"))
        bench = Bench(api, shell, node.plan.name, plan.log, records, cluster_dir / "ours.log", say)
        return [bench.measure(disk) for disk, _ in DISKS]
    finally:
        if plugins is not None:
            plugins.stop()
        if controller is not None:
            controller.stop()
        api.close()
        cluster.stop()
