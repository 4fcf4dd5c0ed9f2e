"""Command line: `python -m localcluster start|run|stop|status`.

Why: a person debugging the provisioner wants the same cluster the tests use, with a kubeconfig
to point kubectl or the provisioner at: `start` runs it in the background, `run` in the
foreground until Ctrl-C, `status` says whether it is up, `stop` ends it and removes its files.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from types import FrameType

from localcluster import background
from localcluster.cluster import ClusterOptions, LocalCluster
from localcluster.errors import ClusterError
from localcluster.nodes import NodeSpec
from localcluster.processes import process_start_time
from localcluster.state_file import (
    ClusterState,
    RecordedProcess,
    read_state,
    remove_state,
    write_state,
)


def parse_node_specs(count: int, labels: list[str]) -> tuple[NodeSpec, ...]:
    """`--nodes 3 --label node-2:disk=ssd` -> node-1..node-3, node-2 labelled disk=ssd."""
    per_node: dict[str, dict[str, str]] = {}
    for item in labels:
        node, _, pair = item.partition(":")
        key, equals, value = pair.partition("=")
        if not node or not key or not equals:
            raise SystemExit(f"localcluster: --label wants NODE:KEY=VALUE, got {item!r}")
        per_node.setdefault(node, {})[key] = value
    return tuple(NodeSpec(f"node-{i}", per_node.get(f"node-{i}", {})) for i in range(1, count + 1))


def _options(arguments: argparse.Namespace) -> ClusterOptions:
    return ClusterOptions(
        nodes=parse_node_specs(arguments.nodes, arguments.label),
        apiserver_port=arguments.apiserver_port,
        real_nodes=arguments.real_nodes,
        snapshots=arguments.snapshots,
    )


def _print_state(state: ClusterState) -> None:
    print(f"cluster {state.name!r}: {len(state.nodes)} nodes ({', '.join(state.nodes)})")
    print(f"  server:     {state.server}")
    print(f"  kubeconfig: {state.kubeconfig}    (export KUBECONFIG={state.kubeconfig})")
    print(f"  directory:  {state.cluster_dir}")


def command_run(arguments: argparse.Namespace) -> int:
    """Runs a cluster in the foreground until SIGINT or SIGTERM."""
    finished = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        finished.set()

    with LocalCluster.start(_options(arguments)) as cluster:
        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        components = [
            RecordedProcess(process.name, process.pid, process.start_time)
            for process in [
                *cluster.control_plane.processes,
                *(cluster.real.processes() if cluster.real is not None else []),
                *([cluster.snapshots.process] if cluster.snapshots is not None else []),
            ]
            if process.pid is not None
        ]
        state = ClusterState(
            name=arguments.name,
            supervisor=RecordedProcess("supervisor", os.getpid(), process_start_time(os.getpid())),
            cluster_dir=str(cluster.dir),
            kubeconfig=str(cluster.kubeconfig),
            server=cluster.server,
            nodes=list(cluster.nodes),
            startup_seconds=cluster.startup_seconds,
            components=components,
            ready=True,
        )
        write_state(state)
        _print_state(state)
        print("Ctrl-C (or `python -m localcluster stop`) stops it.", flush=True)
        try:
            while not finished.wait(timeout=1.0):
                pass
        finally:
            print("localcluster: stopping", flush=True)
            remove_state(arguments.name)
    return 0


def command_start(arguments: argparse.Namespace) -> int:
    passed = ["--nodes", str(arguments.nodes)]
    for label in arguments.label:
        passed += ["--label", label]
    if arguments.apiserver_port:
        passed += ["--apiserver-port", str(arguments.apiserver_port)]
    if arguments.real_nodes:
        passed += ["--real-nodes", str(arguments.real_nodes)]
    if arguments.snapshots:
        passed.append("--snapshots")
    state = background.launch(arguments.name, passed)
    print(f"localcluster: cluster ready in {state.startup_seconds:.1f}s")
    _print_state(state)
    return 0


def command_stop(arguments: argparse.Namespace) -> int:
    if background.stop(arguments.name):
        print(f"localcluster: cluster {arguments.name!r} stopped")
    else:
        print(f"localcluster: no cluster {arguments.name!r} is recorded")
    return 0


def command_status(arguments: argparse.Namespace) -> int:
    state = read_state(arguments.name)
    if state is None or not background.is_alive(state.supervisor):
        print(f"localcluster: cluster {arguments.name!r} is not running")
        return 1
    _print_state(state)
    for component in state.components:
        alive = "running" if background.is_alive(component) else "NOT RUNNING"
        print(f"  {component.name:<24} pid {component.pid:<8} {alive}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, function, helptext in (
        ("start", command_start, "start a cluster in the background"),
        ("run", command_run, "run a cluster in the foreground until Ctrl-C"),
        ("stop", command_stop, "stop a background cluster"),
        ("status", command_status, "show a background cluster"),
    ):
        sub = commands.add_parser(name, help=helptext)
        sub.set_defaults(function=function)
        sub.add_argument("--name", default="default", help="which cluster (default: default)")
        if name in ("start", "run"):
            sub.add_argument("--nodes", type=int, default=3, help="number of fake nodes")
            sub.add_argument("--label", action="append", default=[], metavar="NODE:KEY=VALUE")
            sub.add_argument("--apiserver-port", type=int, default=None)
            sub.add_argument(
                "--real-nodes",
                type=int,
                default=0,
                help="number of real nodes (kubelet + containerd) beside the fake ones",
            )
            sub.add_argument(
                "--snapshots",
                action="store_true",
                help="serve the snapshot API: its CRDs, ReferenceGrant's, the snapshot controller",
            )
    return parser


def main(argv: list[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    try:
        code: int = arguments.function(arguments)
    except ClusterError as error:
        print(str(error), file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
