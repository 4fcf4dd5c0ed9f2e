"""What one real node is: its addresses, its directories and its configuration files, as pure
functions of its index and the cluster directory.

Why: these files are the whole "installation" of a real node (containerd, kubelet, CNI, the
registry mirrors); keeping them side-effect free makes them easy to review against
../shared/guide/real-node.md and to test without starting anything. Each setting the guide
found this machine to need carries its reason beside it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from localcluster.component_args import SERVICE_CLUSTER_IP_RANGE

REAL_NODE_PREFIX = "real-"
REAL_NODE_LABEL = "localcluster.local-path-storage.io/real-node"
"""Set by each real kubelet on its Node, so the harness's emulated runners leave its pods to it."""
BRIDGE_PREFIX = "lps-real-"
KUBELET_PORT = 10250
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
"""The sandbox image containerd pins: built from Debian packages and pushed to the local
registry under this name (scripts/build-node-images.sh)."""
BUSYBOX_IMAGE = "docker.io/library/busybox:1.37.0"
"""The default helperImage, likewise built and pushed."""
COREUTILS_IMAGE_PATH = "local-path-storage/helper-coreutils:1.37.0"
"""Busybox with GNU cp, likewise built, pushed under the local registry's own address: a helper
image that can clone volumes (busybox's cp cannot, see provisioner/helper_pods/clone_step.py)."""
MIRRORED_REGISTRIES = ("docker.io", "registry.k8s.io")
"""Registries whose names pods use and whose content the local registry serves instead:
nothing is ever pulled from outside this machine."""
VOLUME_STATS_PERIOD = "5s"
"""The real kubelets' volumeStatsAggPeriod (see kubelet_config)."""
DISK_ROOTS = ("opt", "mnt", "srv", "var/log")
KUBELET_ROOT = Path("/var/lib/kubelet")
"""The kubelet's root directory inside every real node's mount namespace (its own directory,
`RealNodePlan.kubelet_root`, bound there), as on real machines: one DaemonSet's hostPath of it
(the CSI node plugin's) serves every node, the kubelet's device-plugin socket (always under
/var/lib/kubelet) is each node's own, and a plugin's socket paths stay short."""
"""The host directories each real node sees as its own disk (see RealNodePlan.disk_mounts)."""
BTRFS_MOUNT = Path("/mnt/btrfs")
"""Where every real node has a second disk, btrfs (inside its mount namespace), beside the plain
directories above: base paths there get subvolumes, quota groups and instant snapshots."""
BTRFS_IMAGE_BYTES = 4 << 30
"""The btrfs disk's size: a sparse file, so only what volumes write takes room on the host."""


@dataclass(frozen=True)
class RealNodePlan:
    """One real node: named `real-<index>`, on its own bridge `lps-real-<index>` with the
    address 10.88.<index>.1/24, its pods in the rest of that /24."""

    index: int
    cluster_dir: Path
    cgroup_root: str
    """The kubelet's cgroupRoot: one per node (and cluster), so two kubelets never share
    `kubepods`."""
    healthz_port: int

    @property
    def name(self) -> str:
        return f"{REAL_NODE_PREFIX}{self.index}"

    @property
    def bridge(self) -> str:
        return f"{BRIDGE_PREFIX}{self.index}"

    @property
    def bridge_mac(self) -> str:
        """The bridge's own MAC address, fixed (locally administered). A bridge given none
        takes the lowest of its ports' and changes it as pods come and go; a pod that cached
        the old one for its gateway (the node's address) then sends into nowhere until its ARP
        entry expires: a long-lived pod, the provisioner, lost the API server for tens of
        seconds, and with it its lease, as helper pods churned beside it."""
        return f"02:6c:70:73:00:{self.index:02x}"

    @property
    def node_ip(self) -> str:
        return f"10.88.{self.index}.1"

    @property
    def subnet(self) -> str:
        return f"10.88.{self.index}.0/24"

    @property
    def state(self) -> Path:
        """The node's own files (not its disk): containerd, kubelet, CNI, configuration."""
        return self.cluster_dir / "real-nodes" / self.name

    @property
    def disk(self) -> Path:
        """The node's disk: `cluster.node_dir(name)`, as for kwok nodes."""
        return self.cluster_dir / "nodes" / self.name

    @property
    def btrfs_image(self) -> Path:
        """The sparse file behind the node's btrfs disk (loop-mounted at BTRFS_MOUNT)."""
        return self.state / "btrfs.img"

    @property
    def containerd_socket(self) -> Path:
        return self.state / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.state / "containerd.toml"

    @property
    def registry_hosts(self) -> Path:
        return self.state / "certs.d"

    @property
    def cni_config_dir(self) -> Path:
        return self.state / "net.d"

    @property
    def kubelet_config(self) -> Path:
        return self.state / "kubelet.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.state / "kubelet.kubeconfig"

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's root directory as the host sees it (the node's own); inside the
        node's mount namespace it is KUBELET_ROOT (see `disk_mounts`)."""
        return self.state / "kubelet"

    @property
    def resolv_conf(self) -> Path:
        return self.state / "resolv.conf"

    @property
    def shim_bin(self) -> Path:
        """A directory with `containerd-shim-runc-v2` (containerd finds its shim on PATH; the
        cached binary's name carries its version)."""
        return self.state / "bin"

    def container_log(self, namespace: str, pod: str, uid: str, container: str) -> Path:
        """A container's first run's log, as the kubelet writes it (CRI log format)."""
        return self.state / "pod-logs" / f"{namespace}_{pod}_{uid}" / container / "0.log"

    def disk_mounts(self) -> list[tuple[Path, Path]]:
        """(source, target) bind mounts made in the node's private mount namespace.

        Why a mount namespace per node: on two real machines the same hostPath names two
        disks, and the product's configuration is the same on every node. So each node's
        kubelet and containerd (and so its containers' hostPath mounts) run in a mount
        namespace where /opt, /mnt, /srv and /var/log are that node's own directories under
        `disk`: `/opt/x` on real-1 is `nodes/real-1/opt/x`, exactly where a kwok node's
        emulated helper pod would put it. /run is a fresh tmpfs there (containerd's shim
        sockets, the pods' /run/netns links), so nothing of the node lands in the host's /run.
        """
        disks = [(self.disk / root, Path("/") / root) for root in DISK_ROOTS]
        return [*disks, (self.kubelet_root, KUBELET_ROOT)]


def containerd_config(plan: RealNodePlan, runc: Path, cni_plugins: Path) -> str:
    """containerd 2.x configuration (version 3) for one node."""
    cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
    cri_images = "plugins.'io.containerd.cri.v1.images'"
    return f"""\
version = 3
root = "{plan.state / "containerd-root"}"
state = "{plan.state / "containerd-state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", \
"io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", \
"io.containerd.snapshotter.v1.erofs"]

[grpc]
  address = "{plan.containerd_socket}"

[plugins.'io.containerd.internal.v1.opt']
  path = "{plan.state / "containerd-opt"}"

[{cri_images}]
  snapshotter = "overlayfs"
  [{cri_images}.pinned_images]
    sandbox = "{PAUSE_IMAGE}"
  [{cri_images}.registry]
    # every registry a pod names is answered by the local registry (hosts.toml per name)
    config_path = "{plan.registry_hosts}"

[{cri_runtime}]
  # This machine's root has no CAP_SYS_RESOURCE: runc cannot give a sandbox the
  # oom_score_adj -998 the CRI asks for ("can't get final child's PID from pipe: EOF");
  # clamp to containerd's own instead.
  restrict_oom_score_adj = true
  [{cri_runtime}.containerd]
    default_runtime_name = "runc"
    [{cri_runtime}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri_runtime}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{runc}"
  [{cri_runtime}.cni]
    bin_dirs = ["{cni_plugins}"]
    conf_dir = "{plan.cni_config_dir}"
"""


def registry_hosts_toml(registry: str) -> str:
    """hosts.toml for one registry name: served by the local registry over plain HTTP, and
    `server` is the local registry too, so a miss never falls back to the internet."""
    return f"""\
server = "http://{registry}"

[host."http://{registry}"]
  capabilities = ["pull", "resolve"]
"""


def registry_hosts_files(plan: RealNodePlan, registry: str) -> dict[Path, str]:
    """The hosts.toml of each mirrored registry name and of the local registry's own address."""
    names = (*MIRRORED_REGISTRIES, registry)
    hosts = registry_hosts_toml(registry)
    return {plan.registry_hosts / name / "hosts.toml": hosts for name in names}


def cni_config(plan: RealNodePlan) -> str:
    """bridge + host-local on the node's own bridge.

    The harness makes the bridge and gives it the node's address itself, so the plugin is not
    the gateway (`isGateway: false` keeps it from turning on the host's IP forwarding) and
    masquerades nothing: pods have no default route, only one to the Service range via the
    node's address, where the `kubernetes` Service address answers (service_relay.py). Nothing
    a pod sends leaves the machine.
    """
    document: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": f"lps-{plan.name}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": plan.bridge,
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": False,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(plan.state / "cni-ipam"),
                    "ranges": [
                        [
                            {
                                "subnet": plan.subnet,
                                "rangeStart": f"10.88.{plan.index}.2",
                                "rangeEnd": f"10.88.{plan.index}.254",
                                "gateway": plan.node_ip,
                            }
                        ]
                    ],
                    "routes": [{"dst": SERVICE_CLUSTER_IP_RANGE, "gw": plan.node_ip}],
                },
            }
        ],
    }
    return json.dumps(document, indent=2) + "\n"


def kubelet_config(plan: RealNodePlan, ca_cert: Path, serving: tuple[Path, Path]) -> str:
    """KubeletConfiguration with the settings ../shared/guide/real-node.md found necessary."""
    document: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": plan.node_ip,
        "port": KUBELET_PORT,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": plan.healthz_port,
        "readOnlyPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca_cert)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "tlsCertFile": str(serving[0]),
        "tlsPrivateKeyFile": str(serving[1]),
        "containerRuntimeEndpoint": f"unix://{plan.containerd_socket}",
        "imageServiceEndpoint": f"unix://{plan.containerd_socket}",
        # No systemd here, and the machine has cgroup v1 controllers: 1.35+ refuses v1 unless
        # told otherwise.
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "cgroupRoot": plan.cgroup_root,
        "failSwapOn": False,
        # An empty file: pods get no DNS server, so nothing of theirs leaves the machine.
        "resolvConf": str(plan.resolv_conf),
        # `podLogsDir` (not `podLogsDirectory`: an unknown field is only logged).
        "podLogsDir": str(plan.state / "pod-logs"),
        # No KUBE-FIREWALL / KUBE-MARK-* chains in the host's iptables.
        "makeIPTablesUtilChains": False,
        "serializeImagePulls": False,
        # The machine's disk is shared with everything else: never evict for it.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 99,
        "imageGCLowThresholdPercent": 98,
        # How often the kubelet measures its pods' volumes (CSI: NodeGetVolumeStats) for the
        # kubelet_volume_stats_* series: 1 minute by default, so a test of those series would
        # wait up to two (the period is jittered up to twice itself). A few seconds here cost
        # little: a handful of pods, most volumes small.
        "volumeStatsAggPeriod": VOLUME_STATS_PERIOD,
        # A CSI driver's VolumeCondition reaches the kubelet's
        # kubelet_volume_stats_health_status_abnormal series and the pod's
        # VolumeConditionAbnormal events only with this gate (alpha, off by default in v1.36).
        "featureGates": {"CSIVolumeHealth": True},
    }
    return yaml.safe_dump(document, sort_keys=False)


def kubelet_args(
    kubelet: Path, plan: RealNodePlan, extra_labels: dict[str, str] | None = None
) -> list[str]:
    labels = {REAL_NODE_LABEL: "true", **(extra_labels or {})}
    return [
        str(kubelet),
        f"--config={plan.kubelet_config}",
        f"--kubeconfig={plan.kubelet_kubeconfig}",
        f"--hostname-override={plan.name}",
        # The node's address lives on its private bridge, never on eth0: the API server
        # reaches the kubelet there (logs, exec).
        f"--node-ip={plan.node_ip}",
        f"--root-dir={KUBELET_ROOT}",
        f"--cert-dir={KUBELET_ROOT / 'pki'}",
        "--node-labels=" + ",".join(f"{key}={value}" for key, value in labels.items()),
        "--v=2",
    ]
