"""Runs the scenarios in order, each implementation on a fresh cluster for the burst, one
after the other, and the scale data set once for all of them (they only read it; the failover
adds one claim and removes it again). Ours with capacity on runs the burst only, in its own
workspace (`prepare_workspace(capacity_budget=)`)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.api import RawApi
from bench.audit import AuditLog, controller_manager_limit, start_audited_cluster
from bench.burst import BurstResult, run_burst
from bench.capacity import burst_budget
from bench.failover import FailoverResult, median_failover, run_failover
from bench.floor import run_floor
from bench.implementations import OURS, REFERENCE_TUNED, Implementation
from bench.options import BenchOptions
from bench.quiet import wait_until_quiet
from bench.real_nodes import RealResults, run_real_bursts
from bench.scale import (
    SCALE_CONTROLLER_MANAGER_FLAGS,
    SCALE_CONTROLLER_MANAGER_QPS,
    DatasetResult,
    ScaleResult,
    create_dataset,
    median_start,
    run_scale,
)
from bench.snapshot_goals import DiskRun
from bench.snapshots import run_snapshots
from bench.workspace import Workspace, prepare_workspace
from localcluster import default_node_specs
from localcluster.pod_start import MODELS


@dataclass
class FloorResult:
    writes: int
    concurrency: int
    seconds: float


@dataclass
class RunResults:
    burst: dict[str, BurstResult] = field(default_factory=dict)
    lifted: dict[str, BurstResult] = field(default_factory=dict)
    """The burst again with kube-controller-manager's client limit raised (ours, tuned)."""
    floor: FloorResult | None = None
    dataset: DatasetResult | None = None
    scale: dict[str, ScaleResult] = field(default_factory=dict)
    """At options.scale_volumes, by implementation."""
    scaling: dict[int, dict[str, ScaleResult]] = field(default_factory=dict)
    """Every size of options.scale_sizes, by number of volumes, then implementation."""
    failover: dict[str, FailoverResult] = field(default_factory=dict)
    """At the largest scale size: ours (leader and warm standby) and the tuned reference."""
    real: RealResults = field(default_factory=dict)
    """The bursts on real nodes, by binder limit, claims and implementation."""
    snapshots: list[DiskRun] = field(default_factory=list)
    """The snapshot scenario's disks: the plain one, then btrfs."""


def say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def run_bursts(
    options: BenchOptions, work_dir: Path, results: RunResults, *, lifted: bool = False
) -> None:
    """Each implementation's burst on a fresh cluster; `lifted`: ours and the tuned reference
    only, with kube-controller-manager's client limit at `options.lifted_qps`, into
    `results.lifted` (no floor)."""
    # CSI volumes need node plugins, which only real nodes run.
    implementations: list[Implementation] = [
        i
        for i in options.implementations
        if not i.csi and (not lifted or i in (OURS, REFERENCE_TUNED))
    ]
    scenario = "lifted" if lifted else "burst"
    for implementation in implementations:
        say(f"{scenario}: {implementation.label}: starting a fresh {options.nodes}-node cluster")
        cluster_dir = work_dir / f"{scenario}-{implementation.key}"
        qps = options.lifted_qps if lifted else options.controller_manager_qps
        cluster, audit = start_audited_cluster(
            default_node_specs(options.nodes), cluster_dir, qps, MODELS[options.pod_start]
        )
        api = RawApi.for_cluster(cluster, pool_size=options.concurrency + 8)
        try:
            budget = burst_budget(options.claims) if implementation.capacity else None
            workspace = prepare_workspace(cluster, api, cluster_dir, budget)
            started = time.monotonic()
            burst = run_burst(
                workspace,
                api,
                audit,
                implementation,
                claims=options.claims,
                concurrency=options.concurrency,
                log_dir=cluster_dir,
                timeout=options.timeout,
                py_spy=options.py_spy,
                binder_limit=controller_manager_limit(qps),
            )
            (results.lifted if lifted else results.burst)[implementation.key] = burst
            say(
                f"{scenario}: {implementation.label}: {options.claims} Bound in "
                f"{burst.bind_seconds:.1f}s, released in {burst.release_seconds:.1f}s "
                f"({time.monotonic() - started:.0f}s in all)"
            )
            if implementation.capacity:
                say(
                    f"burst: {implementation.label}: {burst.capacity_writes_per_volume:.3g} "
                    "CSIStorageCapacity writes per volume (audit), "
                    f"{burst.capacity_writes_metric_per_volume:.3g} (metric)"
                )
            if implementation is OURS and not lifted:
                seconds = run_floor(api, burst.cluster_writes, options.concurrency)
                results.floor = FloorResult(burst.cluster_writes, options.concurrency, seconds)
                say(f"floor: {burst.cluster_writes} writes in {seconds:.2f}s")
        finally:
            api.close()
            cluster.stop()


def run_scales(options: BenchOptions, work_dir: Path, results: RunResults) -> None:
    implementations = [i for i in options.implementations if not i.capacity and not i.csi]
    if not implementations:
        return
    say(f"scale: starting a fresh cluster for {', '.join(map(str, options.scale_sizes))} volumes")
    cluster_dir = work_dir / "scale"
    cluster, audit = start_audited_cluster(
        default_node_specs(options.nodes),
        cluster_dir,
        max(options.controller_manager_qps or 0, SCALE_CONTROLLER_MANAGER_QPS),
        MODELS[options.pod_start],
        SCALE_CONTROLLER_MANAGER_FLAGS,
    )
    api = RawApi.for_cluster(cluster, pool_size=2 * options.concurrency + 8)
    try:
        workspace = prepare_workspace(cluster, api, cluster_dir)
        existing = 0
        for size_index, volumes in enumerate(options.scale_sizes):
            say(f"scale: making bound volumes {existing} to {volumes}")
            dataset = create_dataset(workspace, api, volumes, 2 * options.concurrency, existing)
            existing = volumes
            if volumes == options.scale_volumes:
                results.dataset = dataset
            say(f"scale: data set of {volumes} made in {dataset.seconds:.0f}s")
            log_dir = cluster_dir / str(volumes)
            # Alternate who starts first, so neither always meets the other's page cache. The
            # largest size (the goals') takes several starts of each, in turns.
            order = implementations if size_index % 2 == 0 else implementations[::-1]
            largest = volumes == options.scale_sizes[-1]
            starts: dict[str, list[ScaleResult]] = {}
            rounds = options.scale_starts if largest else 1
            for round_index in range(rounds if "scale" in options.scenarios else 0):
                shift = round_index % len(order)
                for implementation in [*order[shift:], *order[:shift]]:
                    start_dir = log_dir / f"start-{round_index + 1}" if largest else log_dir
                    scale = _start_once(
                        options,
                        workspace,
                        audit,
                        implementation,
                        volumes=volumes,
                        log_dir=start_dir,
                    )
                    starts.setdefault(implementation.key, []).append(scale)
            for key, runs in starts.items():
                scale = median_start(runs) if len(runs) > 1 else runs[0]
                results.scaling.setdefault(volumes, {})[key] = scale
                if volumes == options.scale_volumes:
                    results.scale[key] = scale
            if largest and "failover" in options.scenarios:
                run_failovers(
                    options,
                    workspace,
                    api,
                    implementations,
                    volumes=volumes,
                    log_dir=log_dir,
                    results=results,
                )
    finally:
        api.close()
        cluster.stop()


def run_failovers(
    options: BenchOptions,
    workspace: Workspace,
    api: RawApi,
    implementations: list[Implementation],
    *,
    volumes: int,
    log_dir: Path,
    results: RunResults,
) -> None:
    """Ours (a leader and a warm standby) and the tuned reference (a cold start after the
    lease), each over the data set once the control plane is quiet (`bench.failover`), as many
    times as the start-ups (`--scale-starts`), in turns; the figures are the median failover's."""
    chosen = [i for i in implementations if i in (OURS, REFERENCE_TUNED)]
    runs: dict[str, list[FailoverResult]] = {}
    for round_index in range(options.scale_starts):
        for implementation in chosen:
            _wait_quiet(workspace)
            failover = run_failover(
                workspace,
                api,
                implementation,
                volumes=volumes,
                idle_seconds=options.idle_seconds,
                log_dir=log_dir / "failover" / str(round_index + 1),
                timeout=options.timeout,
            )
            runs.setdefault(implementation.key, []).append(failover)
            _say_failover(implementation, failover)
    for key, failovers in runs.items():
        results.failover[key] = median_failover(failovers)


def _say_failover(implementation: Implementation, failover: FailoverResult) -> None:
    say(
        f"failover: {implementation.label} over {failover.volumes}: kill to new claim Bound in "
        f"{failover.failover_seconds:.2f}s (lease wait {failover.lease_wait_seconds:.2f}s, "
        f"of it {failover.takeover_seconds:.2f}s after the lease expired, "
        f"sync {failover.sync_seconds:.2f}s, provisioning "
        f"{failover.provisioning_seconds:.2f}s, binding {failover.binding_seconds:.2f}s)"
        + (
            f"; standby steady RSS {failover.standby_steady_rss_mib:.0f} MiB"
            if failover.warm
            else ""
        )
    )


def _wait_quiet(workspace: Workspace) -> float:
    quiet = wait_until_quiet(workspace.cluster.control_plane.pids(), say=say)
    say(
        f"scale: control plane quiet after {quiet.seconds:.0f}s "
        f"({quiet.last_share:.2f} CPU)"
        + ("" if quiet.quiet else ": gave up waiting, measuring anyway")
    )
    return quiet.seconds


def _start_once(
    options: BenchOptions,
    workspace: Workspace,
    audit: AuditLog,
    implementation: Implementation,
    *,
    volumes: int,
    log_dir: Path,
) -> ScaleResult:
    """One start over the data set, once the control plane is quiet."""
    quiet_seconds = _wait_quiet(workspace)
    log_dir.mkdir(parents=True, exist_ok=True)
    scale = run_scale(
        workspace,
        audit,
        implementation,
        volumes=volumes,
        idle_seconds=options.idle_seconds,
        log_dir=log_dir,
        py_spy=options.py_spy,
    )
    scale.quiet_wait_seconds = quiet_seconds
    say(
        f"scale: {implementation.label} over {volumes}: ready in "
        f"{scale.ready_seconds:.2f}s ({scale.ready_cpu_seconds:.2f}s of CPU), "
        f"steady RSS {scale.steady_rss_mib:.0f} MiB, "
        f"peak {scale.peak_rss_mib:.0f} MiB"
    )
    return scale


def run_all(options: BenchOptions, work_dir: Path) -> RunResults:
    results = RunResults()
    if "burst" in options.scenarios:
        run_bursts(options, work_dir, results)
    if "lifted" in options.scenarios:
        run_bursts(options, work_dir, results, lifted=True)
    if options.scenarios & {"scale", "failover"}:
        run_scales(options, work_dir, results)
    if "real" in options.scenarios:
        results.real = run_real_bursts(
            options.implementations,
            options.real_sizes,
            controller_manager_qps=options.controller_manager_qps,
            lifted_qps=options.lifted_qps,
            concurrency=options.concurrency,
            timeout=options.timeout,
            work_dir=work_dir,
            say=say,
        )
    if "snapshots" in options.scenarios:
        results.snapshots = run_snapshots(work_dir, say)
    return results
