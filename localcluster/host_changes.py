"""Every change real nodes make to the host outside the cluster directory, and its undo.

Why: stopping a cluster must leave the machine as it was. What a real node changes on the host
(../shared/guide/real-node.md lists what the kubelet does): the sysctls the kubelet sets at
start, the cgroups the kubelet makes (all under one cgroupRoot per node, made here), one bridge
per node with its address, and the `kubernetes` Service address. Mounts, network namespace
links and /run/containerd stay inside each node's private mount namespace (real_node.py) and
vanish with it; the kubelet is told to make no iptables chains. Each change is recorded when
made and undone in reverse order, whatever failed in between.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from localcluster.errors import ClusterError

CGROUP_MOUNT = Path("/sys/fs/cgroup")
KERNEL_TUNABLES = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
)
"""The kubelet's setupKernelTunables writes the first six at start (vm.overcommit_memory=1,
kernel.panic=10, kernel.panic_on_oops=1, ...); the CNI bridge plugin turns on ip_forward when
it is a gateway (it is not, here, but a restored value costs nothing)."""
CGROUP_REMOVE_SECONDS = 10.0


def _ip(*arguments: str) -> None:
    result = subprocess.run(["ip", *arguments], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ClusterError(
            f"localcluster: `ip {' '.join(arguments)}` failed: {result.stderr.strip()}"
        )


def address_holder(address: str) -> str | None:
    """The link that carries `address`, None when no link does."""
    result = subprocess.run(
        ["ip", "-o", "-4", "addr", "show", "to", f"{address}/32"],
        capture_output=True,
        text=True,
        check=True,
    )
    line = result.stdout.strip()
    return line.split()[1] if line else None


def link_exists(name: str) -> bool:
    return (Path("/sys/class/net") / name).exists()


def cgroup_hierarchies() -> list[Path]:
    """Every cgroup v1 hierarchy mounted under /sys/fs/cgroup (the kubelet's cgroupfs driver
    looks for its cgroupRoot in each)."""
    return sorted(
        path
        for path in CGROUP_MOUNT.iterdir()
        if path.is_dir() and not path.is_symlink() and (path / "cgroup.procs").exists()
    )


def cgroup_pids(cgroup_root: str) -> set[int]:
    """Every process in `cgroup_root` or below, in any hierarchy."""
    pids: set[int] = set()
    for hierarchy in cgroup_hierarchies():
        top = hierarchy / cgroup_root.lstrip("/")
        for procs in top.rglob("cgroup.procs") if top.is_dir() else ():
            with contextlib.suppress(OSError):
                pids.update(int(line) for line in procs.read_text().split())
    return pids


class HostChanges:
    """A ledger of host changes: each `make_*` applies one and records its undo."""

    def __init__(self) -> None:
        self._undo: list[tuple[str, Callable[[], None]]] = []
        self.problems: list[str] = []

    def save_kernel_tunables(self) -> None:
        """Records the tunables' values now; `undo_all` writes them back."""
        saved = {name: (Path("/proc/sys") / name).read_text().strip() for name in KERNEL_TUNABLES}

        def restore() -> None:
            for name, value in saved.items():
                path = Path("/proc/sys") / name
                if path.read_text().strip() != value:
                    path.write_text(value + "\n")

        self._undo.append(("restore sysctls", restore))

    def make_bridge(self, name: str, address_cidr: str) -> None:
        """A bridge with one address, up. Deleting it removes its address, routes, and the
        host ends of the pods' veth pairs still attached."""
        if link_exists(name):
            raise ClusterError(
                f"localcluster: the link {name} already exists: another local cluster with "
                "real nodes runs on this machine, or one was killed; stop it "
                f"(python -m localcluster stop) or remove the link (ip link del {name})"
            )
        _ip("link", "add", name, "type", "bridge")
        self._undo.append((f"delete bridge {name}", lambda: _ip("link", "del", name)))
        _ip("addr", "add", address_cidr, "dev", name)
        _ip("link", "set", name, "up")

    def add_address(self, address: str, link: str) -> None:
        """`address`/32 on `link` (removed with the link; removed here too in case the link
        outlives it)."""
        _ip("addr", "add", f"{address}/32", "dev", link)

        def remove() -> None:
            if link_exists(link):
                _ip("addr", "del", f"{address}/32", "dev", link)

        self._undo.append((f"remove {address} from {link}", remove))

    def make_cgroup_root(self, cgroup_root: str) -> None:
        """`cgroup_root` in every hierarchy (the kubelet requires its cgroupRoot to exist). A
        new cpuset cgroup starts with no CPUs and no memory nodes: copy the parent's."""
        made: list[Path] = []
        for hierarchy in cgroup_hierarchies():
            path = hierarchy / cgroup_root.lstrip("/")
            path.mkdir()
            made.append(path)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (path / name).exists():
                    (path / name).write_text((hierarchy / name).read_text())

        def remove() -> None:
            for top in made:
                _remove_cgroup_tree(top)

        self._undo.append((f"remove cgroups {cgroup_root}", remove))

    def undo_all(self) -> None:
        """Undoes every change, newest first; a failing undo is recorded in `problems` and
        the rest still run."""
        while self._undo:
            what, undo = self._undo.pop()
            try:
                undo()
            except (OSError, ClusterError) as error:
                self.problems.append(f"{what}: {error}")


def _remove_cgroup_tree(top: Path) -> None:
    """Removes a cgroup and its children, deepest first; a cgroup whose last process has only
    just exited refuses (EBUSY) for a moment, so retry for a while."""
    deadline = time.monotonic() + CGROUP_REMOVE_SECONDS
    while top.exists():
        directories = sorted(
            (path for path in top.rglob("*") if path.is_dir()),
            key=lambda path: len(path.parts),
            reverse=True,
        )
        try:
            for directory in [*directories, top]:
                directory.rmdir()
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
