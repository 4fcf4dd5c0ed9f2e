"""One real node: containerd and a kubelet in a private mount namespace of their own.

Why a mount namespace: each node must see its own disk at the same host paths (see
RealNodePlan.disk_mounts), and everything containerd and the kubelet mount (overlay root
filesystems, the kubelet's volume tmpfs mounts, the bind of its root directory onto itself,
the pods' /run/netns links) must vanish from the host when the node stops. A holder process
(`unshare --mount --propagation private sleep infinity`) owns the namespace; the disk and /run
mounts are made in it with nsenter, and containerd and the kubelet are started in it with
nsenter. Once every process in it has gone, the kernel drops the namespace and all its mounts.

Stopping: the kubelet first (it would restart what is killed), then every process in the
node's cgroup root (the containers and their pause processes), containerd, then whatever is
still in the node's mount namespace (containerd's shims, which outlive containerd by design),
the holder last. Each is found by what makes it ours (its cgroup, its mount namespace), never
by name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from localcluster import kubeconfig
from localcluster.certificates import KeyPair, issue_kubelet_pki
from localcluster.errors import ClusterError, ComponentFailedError
from localcluster.host_changes import cgroup_pids, kill_all
from localcluster.node_binaries import NodeBinaries
from localcluster.processes import ManagedProcess
from localcluster.real_node_config import (
    BTRFS_IMAGE_BYTES,
    BTRFS_MOUNT,
    RealNodePlan,
    cni_config,
    containerd_config,
    kubelet_args,
    kubelet_config,
    registry_hosts_files,
)

KUBELET_STOP_GRACE_SECONDS = 10.0
CONTAINERD_STOP_GRACE_SECONDS = 5.0


def mount_namespace(pid: int) -> str | None:
    """The mount namespace of `pid` (e.g. `mnt:[4026532]`), None when it is gone."""
    try:
        return str(Path(f"/proc/{pid}/ns/mnt").readlink())
    except OSError:
        return None


def make_btrfs_image(image: Path) -> None:
    """A fresh sparse btrfs image at `image` (its size is BTRFS_IMAGE_BYTES)."""
    mkfs = shutil.which("mkfs.btrfs")
    if mkfs is None:
        raise ClusterError(
            "localcluster: mkfs.btrfs is missing (the real nodes' btrfs disks need it): run "
            "`make node-tools`"
        )
    image.unlink(missing_ok=True)
    with image.open("wb") as file:
        file.truncate(BTRFS_IMAGE_BYTES)
    result = subprocess.run([mkfs, "-q", str(image)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ClusterError(f"localcluster: mkfs.btrfs {image} failed: {result.stderr.strip()}")


class RealNode:
    """containerd + kubelet for one RealNodePlan; `start` returns once containerd answers
    (the cluster waits for the Node to be Ready)."""

    def __init__(self, plan: RealNodePlan, binaries: NodeBinaries, logs: Path) -> None:
        self.plan = plan
        self.binaries = binaries
        self.logs = logs
        name = plan.name
        self.holder = ManagedProcess(
            f"{name}-namespace",
            ["unshare", "--mount", "--propagation", "private", "--", "sleep", "infinity"],
            logs / f"{name}-namespace.log",
        )
        self.containerd: ManagedProcess | None = None
        self.kubelet: ManagedProcess | None = None

    @property
    def processes(self) -> list[ManagedProcess]:
        return [p for p in (self.holder, self.containerd, self.kubelet) if p is not None]

    def write_configuration(self, server: str, ca: KeyPair, registry: str) -> None:
        plan = self.plan
        for directory in (plan.state, plan.disk, plan.shim_bin, plan.cni_config_dir):
            directory.mkdir(parents=True, exist_ok=True)
        shim = plan.shim_bin / "containerd-shim-runc-v2"
        shim.unlink(missing_ok=True)
        shim.symlink_to(self.binaries.containerd_shim)
        plan.containerd_config.write_text(
            containerd_config(plan, self.binaries.runc, self.binaries.cni_plugins)
        )
        for path, text in registry_hosts_files(plan, registry).items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        (plan.cni_config_dir / "10-bridge.conflist").write_text(cni_config(plan))
        plan.resolv_conf.write_text("")
        make_btrfs_image(plan.btrfs_image)
        pki = issue_kubelet_pki(plan.state / "pki", ca, plan.name, plan.node_ip)
        plan.kubelet_config.write_text(
            kubelet_config(plan, ca.cert, (pki.serving.cert, pki.serving.key))
        )
        document = kubeconfig.build_kubeconfig(
            server,
            ca.cert_pem(),
            f"system:node:{plan.name}",
            client_cert_pem=pki.client.cert_pem(),
            client_key_pem=pki.client.key_pem(),
        )
        kubeconfig.write_kubeconfig(plan.kubelet_kubeconfig, document)

    def start(self, deadline: float) -> None:
        """The namespace and its mounts, containerd (waited for), then the kubelet."""
        own = mount_namespace(os.getpid())
        self.holder.start()
        pid = self.holder.pid or 0
        while mount_namespace(pid) in (own, None):
            if not self.holder.is_running() or time.monotonic() > deadline:
                raise ComponentFailedError(
                    self.holder.name, "did not make a mount namespace", self.holder.log_path
                )
            time.sleep(0.01)
        for source, target in self.plan.disk_mounts():
            source.mkdir(parents=True, exist_ok=True)
            self._in_namespace("mount", "--bind", str(source), str(target))
        self._in_namespace("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/run")
        # The btrfs disk: a loop mount made in the namespace (util-linux sets autoclear), so the
        # mount and its loop device go when the namespace does. Quotas stay off: turning them
        # on is the node plugin's job, on the first volume it sizes there.
        (self.plan.disk / BTRFS_MOUNT.relative_to("/")).mkdir(parents=True, exist_ok=True)
        self._in_namespace("mount", "-o", "loop", str(self.plan.btrfs_image), str(BTRFS_MOUNT))
        # Shared inside the node, as systemd makes / on a real machine: a container's mount
        # with HostToContainer or Bidirectional propagation (a CSI node plugin's, of the
        # kubelet's directory and the base paths) needs its source on a shared mount. The
        # namespace began private, so none of this reaches the host's mounts.
        self._in_namespace("mount", "--make-rshared", "/")
        path = f"{self.plan.shim_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        self.containerd = ManagedProcess(
            f"{self.plan.name}-containerd",
            self._enter(
                str(self.binaries.containerd), "--config", str(self.plan.containerd_config)
            ),
            self.logs / f"{self.plan.name}-containerd.log",
            env={"PATH": path},
        )
        self.containerd.start()
        while not self.plan.containerd_socket.is_socket():
            self.check_alive()
            if time.monotonic() > deadline:
                raise ComponentFailedError(
                    self.containerd.name, "did not open its socket", self.containerd.log_path
                )
            time.sleep(0.05)
        self.kubelet = ManagedProcess(
            f"{self.plan.name}-kubelet",
            self._enter(*kubelet_args(self.binaries.kubelet, self.plan)),
            self.logs / f"{self.plan.name}-kubelet.log",
            env={"PATH": path},
        )
        self.kubelet.start()

    def _enter(self, *command: str) -> list[str]:
        """`command` run in the node's mount namespace (nsenter execs it: same PID)."""
        return ["nsenter", f"--mount=/proc/{self.holder.pid}/ns/mnt", "--", *command]

    def _in_namespace(self, *command: str) -> None:
        result = subprocess.run(self._enter(*command), capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ClusterError(
                f"localcluster: {self.plan.name}: `{' '.join(command)}` failed in the node's "
                f"mount namespace: {result.stderr.strip()}"
            )

    def check_alive(self) -> None:
        for process in self.processes:
            if process.pid is not None and not process.is_running():
                raise ComponentFailedError(
                    process.name,
                    f"exited early (exit code {process.exit_code()})",
                    process.log_path,
                )

    def stop(self) -> None:
        namespace = mount_namespace(self.holder.pid) if self.holder.pid else None
        if self.kubelet is not None:
            self.kubelet.stop(KUBELET_STOP_GRACE_SECONDS)
        kill_all(cgroup_pids(self.plan.cgroup_root))
        if self.containerd is not None:
            self.containerd.stop(CONTAINERD_STOP_GRACE_SECONDS)
        if namespace is not None:
            kill_all(self._namespace_members(namespace))
        self.holder.stop()
        # Container processes may have been forked while their shims died; a last sweep.
        kill_all(cgroup_pids(self.plan.cgroup_root))

    def _namespace_members(self, namespace: str) -> set[int]:
        holder = self.holder.pid or 0
        members: set[int] = set()
        for entry in Path("/proc").iterdir():
            pid = int(entry.name) if entry.name.isdigit() else holder
            if pid != holder and mount_namespace(pid) == namespace:
                members.add(pid)
        return members
