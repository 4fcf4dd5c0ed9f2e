"""Scale: 10,000 bound volumes and claims made directly, then each provisioner starts over them.

Figures: time to ready (process start to informers synced), steady RSS and idle CPU over a
quiet period, and the requests it made meanwhile (it should only list and watch).

The objects are made as a provisioner and kube-controller-manager would leave them (claim with
spec.volumeName and the bind-completed annotation, PV pre-bound by claimRef with the claim's
UID, both with status Bound), four requests per volume from many threads, so the controller
manager finds nothing to write. Their class has reclaim policy Retain: with Delete, the
reference (which runs without the library's finalizer) would strip our finalizer from 10,000 PVs
at start and ours would add it back, so no single data set would suit both.
"""

from __future__ import annotations

import math
import statistics
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.api import RawApi
from bench.audit import AuditLog
from bench.implementations import Implementation, RunningProvisioner
from bench.process_stats import ProcessMonitor, idle_window
from bench.workspace import BASE_PATH, PROVISIONER_NAME, SCALE_CLASS, Workspace
from provisioner.provisioning.annotations import NODE_ANNOTATION, PROVISIONED_BY

SCALE_NAMESPACE = "bench-scale"
SETTLE_SECONDS = 5.0
SCALE_CONTROLLER_MANAGER_QPS = 200
"""kube-controller-manager's client QPS in the scale cluster. Its volume expander GETs the PV
of every claim it is told of, one request each: under the default 20 QPS the pass over a
50,000-claim data set lasts 42 minutes, so every start-up would meet it (measured: 600-660
PV GETs in each 30 s window for the 10 minutes watched after the data set was written). A
cluster in its steady state has finished that pass; at 200 QPS it ends with the data set."""
SCALE_CONTROLLER_MANAGER_FLAGS = ("--pvclaimbinder-sync-period=15s",)
"""kube-controller-manager's own default sync period for the PV binder, in place of the 5 s the
local cluster uses so that tests' retries bind soon. The binder walks every claim and volume
each period: over 50,000 volumes every 5 s that kept kube-controller-manager at 0.8-1.0 CPU
for as long as the cluster ran, a load a user's control plane does not carry."""


@dataclass
class ScaleResult:
    implementation: str
    volumes: int
    ready_seconds: float
    steady_rss_mib: float
    peak_rss_mib: float
    idle_cpu_seconds: float
    idle_seconds: float
    requests: dict[str, int]
    ready_cpu_seconds: float = math.nan
    """CPU (user + system) from the process start to its ready line: the wall time to ready
    moves with whatever else runs on the machine, this much less. Read when the line is seen,
    so it includes up to a poll interval (20 ms) of the work that starts after it."""
    quiet_wait_seconds: float = math.nan
    """How long the start waited for a quiet control plane (bench/quiet.py); NaN: not waited."""
    starts: list[tuple[float, float]] = field(default_factory=list)
    """(time to ready, CPU until ready) of each start when there were several (`median_start`);
    empty after a single start."""


def median_start(runs: Sequence[ScaleResult]) -> ScaleResult:
    """Several starts of one implementation over one data set, as one result: time to ready
    and CPU until ready are each the median of the starts (one start can meet a compaction or
    a resync and take twice as long); the other figures are those of the start whose time to
    ready is the median."""
    if not runs:
        raise ValueError("no starts to take the median of")
    middle = sorted(runs, key=lambda run: run.ready_seconds)[(len(runs) - 1) // 2]
    return replace(
        middle,
        ready_seconds=statistics.median(run.ready_seconds for run in runs),
        ready_cpu_seconds=statistics.median(run.ready_cpu_seconds for run in runs),
        starts=[(run.ready_seconds, run.ready_cpu_seconds) for run in runs],
    )


@dataclass
class DatasetResult:
    volumes: int
    seconds: float


def _volume_objects(index: int, node: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    claim_name = f"data-{index:05d}"
    volume_name = f"pvc-{uuid.uuid4()}"
    claim = {
        "metadata": {
            "name": claim_name,
            "labels": {"app": "scale", "shard": str(index % 16)},
            "annotations": {
                "volume.kubernetes.io/selected-node": node,
                "volume.kubernetes.io/storage-provisioner": PROVISIONER_NAME,
                "volume.beta.kubernetes.io/storage-provisioner": PROVISIONER_NAME,
            },
        },
        "spec": {
            "storageClassName": SCALE_CLASS,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "volumeName": volume_name,
            "volumeMode": "Filesystem",
        },
    }
    path = f"{BASE_PATH}/{volume_name}_{SCALE_NAMESPACE}_{claim_name}"
    volume = {
        "metadata": {
            "name": volume_name,
            "annotations": {PROVISIONED_BY: PROVISIONER_NAME, NODE_ANNOTATION: node},
        },
        "spec": {
            "claimRef": {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": SCALE_NAMESPACE,
                "name": claim_name,
            },
            "storageClassName": SCALE_CLASS,
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "volumeMode": "Filesystem",
            "hostPath": {"path": path, "type": "DirectoryOrCreate"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": [node],
                                }
                            ]
                        }
                    ]
                }
            },
        },
    }
    return claim_name, claim, volume


def create_dataset(
    workspace: Workspace, api: RawApi, volumes: int, concurrency: int, existing: int = 0
) -> DatasetResult:
    """Make volumes number `existing` to `volumes - 1` (the scaling runs grow one data set)."""
    cluster = workspace.cluster
    if existing == 0:
        cluster.create_namespace(SCALE_NAMESPACE)
    claims_path = f"/api/v1/namespaces/{SCALE_NAMESPACE}/persistentvolumeclaims"

    def make(index: int) -> None:
        node = cluster.nodes[index % len(cluster.nodes)]
        claim_name, claim, volume = _volume_objects(index, node)
        created = api.create(claims_path, claim)
        volume["spec"]["claimRef"]["uid"] = created["metadata"]["uid"]
        volume["spec"]["claimRef"]["resourceVersion"] = created["metadata"]["resourceVersion"]
        api.create("/api/v1/persistentvolumes", volume)
        api.merge_patch(
            f"/api/v1/persistentvolumes/{volume['metadata']['name']}/status",
            {"status": {"phase": "Bound"}},
        )
        api.merge_patch(
            f"{claims_path}/{claim_name}/status",
            {
                "metadata": {
                    "annotations": {
                        "pv.kubernetes.io/bind-completed": "yes",
                        "pv.kubernetes.io/bound-by-controller": "yes",
                    }
                },
                "status": {
                    "phase": "Bound",
                    "accessModes": ["ReadWriteOnce"],
                    "capacity": {"storage": "1Gi"},
                },
            },
        )

    started = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(make, range(existing, volumes)))
    wait_all_bound(api, claims_path, volumes)
    return DatasetResult(volumes, time.monotonic() - started)


def wait_all_bound(api: RawApi, claims_path: str, volumes: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while True:
        claims, _ = api.list_all(claims_path)
        bound = sum(1 for claim in claims if claim.get("status", {}).get("phase") == "Bound")
        annotated = sum(
            1
            for claim in claims
            if (claim["metadata"].get("annotations") or {}).get("pv.kubernetes.io/bind-completed")
        )
        if bound == annotated == volumes:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {bound} of {volumes} scale claims Bound")
        time.sleep(2)


def run_scale(
    workspace: Workspace,
    audit: AuditLog,
    implementation: Implementation,
    *,
    volumes: int,
    idle_seconds: float,
    log_dir: Path,
    py_spy: Path | None = None,
) -> ScaleResult:
    provisioner = RunningProvisioner(
        implementation, workspace, log_dir / f"{implementation.key}-scale.log", py_spy
    )
    try:
        monitor = ProcessMonitor(provisioner.pid).start()
        ready = provisioner.wait_ready()
        ready_cpu = monitor.cpu_seconds()
        (idle,) = idle_window([monitor], SETTLE_SECONDS, idle_seconds)
        peak = monitor.peak_rss_mib()
        monitor.stop()
        requests = audit.count(
            provisioner.started_at, time.time(), implementation.user_agent_prefix
        )
    finally:
        provisioner.stop()
    return ScaleResult(
        implementation=implementation.key,
        volumes=volumes,
        ready_seconds=ready,
        steady_rss_mib=idle.steady_rss_mib,
        peak_rss_mib=peak,
        idle_cpu_seconds=idle.cpu_seconds,
        idle_seconds=idle_seconds,
        requests=dict(requests.by_kind.most_common()),
        ready_cpu_seconds=ready_cpu,
    )
