"""Where the programs a real node runs live: Go-built ones in the cache, Debian's on the host.

Why: a real node is a kubelet, containerd and its runc shim (built from Go modules by
`scripts/build-go-tools.sh node`, pinned in versions.env) plus runc, the CNI plugins, the
registry and skopeo from Debian packages (`scripts/install-node-packages.sh`). A missing one
must stop the start with one line saying which and what to run, never a kubelet log deep down.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from localcluster.binaries import cache_root, read_versions
from localcluster.errors import ClusterError

RUNC = Path("/usr/sbin/runc")
CNI_PLUGIN_DIR = Path("/usr/lib/cni")
DOCKER_REGISTRY = Path("/usr/bin/docker-registry")
SKOPEO = Path("/usr/bin/skopeo")
BUILD_HINT = "run `make test-real-node` (or scripts/build-go-tools.sh node)"
PACKAGES_HINT = "run scripts/install-node-packages.sh"


@dataclass(frozen=True)
class NodeBinaries:
    """Absolute paths of what a real node and the local registry run."""

    kubelet: Path
    containerd: Path
    containerd_shim: Path
    runc: Path
    cni_plugins: Path
    registry: Path
    skopeo: Path


def locate_node_binaries(bin_dir: Path | None = None) -> NodeBinaries:
    """The pinned node binaries, or ClusterError naming the first group that is missing."""
    directory = bin_dir or cache_root() / "bin"
    versions = read_versions()
    kubernetes = versions.get("KUBERNETES_VERSION", "")
    containerd = versions.get("CONTAINERD_VERSION", "")
    binaries = NodeBinaries(
        kubelet=directory / f"kubelet-{kubernetes}",
        containerd=directory / f"containerd-{containerd}",
        containerd_shim=directory / f"containerd-shim-runc-v2-{containerd}",
        runc=RUNC,
        cni_plugins=CNI_PLUGIN_DIR,
        registry=DOCKER_REGISTRY,
        skopeo=SKOPEO,
    )
    built = [binaries.kubelet, binaries.containerd, binaries.containerd_shim]
    missing = [path for path in built if not os.access(path, os.X_OK)]
    if missing:
        names = ", ".join(path.name for path in missing)
        raise ClusterError(f"localcluster: missing {names} in {directory}; {BUILD_HINT}")
    packaged = [
        binaries.runc,
        binaries.cni_plugins / "bridge",
        binaries.cni_plugins / "host-local",
        binaries.registry,
        binaries.skopeo,
    ]
    absent = [str(path) for path in packaged if not os.access(path, os.X_OK)]
    if absent:
        raise ClusterError(f"localcluster: missing {', '.join(absent)}; {PACKAGES_HINT}")
    return binaries
