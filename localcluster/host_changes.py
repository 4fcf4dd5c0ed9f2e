"""Every change real nodes make to the host outside the cluster directory, and its undo.

Why: stopping a cluster must leave the machine as it was. What a real node changes on the host
(../shared/guide/real-node.md lists what the kubelet does): the sysctls the kubelet sets at
start, the cgroups the kubelet makes (all under one cgroupRoot per node, made here), one bridge
per node with its address, and the `kubernetes` Service address. Mounts, network namespace
links and /run/containerd stay inside each node's private mount namespace (real_node.py) and
vanish with it; the kubelet is told to make no iptables chains. Each change is recorded (on
disk too, with the harness's PID) before it is made, and undone whatever failed in between; a
harness killed with SIGKILL leaves the record behind, and the next start with real nodes undoes
it (only one cluster with real nodes runs on a machine at a time, so the record has one place).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from localcluster.errors import ClusterError
from localcluster.processes import is_same_process_alive, process_start_time

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
LOOP_DETACH_SECONDS = 10.0


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
    """A ledger of host changes: each `make_*` applies one and records it, in memory and in
    `record_path`, so that `undo_all` (or, when the harness was killed, the next start:
    `undo_abandoned`) can undo them all."""

    def __init__(self, record_path: Path) -> None:
        self.record_path = record_path
        self.record: dict[str, Any] = {
            "owner": {"pid": os.getpid(), "start_time": process_start_time(os.getpid())},
            "sysctls": {},
            "bridges": [],
            "cgroup_roots": [],
            "containerd_sockets": [],
            "mount_points": [],
            "loop_images": [],
        }
        self.problems: list[str] = []

    def _save(self) -> None:
        self.record_path.parent.mkdir(parents=True, exist_ok=True)
        self.record_path.write_text(json.dumps(self.record), encoding="utf-8")

    def save_kernel_tunables(self) -> None:
        """Records the tunables' values now; the undo writes them back."""
        self.record["sysctls"] = {
            name: (Path("/proc/sys") / name).read_text().strip() for name in KERNEL_TUNABLES
        }
        self._save()

    def make_bridge(self, name: str, address_cidr: str, mac: str) -> None:
        """A bridge with one address, up. Deleting it removes its addresses, routes, and the
        host ends of the pods' veth pairs still attached."""
        if link_exists(name):
            raise ClusterError(
                f"localcluster: the link {name} already exists: another local cluster with "
                "real nodes runs on this machine; stop it (python -m localcluster stop) "
                f"or remove the link (ip link del {name})"
            )
        # A MAC given here sticks (a bridge's own follows its ports': see RealNodePlan.bridge_mac).
        _ip("link", "add", name, "address", mac, "type", "bridge")
        self.record["bridges"].append(name)
        self._save()
        _ip("addr", "add", address_cidr, "dev", name)
        _ip("link", "set", name, "up")

    def add_address(self, address: str, link: str) -> None:
        """`address`/32 on `link`, one of the bridges made here (it goes with the link)."""
        _ip("addr", "add", f"{address}/32", "dev", link)

    def make_cgroup_root(self, cgroup_root: str) -> None:
        """`cgroup_root` in every hierarchy (the kubelet requires its cgroupRoot to exist). A
        new cpuset cgroup starts with no CPUs and no memory nodes: copy the parent's."""
        self.record["cgroup_roots"].append(cgroup_root)
        self._save()
        for hierarchy in cgroup_hierarchies():
            path = hierarchy / cgroup_root.lstrip("/")
            path.mkdir()
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (path / name).exists():
                    (path / name).write_text((hierarchy / name).read_text())

    def make_mount_point(self, path: Path) -> None:
        """`path` made (an empty directory, its parent existing) where the nodes' namespaces
        bind a directory of their own; recorded only when made here, so the undo removes only
        what was not there before."""
        if path.is_dir():
            return
        self.record["mount_points"].append(str(path))
        self._save()
        path.mkdir()

    def note_containerd(self, socket: Path) -> None:
        """A containerd listening on `socket`: its shims name it on their command line, which
        is how the shims of a killed harness are found (they outlive containerd by design)."""
        self.record["containerd_sockets"].append(str(socket))
        self._save()

    def note_loop_image(self, image: Path) -> None:
        """A file a node loop-mounts in its namespace (its btrfs disk): the mount goes with the
        namespace and autoclear frees the device; a device still backed by it at the undo (a
        namespace that outlived its harness) is detached."""
        self.record["loop_images"].append(str(image))
        self._save()

    def undo_all(self) -> None:
        """Undoes every change; what could not be undone is in `problems`."""
        self.problems = undo_recorded(self.record)
        if not self.problems:
            self.record_path.unlink(missing_ok=True)


def undo_recorded(record: dict[str, Any]) -> list[str]:
    """Kills what is left of the recorded nodes (containers by their cgroups, shims by their
    containerd's socket), deletes the bridges (and so their addresses), removes the cgroups and
    writes the saved sysctls back. Each step runs whatever failed before; returns the failures."""
    problems: list[str] = []
    leftovers = set().union(*(cgroup_pids(root) for root in record["cgroup_roots"]))
    leftovers |= shim_pids(record["containerd_sockets"])
    kill_all(leftovers)
    for bridge in record["bridges"]:
        if link_exists(bridge):
            try:
                _ip("link", "del", bridge)
            except ClusterError as error:
                problems.append(f"delete bridge {bridge}: {error}")
    for root in record["cgroup_roots"]:
        for hierarchy in cgroup_hierarchies():
            try:
                _remove_cgroup_tree(hierarchy / root.lstrip("/"))
            except OSError as error:
                problems.append(f"remove cgroup {hierarchy / root}: {error}")
    for image in record.get("loop_images", []):
        try:
            detach_loop_devices(Path(image))
        except ClusterError as error:
            problems.append(f"detach the loop devices of {image}: {error}")
    for made in record.get("mount_points", []):
        try:
            Path(made).rmdir()
        except FileNotFoundError:
            pass
        except OSError as error:
            problems.append(f"remove directory {made}: {error}")
    for name, value in record["sysctls"].items():
        path = Path("/proc/sys") / name
        try:
            if path.read_text().strip() != value:
                path.write_text(value + "\n")
        except OSError as error:
            problems.append(f"restore sysctl {name}={value}: {error}")
    return problems


def undo_abandoned(record_path: Path) -> None:
    """Undoes the host changes a killed harness recorded at `record_path`, if any; raises
    ClusterError (one line) when their owner still runs or an undo fails."""
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return
    except (OSError, ValueError) as error:
        raise ClusterError(
            f"localcluster: cannot read the real nodes' host changes in {record_path}: {error}"
        ) from error
    owner = record["owner"]
    if is_same_process_alive(int(owner["pid"]), owner.get("start_time")):
        raise ClusterError(
            f"localcluster: another cluster with real nodes (harness pid {owner['pid']}) runs "
            "on this machine; only one can at a time: stop it (python -m localcluster stop) "
            "or start this one without real nodes"
        )
    problems = undo_recorded(record)
    if problems:
        raise ClusterError(
            f"localcluster: could not undo what a killed cluster's real nodes left on the "
            f"host ({record_path}): {problems[0]}"
        )
    record_path.unlink()


def detach_loop_devices(image: Path) -> None:
    """Detaches every loop device backed by `image` (as `losetup -j` finds them) and waits until
    none is: a device whose mount is still being dropped (its namespace's last process has only
    just died) is marked to go and goes a moment later."""
    deadline = time.monotonic() + LOOP_DETACH_SECONDS
    while devices := _loop_devices_of(image):
        for device in devices:
            result = subprocess.run(
                ["losetup", "-d", device], capture_output=True, text=True, check=False
            )
            if result.returncode != 0 and "No such device" not in result.stderr:
                raise ClusterError(f"localcluster: `losetup -d {device}`: {result.stderr.strip()}")
        if time.monotonic() >= deadline:
            raise ClusterError(f"localcluster: {', '.join(devices)} still attached to {image}")
        time.sleep(0.1)


def _loop_devices_of(image: Path) -> list[str]:
    if not image.exists():
        return []
    found = subprocess.run(
        ["losetup", "-j", str(image)], capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        raise ClusterError(f"localcluster: `losetup -j {image}` failed: {found.stderr.strip()}")
    return [line.split(":", 1)[0] for line in found.stdout.splitlines() if line]


def shim_pids(sockets: list[str]) -> set[int]:
    """The containerd shims started by a containerd on one of `sockets` (their command line
    carries `-address <socket>`)."""
    if not sockets:
        return set()
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(socket.encode() in arguments for socket in sockets):
            found.add(int(entry.name))
    return found


def kill_all(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


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
