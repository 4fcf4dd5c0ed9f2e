"""The CSI node plugin on real nodes: one `python -m provisioner.csi --manage-volumes` process
per real node, run in that node's mount namespace, as the stack's DaemonSet runs one privileged
pod per node.

Why the node's mount namespace: each real node's kubelet, containerd and disk (/opt, /mnt, ...)
live in a mount namespace of its own (localcluster/real_node.py). The plugin must see the node's
base paths where config.json names them, and its bind mounts into the kubelet's pod directories
(NodePublishVolume) must be seen by that kubelet and its containers: in the same namespace, they
are, whatever the kubelet root's propagation.

Why `nsenter` with exec and no fork: the PID the launcher holds is the plugin's own, so a plugin
is stopped by that PID and nothing else. The kubelet finds the plugin by its registration socket,
`<kubelet root>/plugins_registry/<driver>-reg.sock`, whose path a unix socket caps at 107 bytes:
`node_plugin_plans` refuses a plan whose sockets would not fit, naming the path, instead of a
plugin failing to bind later.

`node_plugin_command` is pure (tested); `NodePlugins` starts, waits for and stops the processes.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from localcluster.ports import pick_free_ports
from localcluster.real_node import RealNode
from provisioner.csi.driver_name import driver_name_for
from provisioner.csi.options import MAX_SOCKET_PATH_BYTES, REGISTRY_DIRECTORY

REPOSITORY = Path(__file__).resolve().parents[1]
REGISTERED_LINE = "the kubelet registered"
"""What the plugin logs once the kubelet's registration status reached it."""
STOP_GRACE_SECONDS = 30.0


class NodePluginError(Exception):
    """A plugin that cannot be started as planned, or ended or never registered."""


@dataclass(frozen=True)
class NodePluginPlan:
    """One node's plugin: where it serves, registers, logs, and what it reads."""

    node: str
    namespace_pid: int
    """A process in the node's mount namespace (its holder): nsenter enters that namespace."""
    kubelet_root: Path
    provisioner_name: str
    config_file: Path
    """config.json beside the setup and teardown scripts (the provisioner's ConfigMap's files)."""
    kubeconfig: Path
    health_port: int
    log: Path

    @property
    def driver(self) -> str:
        return driver_name_for(self.provisioner_name)

    @property
    def endpoint_socket(self) -> Path:
        """The CSI socket, where the stack's DaemonSet puts it: <root>/plugins/<driver>/."""
        return self.kubelet_root / "plugins" / self.driver / "csi.sock"

    @property
    def registration_socket(self) -> Path:
        return self.kubelet_root / REGISTRY_DIRECTORY / f"{self.driver}-reg.sock"


def too_long_sockets(plan: NodePluginPlan) -> list[Path]:
    """The plan's sockets whose paths a unix socket cannot hold."""
    sockets = (plan.endpoint_socket, plan.registration_socket)
    return [path for path in sockets if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES]


def node_plugin_command(
    plan: NodePluginPlan, python: str = sys.executable, working_dir: Path = REPOSITORY
) -> list[str]:
    """The plugin's command line: nsenter into the node's mount namespace, then the plugin,
    managing this node's volumes with `plan.kubeconfig`'s credentials."""
    return [
        "nsenter",
        f"--mount=/proc/{plan.namespace_pid}/ns/mnt",
        # Else nsenter takes the holder's working directory, and `-m` would find an installed
        # package rather than this tree.
        f"--wd={working_dir}",
        "--",
        python,
        "-m",
        "provisioner.csi",
        f"--endpoint=unix://{plan.endpoint_socket}",
        f"--node-name={plan.node}",
        f"--config-file={plan.config_file}",
        f"--provisioner-name={plan.provisioner_name}",
        f"--kubelet-root={plan.kubelet_root}",
        f"--health-port={plan.health_port}",
        "--manage-volumes",
        f"--kubeconfig={plan.kubeconfig}",
    ]


def node_plugin_plans(
    nodes: Sequence[RealNode],
    *,
    provisioner_name: str,
    config_file: Path,
    kubeconfig: Path,
    log_dir: Path,
) -> list[NodePluginPlan]:
    """A plan per running node; NodePluginError when a node's sockets would not fit."""
    ports = pick_free_ports(len(nodes))
    plans = []
    for node, port in zip(nodes, ports, strict=True):
        pid = node.holder.pid
        if pid is None:
            raise NodePluginError(f"{node.plan.name} is not running: no mount namespace")
        plan = NodePluginPlan(
            node=node.plan.name,
            namespace_pid=pid,
            kubelet_root=node.plan.kubelet_root,
            provisioner_name=provisioner_name,
            config_file=config_file,
            kubeconfig=kubeconfig,
            health_port=port,
            log=log_dir / f"csi-node-{node.plan.name}.log",
        )
        if too_long := too_long_sockets(plan):
            raise NodePluginError(
                f"{', '.join(map(str, too_long))}: longer than a unix socket's path may be"
                f" ({MAX_SOCKET_PATH_BYTES} bytes): choose a shorter provisioner name or"
                " cluster directory"
            )
        plans.append(plan)
    return plans


class NodePlugins:
    """The running plugins of `plans`; `wait_registered` until each kubelet took its plugin."""

    def __init__(self, plans: Sequence[NodePluginPlan]) -> None:
        self.plans = list(plans)
        self.processes: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []
        env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
        env["PYTHONUNBUFFERED"] = "1"
        try:
            for plan in self.plans:
                plan.log.parent.mkdir(parents=True, exist_ok=True)
                log = plan.log.open("ab")
                self._logs.append(log)
                self.processes.append(
                    subprocess.Popen(
                        node_plugin_command(plan), env=env, stdout=log, stderr=subprocess.STDOUT
                    )
                )
        except BaseException:
            self.stop()
            raise

    def pids(self) -> list[int]:
        return [process.pid for process in self.processes if process.poll() is None]

    def wait_registered(self, timeout: float = 60.0) -> float:
        """Seconds until every plugin heard the kubelet register it (its log says so);
        NodePluginError, with the log, when one ends or `timeout` passes first."""
        started = time.monotonic()
        waiting = dict(zip(self.plans, self.processes, strict=True))
        while waiting:
            for plan, process in list(waiting.items()):
                if REGISTERED_LINE in plan.log.read_text(errors="replace"):
                    del waiting[plan]
                elif process.poll() is not None or time.monotonic() - started > timeout:
                    state = (
                        f"exited with {process.returncode}"
                        if process.returncode is not None
                        else f"not registered within {timeout:.0f} s"
                    )
                    raise NodePluginError(
                        f"the node plugin of {plan.node} {state}; log {plan.log}:\n"
                        + plan.log.read_text(errors="replace")[-2000:]
                    )
            time.sleep(0.1)
        return time.monotonic() - started

    def stop(self) -> None:
        """SIGTERM each plugin by its PID (it unregisters and ends), SIGKILL past the grace."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        for log in self._logs:
            with contextlib.suppress(OSError):
                log.close()

    def __enter__(self) -> NodePlugins:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
