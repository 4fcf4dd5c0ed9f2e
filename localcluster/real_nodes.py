"""The real nodes of a cluster, together: the host changes they need, the local registry with
every image they run, the `kubernetes` Service address, and the nodes themselves.

Why one place: the parts share a lifetime and an order. Start: the host's sysctls are saved
(the kubelet changes some), a bridge per node, the Service address on the first, the registry
with its images pushed, then each node. Stop: the nodes, the registry, the relay, then every
host change undone (host_changes.py). Only one cluster with real nodes can run on a machine at
a time (they use the fixed `kubernetes` Service address 10.96.0.1:443 and fixed bridge names);
a second one fails at once with one line naming what is taken.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from localcluster.binaries import REPOSITORY_ROOT, cache_root
from localcluster.certificates import SERVICE_CLUSTER_IP, KeyPair
from localcluster.errors import ClusterError
from localcluster.host_changes import HostChanges, address_holder, undo_abandoned
from localcluster.local_registry import LocalRegistry
from localcluster.node_binaries import NodeBinaries
from localcluster.ports import pick_free_ports
from localcluster.processes import ManagedProcess
from localcluster.real_node import RealNode
from localcluster.real_node_config import (
    BUSYBOX_IMAGE,
    COREUTILS_IMAGE_PATH,
    KUBELET_ROOT,
    PAUSE_IMAGE,
    RealNodePlan,
)
from localcluster.service_relay import ServiceRelay
from scripts import build_image

NODE_IMAGES_SCRIPT = REPOSITORY_ROOT / "scripts" / "build-node-images.sh"


def host_changes_record() -> Path:
    """Where the running cluster with real nodes records its host changes: one place per
    machine (and cache), since only one such cluster runs at a time."""
    return cache_root() / "localcluster" / "real-nodes-host-changes.json"


@dataclass(frozen=True)
class PushedImage:
    """An image in the local registry: how pods name it by tag and by digest."""

    by_tag: str
    digest: str

    @property
    def by_digest(self) -> str:
        return f"{self.by_tag.rpartition(':')[0]}@{self.digest}"


def _without_registry(reference: str) -> str:
    """`docker.io/library/busybox:1.37.0` -> `library/busybox:1.37.0` (the path a mirror asks
    the local registry for)."""
    return reference.split("/", 1)[1]


def build_node_images() -> Path:
    """The cached pause and busybox OCI layouts (built on first use, from Debian packages)."""
    result = subprocess.run([str(NODE_IMAGES_SCRIPT)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ClusterError(f"localcluster: {NODE_IMAGES_SCRIPT.name} failed: {last}")
    return Path(result.stdout.strip().splitlines()[-1])


class RealNodes:
    """`count` real nodes real-1..real-<count>, and what they need around them."""

    def __init__(self, count: int, binaries: NodeBinaries, cluster_dir: Path, logs: Path) -> None:
        self.binaries = binaries
        self.logs = logs
        self.host = HostChanges(host_changes_record())
        # One cgroupRoot per node and cluster, so a killed cluster's leftovers never collide.
        tag = uuid.uuid4().hex[:8]
        # The registry's port, then each kubelet's healthz port (all on loopback).
        ports = pick_free_ports(count + 1)
        self.plans = [
            RealNodePlan(index, cluster_dir, f"/lps-{tag}-real-{index}", ports[index])
            for index in range(1, count + 1)
        ]
        self.nodes = [RealNode(plan, binaries, logs) for plan in self.plans]
        self.registry = LocalRegistry(
            binaries.registry, binaries.skopeo, cluster_dir / "registry", ports[0], logs
        )
        self.relay: ServiceRelay | None = None
        self.provisioner: PushedImage | None = None
        self.busybox: PushedImage | None = None
        self.coreutils: PushedImage | None = None

    @property
    def names(self) -> list[str]:
        return [plan.name for plan in self.plans]

    @staticmethod
    def claim_host() -> None:
        """Before anything is made: undoes what a killed cluster's real nodes left, and fails
        with one line when another cluster with real nodes runs (or anything else holds the
        Service address)."""
        undo_abandoned(host_changes_record())
        holder = address_holder(SERVICE_CLUSTER_IP)
        if holder is not None:
            raise ClusterError(
                f"localcluster: {SERVICE_CLUSTER_IP} (the `kubernetes` Service address the real "
                f"nodes' pods reach the API server at) is already on {holder}: only one cluster "
                "with real nodes runs on a machine at a time; stop the other "
                "(python -m localcluster stop) or start this one without real nodes"
            )

    def prepare_host(self, apiserver_port: int) -> None:
        """Saves the sysctls, makes the bridges and the Service address, starts the relay."""
        self.claim_host()
        self.host.save_kernel_tunables()
        # /var/lib exists on any Debian host; /var/lib/kubelet only where a kubelet ran.
        self.host.make_mount_point(KUBELET_ROOT)
        for plan in self.plans:
            self.host.make_bridge(plan.bridge, f"{plan.node_ip}/24", plan.bridge_mac)
            self.host.make_cgroup_root(plan.cgroup_root)
        self.host.add_address(SERVICE_CLUSTER_IP, self.plans[0].bridge)
        self.relay = ServiceRelay(SERVICE_CLUSTER_IP, apiserver_port)
        self.relay.start()

    def start_registry(self, provisioner_image: Path) -> None:
        """The registry, with the pause, busybox (and its GNU cp variant) and provisioner images
        pushed to it."""
        self.registry.start()
        layouts = build_node_images()
        self.registry.push(f"oci:{layouts / 'pause'}:latest", _without_registry(PAUSE_IMAGE))
        self.registry.push(f"oci:{layouts / 'busybox'}:latest", _without_registry(BUSYBOX_IMAGE))
        busybox_digest = _layout_digest(layouts / "busybox")
        self.busybox = PushedImage(BUSYBOX_IMAGE, busybox_digest)
        self.registry.push(f"oci:{layouts / 'coreutils'}:latest", COREUTILS_IMAGE_PATH)
        self.coreutils = PushedImage(
            f"{self.registry.address}/{COREUTILS_IMAGE_PATH}",
            _layout_digest(layouts / "coreutils"),
        )
        self.provisioner = self.push_provisioner(provisioner_image)

    def push_provisioner(self, image_directory: Path, tag: str | None = None) -> PushedImage:
        """A built provisioner image (scripts/build_image.py's cache directory) pushed to the
        registry under `tag` (default: its own), as docs/install.md tells users: skopeo copy
        "oci-archive:$archive" docker://REGISTRY/... Another build (an earlier version) gets a
        tag of its own, so both can be pulled side by side."""
        built = build_image.BuiltImage.load(image_directory)
        repository_and_tag = f"{build_image.REPOSITORY}:{tag or built.tag}"
        self.registry.push(f"oci-archive:{built.archive}", repository_and_tag)
        return PushedImage(f"{self.registry.address}/{repository_and_tag}", built.digest)

    def start_nodes(self, server: str, ca: KeyPair, deadline: float) -> None:
        for node in self.nodes:
            node.write_configuration(server, ca, self.registry.address)
            self.host.note_containerd(node.plan.containerd_socket)
            self.host.note_loop_image(node.plan.btrfs_image)
            node.start(deadline)

    def check_alive(self) -> None:
        for node in self.nodes:
            node.check_alive()

    def processes(self) -> list[ManagedProcess]:
        """Every long-running process started: each node's, and the registry."""
        return [p for node in self.nodes for p in node.processes] + [self.registry.process]

    def pids(self) -> list[int]:
        return [process.pid for process in self.processes() if process.pid is not None]

    def node_by_name(self, name: str) -> RealNode:
        return next(node for node in self.nodes if node.plan.name == name)

    def kubelet_of(self, name: str) -> ManagedProcess | None:
        """The kubelet of real node `name`; None for any other node."""
        node = next((node for node in self.nodes if node.plan.name == name), None)
        return node.kubelet if node is not None else None

    def stop(self) -> list[str]:
        """Stops everything and undoes every host change; returns the undos that failed."""
        for node in self.nodes:
            node.stop()
        self.registry.stop()
        if self.relay is not None:
            self.relay.stop()
        self.host.undo_all()
        return list(self.host.problems)


def _layout_digest(layout: Path) -> str:
    """The manifest digest of the only image in an OCI layout (what the registry serves)."""
    index = json.loads((layout / "index.json").read_text(encoding="utf-8"))
    return str(index["manifests"][0]["digest"])
