"""Bursts on real nodes: the burst and release of `bench.burst` on a cluster of two real nodes
(a kubelet, containerd and runc each) and no kwok node, at a few sizes, for ours and both
references, under kube-controller-manager's default client limit and the lifted one.

Why: the kwok bursts run every helper pod on the harness's emulated kubelet, priced by a start
model fitted once to a real kubelet (`localcluster.pod_start.KUBELET`). Here a real kubelet
starts every helper pod and every consumer, pulled from the cluster's local registry, so the
goals are judged where users run and the model can be checked against what the nodes did
(`pod_start_rows`).

Ours with CSI volumes (`ours-csi`) runs here beside them: its cluster gets the CSI workspace
(`bench.csi`) and a node plugin on each real node, started by the bench in the node's mount
namespace before the first burst and stopped after the last; each consumer mounts its volume
through the kubelet's NodePublishVolume. Every burst here waits for its consumers to run, so a
consumer's start (bound to its node, to Running) is measured for every implementation.

One fresh cluster per implementation and binder limit (the limit is a flag of
kube-controller-manager, fixed when it starts). In it the sizes run in turn, smallest first,
each once the previous one's claims are released and the control plane and the nodes are quiet
again. The consumers are spread over the nodes in turn and run the pause image, which ends at
once when deleted, so a release waits on the kubelet's teardown and not on a grace period.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.api import RawApi
from bench.audit import AuditLog, controller_manager_limit, start_audited_cluster
from bench.burst import BurstResult, run_burst
from bench.csi import start_node_plugins
from bench.hostpath_control import run_hostpath_consumers
from bench.implementations import Implementation
from bench.quiet import wait_until_quiet
from bench.stats import percentile
from bench.workspace import prepare_workspace
from localcluster import LocalCluster
from localcluster.errors import ClusterError
from localcluster.pod_start import PodStartModel
from localcluster.real_node_config import PAUSE_IMAGE

REAL_NODES = 2
REAL_SIZES = (1, 20, 40)
LIMITS = ("default", "lifted")
"""kube-controller-manager's client limit: its default, or `--lifted-qps` (as `lifted`)."""
QUIET_WINDOW_SECONDS = 5.0
QUIET_MAX_WAIT_SECONDS = 60.0
"""A released burst of 40 leaves little behind; a short window keeps six clusters' runs
within about 20 minutes on two cores."""

HOST_WAIT_SECONDS = 1800.0
"""How long a run waits for another cluster with real nodes to stop before its own starts."""

CONTROL_TIMEOUT_SECONDS = 300.0

RealResults = dict[str, dict[int, dict[str, BurstResult]]]
"""Binder limit ("default", "lifted") -> claims -> implementation key -> its burst."""


def real_implementations(implementations: Iterable[Implementation]) -> list[Implementation]:
    """Ours (with CSI volumes too) and the references; ours with capacity on is a kwok burst
    only."""
    return [i for i in implementations if not i.capacity]


def limit_qps(limit: str, controller_manager_qps: int | None, lifted_qps: int) -> int | None:
    """kube-controller-manager's client QPS for a binder limit (None: its default)."""
    if limit not in LIMITS:
        raise ValueError(f"unknown binder limit {limit!r}; expected one of {LIMITS}")
    return lifted_qps if limit == "lifted" else controller_manager_qps


def host_taken(error: ClusterError) -> bool:
    """Whether a cluster could not start only because another one with real nodes runs."""
    return "only one" in str(error) and "real nodes" in str(error)


def _start_cluster(
    cluster_dir: Path, qps: int | None, say: Callable[[str], None]
) -> tuple[LocalCluster, AuditLog]:
    """A fresh real-node cluster, once the machine has none: a run takes twenty minutes and
    more, and another cluster with real nodes (a test's) may start between two of its own."""
    deadline = time.monotonic() + HOST_WAIT_SECONDS
    while True:
        try:
            return start_audited_cluster((), cluster_dir, qps, real_nodes=REAL_NODES)
        except ClusterError as error:
            if not host_taken(error) or time.monotonic() > deadline:
                raise
            say(f"real: {error}; waiting for the machine")
            time.sleep(10)


def _wait_quiet(cluster: LocalCluster, say: Callable[[str], None]) -> None:
    real = cluster.real.pids() if cluster.real is not None else []
    quiet = wait_until_quiet(
        [*cluster.control_plane.pids(), *real],
        window=QUIET_WINDOW_SECONDS,
        max_wait=QUIET_MAX_WAIT_SECONDS,
    )
    say(
        f"real: quiet after {quiet.seconds:.0f}s ({quiet.last_share:.2f} CPU)"
        + ("" if quiet.quiet else ": gave up waiting, measuring anyway")
    )


def run_real_bursts(
    implementations: Sequence[Implementation],
    sizes: Sequence[int],
    *,
    controller_manager_qps: int | None,
    lifted_qps: int,
    concurrency: int,
    timeout: float,
    work_dir: Path,
    say: Callable[[str], None],
) -> RealResults:
    """Each implementation's bursts of `sizes` claims on its own real-node cluster, under each
    binder limit."""
    results: RealResults = {}
    for limit in LIMITS:
        qps = limit_qps(limit, controller_manager_qps, lifted_qps)
        for implementation in real_implementations(implementations):
            label = f"real ({limit} binder limit): {implementation.label}"
            cluster_dir = work_dir / f"real-{limit}-{implementation.key}"
            cluster, audit = _start_cluster(cluster_dir, qps, say)
            say(f"{label}: {REAL_NODES} real nodes ready in {cluster.startup_seconds:.1f}s")
            api = RawApi.for_cluster(cluster, pool_size=concurrency + 8)
            plugins = None
            try:
                workspace = prepare_workspace(cluster, api, cluster_dir, csi=implementation.csi)
                if implementation.csi:
                    plugins = start_node_plugins(
                        cluster, workspace.provisioner_name, workspace.config_file, cluster_dir
                    )
                    say(f"{label}: a node plugin registered on each real node")
                for claims in sizes:
                    _wait_quiet(cluster, say)
                    log_dir = cluster_dir / str(claims)
                    log_dir.mkdir(parents=True, exist_ok=True)
                    burst = run_burst(
                        workspace,
                        api,
                        audit,
                        implementation,
                        claims=claims,
                        concurrency=concurrency,
                        log_dir=log_dir,
                        timeout=timeout,
                        binder_limit=controller_manager_limit(qps),
                        nodes=list(cluster.nodes),
                        consumer_image=PAUSE_IMAGE,
                        wait_consumers=True,
                    )
                    if implementation.csi:
                        burst = _with_hostpath_control(
                            burst,
                            cluster,
                            api,
                            cluster_dir=cluster_dir,
                            concurrency=concurrency,
                            say=say,
                        )
                    results.setdefault(limit, {}).setdefault(claims, {})[implementation.key] = burst
                    say(
                        f"{label}: {claims} Bound in {burst.bind_seconds:.1f}s "
                        f"(p99 {burst.latency.p99:.1f}s), released in "
                        f"{burst.release_seconds:.1f}s, "
                        f"{burst.requests_per_volume:.2f} requests per volume, "
                        f"consumers started in {burst.consumer_start.p50:.2f}s (p50)"
                    )
            finally:
                if plugins is not None:
                    plugins.stop()
                api.close()
                cluster.stop()
    return results


def _with_hostpath_control(
    burst: BurstResult,
    cluster: LocalCluster,
    api: RawApi,
    *,
    cluster_dir: Path,
    concurrency: int,
    say: Callable[[str], None],
) -> BurstResult:
    """The CSI burst with its control: as many hostPath consumers, created at once from as many
    threads as the burst's, on the same nodes (`hostpath_control`), once the nodes are quiet
    again."""
    _wait_quiet(cluster, say)
    directory = cluster_dir / "hostpath-control"
    try:
        control = run_hostpath_consumers(
            api,
            count=burst.claims,
            nodes=list(cluster.nodes),
            directory=directory,
            image=PAUSE_IMAGE,
            concurrency=concurrency,
            timeout=CONTROL_TIMEOUT_SECONDS,
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    say(f"real: {burst.claims} hostPath consumers at once started in {control.p50:.2f}s (p50)")
    return replace(burst, hostpath_consumer_start=control)


def pod_start_rows(real: RealResults, model: PodStartModel) -> list[dict[str, Any]]:
    """The helper pods the real nodes ran, by burst size and containers: how many, their
    created-to-Succeeded p50, p90 and max, and what the model gives such a pod alone on its node
    (its sandbox and one start per container; no other pod in the node's lane) with the p50's
    ratio to it. At one claim a pod has the nodes to
    itself, the model's case; bigger bursts add the contention of pods started together."""
    seen: dict[tuple[int, int], list[float]] = {}
    for by_size in real.values():
        for claims, runs in by_size.items():
            for burst in runs.values():
                for containers, seconds in burst.helper_pods:
                    seen.setdefault((claims, containers), []).append(seconds)
    rows = []
    for (claims, containers), times in sorted(seen.items()):
        predicted = model.alone_seconds(containers)
        p50 = percentile(times, 0.5)
        rows.append(
            {
                "claims": claims,
                "containers": containers,
                "pods": len(times),
                "p50": p50,
                "p90": percentile(times, 0.9),
                "max": max(times),
                "model": predicted,
                "p50/model": p50 / predicted if predicted else math.nan,
            }
        )
    return rows
