"""Failover over the scale data set: from the leader's SIGKILL to the first new claim Bound.

Ours runs as a deployment with two replicas does: a leader and a warm standby (leader election
on, the runtime's default lease, which the stack does not change; the standby's informers synced,
nothing written). Once the standby reports warm caches, its steady RSS and idle CPU are measured
over a quiet window; then the leader is killed and one claim is made at once. The standby takes
the Lease when it expires and serves the claim from the caches it already has.

rancher v0.0.37 runs sig-storage-lib's controller with `LeaderElection(false)` (its main.go), so
two of its processes would both provision: it cannot run a standby. Its failover is modelled as
sig-storage-lib's own election would make it: that library starts its informers only once it
leads (`ProvisionController.Run`), with the same default lease (15 s), so a standby of it is a
cold start at the lease's expiry. The bench kills it, makes the claim, and starts a fresh process
one lease duration after the kill.

The claim arrives as the scheduler and kube-controller-manager leave one (its node selected,
the provisioner named), so the time is the hand-over's, the provisioner's and the PV binder's.
"""

from __future__ import annotations

import math
import os
import signal
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.api import ApiError, RawApi
from bench.burst import wait_until
from bench.implementations import Implementation, RunningProvisioner
from bench.process_stats import ProcessMonitor, idle_window
from bench.scale import SCALE_NAMESPACE, SETTLE_SECONDS
from bench.workspace import PROVISIONER_NAMESPACE, SCALE_CLASS, Workspace
from provisioner.configuration.defaults import LEASE_DURATION_SECONDS
from provisioner.kube.leader_election import lease_name_for
from provisioner.provisioning.annotations import SELECTED_NODE

GOAL_MARGIN_SECONDS = 2.0
"""Issue 31's goal: a failover within the lease duration plus this."""
FAILOVER_GOAL_SECONDS = LEASE_DURATION_SECONDS + GOAL_MARGIN_SECONDS
POLL_SECONDS = 0.1
STORAGE_PROVISIONER_ANNOTATIONS = (
    "volume.kubernetes.io/storage-provisioner",
    "volume.beta.kubernetes.io/storage-provisioner",
)


@dataclass(frozen=True)
class FailoverMoments:
    """Wall-clock times (time.time()) of one failover, each first seen by the bench's poll."""

    killed: float
    lease_expired: float
    """The leader's last renewal (the Lease's renewTime) plus the lease duration. The
    reference: modelled as the kill plus the lease duration."""
    leading: float
    """Ours: the Lease names the standby. The reference: its fresh process starts."""
    synced: float
    """The new leader's informers synced (its ready line)."""
    volume_created: float
    bound: float


@dataclass
class FailoverResult:
    implementation: str
    volumes: int
    lease_duration_seconds: float
    warm: bool
    """True: a standby with synced caches took over; False: a cold start (the reference)."""
    failover_seconds: float
    """The leader's kill to the new claim Bound."""
    lease_wait_seconds: float
    """The kill to the new leader leading: `expiry_seconds` plus `takeover_seconds`."""
    expiry_seconds: float
    """The kill to the lease's expiry: the lease duration less the time since the leader's
    last renewal."""
    takeover_seconds: float
    """The lease's expiry to the standby leading: it sees renewals and tries to take the lease
    at its own retry period, so it can lead up to about two of them after the expiry."""
    sync_seconds: float
    """Leading to its informers synced (a cold start's list of the data set)."""
    provisioning_seconds: float
    """Synced to the claim's PV created (the helper pod's run included)."""
    binding_seconds: float
    """The PV created to the claim Bound (kube-controller-manager's PV binder)."""
    standby_steady_rss_mib: float = math.nan
    """Median RSS of the warm standby over the quiet window before the kill; NaN without one."""
    standby_idle_cpu_seconds: float = math.nan
    leader_steady_rss_mib: float = math.nan
    idle_seconds: float = math.nan
    failovers: list[float] = field(default_factory=list)
    """The kill to Bound of each failover when there were several (`median_failover`)."""


def phases(moments: FailoverMoments) -> tuple[float, float, float, float]:
    """Lease wait, sync, provisioning and binding, in seconds: consecutive, so they add up to
    the failover. A moment the poll saw before the one it follows (two changes between polls)
    counts as the same instant."""
    lease_wait = max(0.0, moments.leading - moments.killed)
    leading = moments.killed + lease_wait
    synced = max(leading, moments.synced)
    created = max(synced, moments.volume_created)
    bound = max(created, moments.bound)
    return lease_wait, synced - leading, created - synced, bound - created


def failover_result(
    implementation: str, volumes: int, moments: FailoverMoments, *, warm: bool
) -> FailoverResult:
    lease_wait, sync, provisioning, binding = phases(moments)
    expiry = min(lease_wait, max(0.0, moments.lease_expired - moments.killed))
    return FailoverResult(
        implementation=implementation,
        volumes=volumes,
        lease_duration_seconds=LEASE_DURATION_SECONDS,
        warm=warm,
        failover_seconds=lease_wait + sync + provisioning + binding,
        lease_wait_seconds=lease_wait,
        expiry_seconds=expiry,
        takeover_seconds=lease_wait - expiry,
        sync_seconds=sync,
        provisioning_seconds=provisioning,
        binding_seconds=binding,
    )


def median_failover(runs: list[FailoverResult]) -> FailoverResult:
    """Several failovers of one implementation as one result: the one whose time is the median
    (the lower middle of an even number), so its phases still add up, with every time kept.
    The lease wait alone varies by up to two retry periods from one failover to the next."""
    if not runs:
        raise ValueError("no failovers to take the median of")
    middle = sorted(runs, key=lambda run: run.failover_seconds)[(len(runs) - 1) // 2]
    return replace(middle, failovers=[run.failover_seconds for run in runs])


def lease_expiry(lease: dict[str, Any]) -> float:
    """When a Lease expires unless renewed: its renewTime (a MicroTime, UTC) plus its
    leaseDurationSeconds, as a time.time() value."""
    spec = lease["spec"]
    renewed = datetime.fromisoformat(str(spec["renewTime"]).replace("Z", "+00:00"))
    return renewed.timestamp() + float(spec["leaseDurationSeconds"])


def failover_claim(name: str, node: str, provisioner_name: str) -> dict[str, Any]:
    annotations = {SELECTED_NODE: node}
    annotations.update(dict.fromkeys(STORAGE_PROVISIONER_ANNOTATIONS, provisioner_name))
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "storageClassName": SCALE_CLASS,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


class _Failover:
    """One failover in the scale cluster: the claim, the Lease and the polling of both."""

    def __init__(
        self,
        workspace: Workspace,
        api: RawApi,
        implementation: Implementation,
        *,
        log_dir: Path,
        timeout: float,
    ) -> None:
        self.workspace = workspace
        self.api = api
        self.implementation = implementation
        self.log_dir = log_dir
        self.timeout = timeout
        self.claim_path = (
            f"/api/v1/namespaces/{SCALE_NAMESPACE}/persistentvolumeclaims/"
            f"failover-{uuid.uuid4().hex[:8]}"
        )
        self.lease_path = (
            f"/apis/coordination.k8s.io/v1/namespaces/{PROVISIONER_NAMESPACE}/leases/"
            f"{lease_name_for(workspace.provisioner_name)}"
        )
        self.volume_name = ""

    def start(self, role: str) -> RunningProvisioner:
        """A process of the implementation, its log named for its role."""
        log_path = self.log_dir / f"{self.implementation.key}-{role}.log"
        return RunningProvisioner(self.implementation, self.workspace, log_path)

    def lease(self) -> dict[str, Any]:
        try:
            return self.api.get(self.lease_path)
        except ApiError as error:
            if error.status == 404:
                return {}
            raise

    def holder(self) -> str:
        return str(self.lease().get("spec", {}).get("holderIdentity") or "")

    def kill_and_claim(self, leader: RunningProvisioner) -> float:
        """SIGKILL the leader, then make the claim at once; the kill's time."""
        killed = time.time()
        os.kill(leader.pid, signal.SIGKILL)
        leader.process.wait(10)
        name = self.claim_path.rsplit("/", 1)[1]
        node = self.workspace.cluster.nodes[0]
        created = self.api.create(
            self.claim_path.rsplit("/", 1)[0],
            failover_claim(name, node, self.workspace.provisioner_name),
        )
        self.volume_name = f"pvc-{created['metadata']['uid']}"
        return killed

    def observe(
        self,
        killed: float,
        lease_expired: float,
        leading: Callable[[], bool],
        synced: Callable[[], bool],
    ) -> FailoverMoments:
        """Polls until the claim is Bound; each moment is the first poll that saw it (or saw a
        later one)."""
        seen: dict[str, float] = {}
        checks: dict[str, Callable[[], bool]] = {
            "leading": leading,
            "synced": synced,
            "volume_created": self._volume_exists,
            "bound": self._claim_bound,
        }
        deadline = time.monotonic() + self.timeout
        while "bound" not in seen:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"failover: claim {self.claim_path} not Bound in {self.timeout:.0f}s"
                    f" (seen: {', '.join(seen) or 'nothing'})"
                )
            for index, (name, check) in enumerate(checks.items()):
                if name not in seen and check():
                    # What this moment follows happened by now too, though no poll saw it.
                    for earlier in list(checks)[: index + 1]:
                        seen.setdefault(earlier, time.time())
            time.sleep(POLL_SECONDS)
        return FailoverMoments(killed=killed, lease_expired=lease_expired, **seen)

    def _volume_exists(self) -> bool:
        try:
            self.api.get(f"/api/v1/persistentvolumes/{self.volume_name}")
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def _claim_bound(self) -> bool:
        return bool(self.api.get(self.claim_path).get("status", {}).get("phase") == "Bound")

    def clean_up(self) -> None:
        """The claim and its (Retain) PV, so that the data set is as it was."""
        self.api.delete(self.claim_path)
        volume_path = f"/api/v1/persistentvolumes/{self.volume_name}"
        if self.volume_name and self._volume_exists():
            self.api.merge_patch(volume_path, {"metadata": {"finalizers": None}})
            self.api.delete(volume_path)


def _ready_line_seen(provisioner: RunningProvisioner) -> Callable[[], bool]:
    needle = provisioner.implementation.ready_line.encode()
    return lambda: needle in provisioner.log_path.read_bytes()


def _readyz(port: int) -> str:
    """What /readyz answers; "" until the probe server answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return ""


def run_failover(
    workspace: Workspace,
    api: RawApi,
    implementation: Implementation,
    *,
    volumes: int,
    idle_seconds: float,
    log_dir: Path,
    timeout: float,
) -> FailoverResult:
    log_dir.mkdir(parents=True, exist_ok=True)
    failover = _Failover(workspace, api, implementation, log_dir=log_dir, timeout=timeout)
    if implementation.reference:
        return _cold_failover(failover, volumes)
    return _warm_failover(failover, volumes, idle_seconds)


def _warm_failover(failover: _Failover, volumes: int, idle_seconds: float) -> FailoverResult:
    timeout = failover.timeout
    leader = failover.start("leader")
    standby: RunningProvisioner | None = None
    try:
        leader.wait_ready(timeout)
        holder = failover.holder()
        if f"_{leader.pid}_" not in holder:
            raise RuntimeError(f"failover: the Lease names {holder!r}, not the first process")
        standby = failover.start("standby")
        port = standby.port
        wait_until(lambda: _readyz(port).strip().endswith("caches warm"), timeout, "a warm standby")
        standby_monitor = ProcessMonitor(standby.pid).start()
        leader_monitor = ProcessMonitor(leader.pid).start()
        standby_idle, leader_idle = idle_window(
            [standby_monitor, leader_monitor], SETTLE_SECONDS, idle_seconds
        )
        leader_monitor.stop()
        standby_monitor.stop()
        killed = failover.kill_and_claim(leader)
        # Read after the kill, it is the last renewal the leader made.
        expired = lease_expiry(failover.lease())
        moments = failover.observe(
            killed,
            expired,
            lambda: failover.holder() not in ("", holder),
            _ready_line_seen(standby),
        )
    finally:
        leader.stop()
        if standby is not None:
            standby.stop()
        failover.clean_up()
    result = failover_result(failover.implementation.key, volumes, moments, warm=True)
    result.standby_steady_rss_mib = standby_idle.steady_rss_mib
    result.standby_idle_cpu_seconds = standby_idle.cpu_seconds
    result.leader_steady_rss_mib = leader_idle.steady_rss_mib
    result.idle_seconds = idle_seconds
    return result


def _cold_failover(failover: _Failover, volumes: int) -> FailoverResult:
    leader = failover.start("leader")
    successor: RunningProvisioner | None = None
    try:
        leader.wait_ready(failover.timeout)
        time.sleep(SETTLE_SECONDS)
        killed = failover.kill_and_claim(leader)
        time.sleep(max(0.0, killed + LEASE_DURATION_SECONDS - time.time()))
        successor = failover.start("successor")
        expired = killed + LEASE_DURATION_SECONDS
        seen = failover.observe(killed, expired, lambda: True, _ready_line_seen(successor))
        moments = replace(seen, leading=successor.started_at)
    finally:
        leader.stop()
        if successor is not None:
            successor.stop()
        failover.clean_up()
    return failover_result(failover.implementation.key, volumes, moments, warm=False)
