"""The node plugin registers itself with a real kubelet (v1.36.3), no sidecar: started as a
process in real-1's mount namespace with that kubelet's root directory, it is found by the
kubelet's plugin watcher, and the kubelet writes the driver, the node ID and the topology key
into the node's CSINode object; stopped, it is taken out again. A registration the kubelet
refuses fails the plugin's /healthz."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

import pytest

from localcluster import LocalCluster
from localcluster.raw_api import call_json
from localcluster.real_node import RealNode, mount_namespace
from provisioner.configuration.config import DEFAULT_NODE_AFFINITY_KEY
from tests.provisioner.csi.plugin_process import REPOSITORY, free_port, healthz

pytestmark = [pytest.mark.realnode, pytest.mark.cluster]

NODE = "real-1"
# Short names (example.com/<name> gives the driver <name>.example.com): the cluster's kubelet
# root lies deep in a temporary directory, and a unix socket's path
# (<root>/plugins_registry/<driver>-reg.sock) holds at most 107 bytes.
DRIVER = "lps.example.com"
REFUSED_DRIVER = "refused.example.com"
TIMEOUT_SECONDS = 60.0
NODE_ID_ANNOTATION = "csi.volume.kubernetes.io/nodeid"


@dataclass
class NodePlugin:
    process: subprocess.Popen[bytes]
    log: Path
    health_port: int
    registration_socket: Path

    def healthz(self) -> tuple[int, str]:
        return healthz(self.health_port)


@contextmanager
def node_plugin(node: RealNode, directory: Path, driver: str, *flags: str) -> Iterator[NodePlugin]:
    """The plugin of `driver` run in the node's mount namespace (nsenter execs it: the PID is
    the plugin's), its CSI socket in `directory`, registering in the node's kubelet root."""
    config = directory / "config.json"
    paths = {"nodePathMap": [{"node": NODE, "paths": ["/opt/local-path-provisioner"]}]}
    config.write_text(json.dumps(paths), encoding="utf-8")
    log = directory / "plugin.log"
    port = free_port()
    holder = node.holder.pid
    assert holder is not None
    with log.open("ab") as output:
        process = subprocess.Popen(
            [
                "nsenter",
                f"--mount=/proc/{holder}/ns/mnt",
                # Else nsenter takes the holder's working directory, and `-m` finds the
                # installed package rather than this tree.
                f"--wd={REPOSITORY}",
                "--",
                sys.executable,
                "-m",
                "provisioner.csi",
                f"--endpoint=unix://{directory}/csi.sock",
                f"--node-name={NODE}",
                f"--config-file={config}",
                f"--provisioner-name=example.com/{driver.removesuffix('.example.com')}",
                f"--kubelet-root={node.plan.kubelet_root}",
                f"--health-port={port}",
                *flags,
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    socket = node.plan.kubelet_root / "plugins_registry" / f"{driver}-reg.sock"
    try:
        yield NodePlugin(process, log, port, socket)
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)


def wait_for(
    what: str, check: Callable[[], bool], plugin: NodePlugin, *, plugin_stopped: bool = False
) -> float:
    """Seconds until `check` holds; fails with the plugin's log after TIMEOUT_SECONDS, or as
    soon as the plugin exits unless it was stopped."""
    started = time.monotonic()
    while not check():
        elapsed = time.monotonic() - started
        running = plugin_stopped or plugin.process.poll() is None
        waiting = elapsed < TIMEOUT_SECONDS and running
        assert waiting, f"{what}: not within {elapsed:.1f} s (plugin exit code:" + (
            f" {plugin.process.returncode}):\n{plugin.log.read_text()}"
        )
        time.sleep(0.2)
    return time.monotonic() - started


def csi_node_drivers(cluster: LocalCluster) -> dict[str, tuple[str, list[str]]]:
    """The drivers the node's CSINode lists: name -> (node ID, topology keys). Read raw: the
    client's model refuses a CSINode whose `drivers` is null, as the kubelet writes it when
    none is registered."""
    csi_node = call_json(cluster.storage_v1().read_csi_node, NODE)
    return {
        driver["name"]: (driver["nodeID"], list(driver.get("topologyKeys") or []))
        for driver in csi_node["spec"].get("drivers") or []
    }


def test_the_kubelet_registers_the_plugin_in_the_csi_node_and_removes_it_when_it_stops(
    cluster: LocalCluster,
) -> None:
    assert cluster.real is not None
    node = cluster.real.node_by_name(NODE)
    with (
        tempfile.TemporaryDirectory(prefix="csi-") as scratch,
        node_plugin(node, Path(scratch), DRIVER) as plugin,
    ):
        registered = wait_for(
            "the CSINode lists the driver", lambda: DRIVER in csi_node_drivers(cluster), plugin
        )
        print(f"registered in the CSINode {registered:.1f} s after the plugin started")
        # Checked once it serves: nsenter enters the namespace just before it execs Python.
        assert mount_namespace(plugin.process.pid) == mount_namespace(node.holder.pid or 0)
        assert csi_node_drivers(cluster)[DRIVER] == (NODE, [DEFAULT_NODE_AFFINITY_KEY])
        metadata = cluster.core_v1().read_node(NODE).metadata
        assert metadata is not None
        assert json.loads((metadata.annotations or {})[NODE_ID_ANNOTATION])[DRIVER] == NODE
        wait_for(
            "the kubelet's registration status reached the plugin",
            lambda: "the kubelet registered" in plugin.log.read_text(),
            plugin,
        )
        assert plugin.healthz() == (200, "ok\n")

        plugin.process.terminate()
        assert plugin.process.wait(timeout=30) == 0, plugin.log.read_text()
        assert not plugin.registration_socket.exists()
        removed = wait_for(
            "the CSINode no longer lists the driver",
            lambda: DRIVER not in csi_node_drivers(cluster),
            plugin,
            plugin_stopped=True,
        )
        print(f"removed from the CSINode {removed:.1f} s after the plugin stopped")


def test_a_registration_the_kubelet_refuses_fails_the_liveness_probe(
    cluster: LocalCluster,
) -> None:
    """The kubelet refuses a driver whose topology contradicts the node's own label (the
    node's kubernetes.io/hostname is real-1): the plugin hears why, and /healthz fails, so a
    liveness probe would restart it."""
    assert cluster.real is not None
    node = cluster.real.node_by_name(NODE)
    with (
        tempfile.TemporaryDirectory(prefix="csi-") as scratch,
        node_plugin(
            node, Path(scratch), REFUSED_DRIVER, f"--topology-value={NODE}-elsewhere"
        ) as plugin,
    ):
        wait_for(
            "the kubelet's refusal reached the plugin",
            lambda: plugin.healthz()[0] == HTTPStatus.INTERNAL_SERVER_ERROR,
            plugin,
        )
        status, reason = plugin.healthz()
        assert status == HTTPStatus.INTERNAL_SERVER_ERROR
        assert reason.startswith("the kubelet refused the registration:"), reason
        assert f"{NODE}-elsewhere" in reason
        print(f"/healthz {status}: {reason.strip()}")
        assert "the kubelet refused to register" in plugin.log.read_text()
        assert REFUSED_DRIVER not in csi_node_drivers(cluster)
