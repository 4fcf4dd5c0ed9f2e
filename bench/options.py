"""Command-line flags of `python -m bench`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.implementations import ALL, Implementation
from bench.real_nodes import REAL_SIZES
from localcluster.pod_start import MODELS

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = ("burst", "lifted", "scale", "failover", "real", "snapshots")
DEFAULT_SCENARIOS = ("burst", "lifted", "scale", "failover")
"""`real` and `snapshots` start real nodes (root, one such cluster on the machine): only when
asked."""


@dataclass(frozen=True)
class BenchOptions:
    claims: int
    nodes: int
    scale_volumes: int
    scale_sizes: tuple[int, ...]
    """Every data-set size of the scaling table, ascending; includes scale_volumes."""
    scale_starts: int
    """Starts of each implementation over the largest data set (the start-up goals' size),
    taken in turns; the figures are their medians (`bench.scale.median_start`)."""
    concurrency: int
    idle_seconds: float
    implementations: tuple[Implementation, ...]
    scenarios: frozenset[str]
    output: Path
    plot: Path | None
    timeout: float
    quick: bool
    controller_manager_qps: int | None
    lifted_qps: int
    """kube-controller-manager's client QPS in the `lifted` scenario (burst twice that)."""
    py_spy: Path | None
    pod_start: str
    """The helper-pod runner's pod start model by name (localcluster.pod_start.MODELS)."""
    real_sizes: tuple[int, ...] = REAL_SIZES
    """Claims in each burst of the `real` scenario, run in this order on each cluster."""


def _positive(text: str) -> int:
    try:
        number = int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a number: {text}") from e
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return number


def _sizes(text: str) -> tuple[int, ...]:
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text}")
    return tuple(_positive(part) for part in parts)


def parse_options(argv: Sequence[str]) -> BenchOptions:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark this provisioner against rancher/local-path-provisioner on "
        "local clusters: burst, release, scale, failover, and the cluster's write floor.",
    )
    add = parser.add_argument
    add("--claims", type=int, help="claims in the burst (default 200; --quick 20)")
    add("--nodes", type=int, default=4, help="fake nodes per cluster (default 4)")
    add("--scale-volumes", type=int, help="bound volumes for the scale run (default 10000)")
    add(
        "--scale-sizes",
        type=_sizes,
        default=(),
        help="also start each implementation over these numbers of volumes, comma-separated "
        "(e.g. 1000,10000,50000), for the scaling table; one cluster, its data set grown in "
        "turn",
    )
    add(
        "--scale-starts",
        type=_positive,
        help="starts of each implementation, in turns, over the largest data set; its figures "
        "are their medians (default 3; --quick 1)",
    )
    add("--concurrency", type=int, default=8, help="client threads of the bench and the floor")
    add("--idle-seconds", type=float, default=10.0, help="idle CPU window after ready")
    add(
        "--only",
        choices=[implementation.key for implementation in ALL],
        action="append",
        help="run only these implementations (repeatable; default all five; ours-capacity is "
        "ours with a budget on its base path and a CSIDriver asking for capacity, burst only; "
        "ours-csi is ours with a volumeType: csi class and a node plugin per node, real only)",
    )
    add(
        "--scenario",
        choices=SCENARIOS,
        action="append",
        help="run only these scenarios (repeatable; default all but real; the floor goes "
        "with burst; lifted is the burst again, ours and the tuned reference only, with "
        "kube-controller-manager's client limit raised to --lifted-qps so its PV binder does "
        "not pace it; failover kills the leader over the largest scale data set and times a "
        "new claim until Bound: ours with a warm standby, the tuned reference started cold "
        "one lease duration after the kill; real runs bursts of --real-sizes claims on two "
        "real nodes (kubelet, containerd, runc; needs root and no other real-node cluster on "
        "the machine), ours, ours-csi and both references, under the default and the lifted "
        "limit; snapshots times a VolumeSnapshot of a 1 GiB volume and its restore on one real "
        "node, on its plain disk and on btrfs, beside cp -a and cp -a --reflink=always of the "
        "same data there (root, as real))",
    )
    add(
        "--real-sizes",
        type=_sizes,
        default=REAL_SIZES,
        help="claims in each burst of the real scenario, comma-separated, run in this order "
        "(default 1,20,40)",
    )
    add("--quick", action="store_true", help="a small smoke run: 20 claims, 300 volumes")
    add("--output", type=Path, default=REPO / "bench" / "results" / "latest.json")
    add("--plot", type=Path, default=REPO / "bench" / "results" / "latest.png")
    add("--no-plot", action="store_true", help="write no PNG")
    add(
        "--controller-manager-qps",
        type=int,
        help="raise kube-controller-manager's client QPS (burst twice that) from its default "
        "20/30, so its PV binder does not pace the burst",
    )
    add(
        "--lifted-qps",
        type=int,
        default=200,
        help="kube-controller-manager's client QPS in the lifted scenario (default 200)",
    )
    add(
        "--py-spy",
        type=Path,
        help="profile ours with this py-spy binary (raw stacks beside each log under "
        "bench/results/work); its figures then include the profiler's overhead",
    )
    add(
        "--pod-start",
        choices=sorted(MODELS),
        default="kubelet",
        help="time the local cluster takes to start a helper pod, for every implementation "
        "alike: kubelet (default; a pod and each container cost what a real kubelet took, "
        "localcluster/pod_start.py) or fast (the tests' runner, no added time)",
    )
    add("--timeout", type=float, default=900.0, help="seconds any one wait may take")
    args = parser.parse_args(list(argv))
    chosen = tuple(i for i in ALL if not args.only or i.key in args.only)
    scale_volumes = args.scale_volumes or (300 if args.quick else 10_000)
    return BenchOptions(
        claims=args.claims or (20 if args.quick else 200),
        nodes=args.nodes,
        scale_volumes=scale_volumes,
        scale_sizes=tuple(sorted({scale_volumes, *args.scale_sizes})),
        scale_starts=args.scale_starts or (1 if args.quick else 3),
        concurrency=args.concurrency,
        idle_seconds=args.idle_seconds,
        implementations=chosen,
        scenarios=frozenset(args.scenario or DEFAULT_SCENARIOS),
        output=args.output,
        plot=None if args.no_plot else args.plot,
        timeout=args.timeout,
        quick=args.quick,
        controller_manager_qps=args.controller_manager_qps,
        lifted_qps=args.lifted_qps,
        py_spy=args.py_spy,
        pod_start=args.pod_start,
        real_sizes=args.real_sizes,
    )
