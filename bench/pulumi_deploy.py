"""`python -m bench.pulumi_deploy`: wall time of the Pulumi operations a platform team runs,
on the local cluster: `pulumi up` of a stack from empty, a no-op `pulumi preview` (what every
pull request and drift check costs), a no-op `preview --refresh`, and `pulumi destroy`.

Each round makes a fresh stack (the dev stack's config, its own names) so every `up` starts
from nothing; the table shows the median and the range over the rounds.
"""

from __future__ import annotations

import argparse
import functools
import secrets
import statistics
import sys
import time
from collections.abc import Callable

import yaml
from pulumi import automation as auto

from localcluster import ClusterOptions, LocalCluster
from scripts.pulumi_engine import ROOT, find_engine, project_copy


def _timed(operation: Callable[[], object]) -> float:
    started = time.monotonic()
    operation()
    return time.monotonic() - started


def _round_config(cluster: LocalCluster, index: int) -> dict[str, object]:
    config = dict(yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())["config"])
    config["local-path-storage:namespace"] = f"bench-pulumi-{index}"
    config["local-path-storage:storageClasses"] = [
        {**config["local-path-storage:storageClasses"][0], "name": f"bench-{index}"}
    ]
    config["kubernetes:kubeconfig"] = str(cluster.kubeconfig)
    return config


def measure(rounds: int) -> dict[str, list[float]]:
    engine = find_engine()
    timings: dict[str, list[float]] = {"up": [], "preview": [], "preview --refresh": []}
    timings["destroy"] = []
    with LocalCluster.start(ClusterOptions(announce=False)) as cluster:
        env = engine.environment(
            cluster.dir / "pulumi-state", secrets.token_hex(16), temp_dir=cluster.dir / "pulumi-tmp"
        )
        command = auto.PulumiCommand(root=str(engine.root))
        for index in range(rounds):
            project = project_copy(
                cluster.dir / f"project-{index}", f"bench-{index}", _round_config(cluster, index)
            )
            workspace = auto.LocalWorkspace(
                work_dir=str(project), pulumi_command=command, env_vars=env
            )
            stack = auto.Stack.create(f"bench-{index}", workspace)
            timings["up"].append(_timed(stack.up))
            no_op = functools.partial(stack.preview, expect_no_changes=True)
            timings["preview"].append(_timed(no_op))
            timings["preview --refresh"].append(_timed(functools.partial(no_op, refresh=True)))
            timings["destroy"].append(_timed(stack.destroy))
            print(
                f"round {index + 1}/{rounds}: "
                + ", ".join(f"{name} {values[-1]:.1f}s" for name, values in timings.items()),
                flush=True,
            )
    return timings


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pulumi_deploy")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    timings = measure(args.rounds)
    print("\n| operation (14 resources) | median | min | max |\n|---|---|---|---|")
    for name, values in timings.items():
        print(
            f"| `pulumi {name}` | {statistics.median(values):.1f} s | {min(values):.1f} s "
            f"| {max(values):.1f} s |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
