"""Runs one helper container inside a private mount namespace, as the pod would see its node.

Why: a helper pod's command uses absolute node paths (`mkdir -p /opt/lps/pvc-...`); on a real
node those are the node's disk. Here each node is a directory of the harness, so the command
must see `<node dir>/opt/lps` at `/opt/lps`. The runner starts this file under
`unshare --mount --propagation private`; it joins the pod's network namespace when the plan
names one, builds a per-pod root (an image's unpacked root filesystem under a writable layer of
the container's own, as container runtimes do with overlayfs; or the host's /usr, /etc and
friends read-only, a fresh /tmp and the image's directories read-only; then /dev, /proc and
each volume bind-mounted at its mountPath), makes that root read-only if asked, chroots into
it, takes the pod's uid and gid and execs the command. The mounts die with the namespace when
the command ends, so nothing leaks into the host's mount table.

It is run as a file with `python -I -S`, so it imports only the standard library (starting it
must stay cheap: it is on the path of every helper pod).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

START_FAILURE_EXIT = 125  # helper_pods.SANDBOX_START_FAILURE_EXIT
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MAX_SYMLINKS = 40  # as the kernel's path walk
CLONE_NEWNET = 0x40000000
DIRECTORY_MODE = 0o755
SYSTEM_DIRECTORIES = ("usr", "bin", "lib", "lib64", "sbin", "etc")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class SandboxError(Exception):
    """The container could not be started; the message goes to the pod's log."""


def _mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    encoded = [
        value.encode() if value is not None else None for value in (source, target, fstype, data)
    ]
    if _libc.mount(encoded[0], encoded[1], encoded[2], ctypes.c_ulong(flags), encoded[3]) != 0:
        error = ctypes.get_errno()
        raise SandboxError(f"cannot mount {source or fstype} at {target}: {os.strerror(error)}")


def _bind(source: str, target: str, *, read_only: bool) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)


def _inside(root: Path, path: str) -> Path:
    """`path` as the container will see it, its symlinks followed within `root` (an image's
    /var/run -> /run must not lead a mount to the host's /run), as runc resolves mount
    targets; the last missing components are appended as they are."""
    resolved = root
    pending = [part for part in path.split("/") if part not in ("", ".")]
    links = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            resolved = resolved.parent if resolved != root else root
            continue
        candidate = resolved / part
        if not candidate.is_symlink():
            resolved = candidate
            continue
        links += 1
        if links > MAX_SYMLINKS:
            raise SandboxError(f"too many symbolic links in {path}")
        target = str(candidate.readlink())
        if target.startswith("/"):
            resolved = root
        pending = [piece for piece in target.split("/") if piece not in ("", ".")] + pending
    return resolved


def _make_directories(directory: Path) -> None:
    """Like mkdir -p, but each new directory is 0755 whatever the umask: a container running
    as another uid must be able to walk to its mounts (e.g. /root/.pyenv/... of the image)."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        path.mkdir()
        path.chmod(DIRECTORY_MODE)


def _make_mount_point(target: Path, *, is_directory: bool) -> None:
    try:
        if is_directory:
            _make_directories(target)
        else:
            _make_directories(target.parent)
            target.touch(exist_ok=True)
    except OSError as error:
        raise SandboxError(f"cannot create mount point {target}: {error.strerror}") from error


def join_network(namespace: str) -> None:
    descriptor = os.open(namespace, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(descriptor, CLONE_NEWNET) != 0:
            error = ctypes.get_errno()
            raise SandboxError(f"cannot join network namespace {namespace}: {os.strerror(error)}")
    finally:
        os.close(descriptor)


def _entry_by_entry(host: Path, inside: Path) -> None:
    """The host directory as a writable tmpfs whose entries are the host's, each bind-mounted
    read-only: a volume can then be mounted at a new path in it (/etc/config), as in an image,
    without creating anything on the host."""
    _mount("tmpfs", str(inside), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for entry in host.iterdir():
        target = inside / entry.name
        if entry.is_symlink():
            target.symlink_to(entry.readlink())
        elif entry.is_dir() or entry.is_file():
            _make_mount_point(target, is_directory=entry.is_dir())
            _bind(str(entry), str(target), read_only=True)


def _image_layers(image_root: Path, root: Path) -> None:
    """The image's root filesystem, read-only, under a writable layer on a tmpfs of this
    namespace (the container's changes and its mount points go there and die with it)."""
    if any(character in str(image_root) for character in ",:"):
        raise SandboxError(f"image root {image_root} has a ',' or ':' (overlayfs options)")
    layer = root.with_name(f"{root.name}-layer")
    layer.mkdir(exist_ok=True)
    _mount("tmpfs", str(layer), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    upper, work = layer / "upper", layer / "work"
    upper.mkdir()
    work.mkdir()
    options = f"lowerdir={image_root},upperdir={upper},workdir={work}"
    _mount("overlay", str(root), "overlay", 0, options)


def _host_system_directories(root: Path, targets: list[str]) -> list[Path]:
    """The host's SYSTEM_DIRECTORIES read-only in `root`; returns those made entry by entry
    (to be remounted read-only with the root)."""
    shadowed = []
    for name in SYSTEM_DIRECTORIES:
        host = Path("/") / name
        inside = root / name
        if host.is_symlink():
            # /bin -> usr/bin and friends: a relative link resolves inside the new root too.
            if not inside.is_symlink():
                inside.symlink_to(host.readlink())
        elif host.is_dir():
            inside.mkdir(exist_ok=True)
            if any(target.startswith(f"/{name}/") for target in targets):
                _entry_by_entry(host, inside)
                shadowed.append(inside)
            else:
                _bind(str(host), str(inside), read_only=True)
    return shadowed


def build_root(plan: dict[str, Any]) -> None:
    root = Path(plan["root"])
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(DIRECTORY_MODE)
    read_only_root = bool(plan.get("read_only_root"))
    image_root = plan.get("image_root")
    shadowed: list[Path] = []
    if image_root:
        _image_layers(Path(image_root), root)
    else:
        if read_only_root:
            # A mount of its own, so it can be made read-only once every mount point exists.
            _bind(str(root), str(root), read_only=False)
        targets = [str(mount["target"]) for mount in plan["mounts"]]
        shadowed = _host_system_directories(root, targets)
    for name in ("tmp", "dev", "proc"):
        (root / name).mkdir(exist_ok=True)
    if not image_root:  # an image's /tmp is the image's
        (root / "tmp").chmod(0o1777)
    if plan.get("fresh_tmp", True):
        _mount("tmpfs", str(root / "tmp"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    _bind("/dev", str(root / "dev"), read_only=False)
    _mount("proc", str(root / "proc"), "proc", MS_NOSUID | MS_NODEV)
    for mount in plan["mounts"]:
        source = Path(mount["source"])
        if not source.exists():
            raise SandboxError(f"volume source {source} does not exist")
        target = _inside(root, mount["target"])
        _make_mount_point(target, is_directory=source.is_dir())
        _bind(str(source), str(target), read_only=bool(mount["read_only"]))
    if read_only_root:
        _make_mount_point(_inside(root, plan["working_dir"] or "/"), is_directory=True)
        _mount(None, str(root), None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        for inside in shadowed:
            _mount(None, str(inside), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def drop_privileges(plan: dict[str, Any]) -> None:
    """The pod's runAsUser/runAsGroup, as a container runtime sets them before the exec."""
    if plan.get("group") is not None or plan.get("supplemental_groups"):
        os.setgroups(list(plan.get("supplemental_groups") or []))
    if plan.get("group") is not None:
        os.setgid(int(plan["group"]))
    if plan.get("user") is not None:
        os.setuid(int(plan["user"]))


def enter_and_exec(plan: dict[str, Any]) -> None:
    """Chroots and execs. Past the chroot the runner's files are out of sight, so failures are
    reported through the start-failure file opened before it (close-on-exec: a successful exec
    leaves it empty)."""
    os.chroot(plan["root"])
    working_dir = Path(plan["working_dir"] or "/")
    try:
        working_dir.mkdir(parents=True, exist_ok=True)
        os.chdir(working_dir)
    except OSError as error:
        message = f"cannot use working directory {working_dir}: {error.strerror}"
        raise SandboxError(message) from error
    drop_privileges(plan)
    argv = plan["argv"]
    sys.stdout.flush()
    try:
        os.execvpe(argv[0], argv, plan["env"])  # noqa: S606 - the pod's command, as a kubelet runs it
    except OSError as error:
        raise SandboxError(f'exec "{argv[0]}": {error.strerror}') from error


def main(arguments: list[str]) -> int:
    """`pod_sandbox.py PLAN START_FAILURE_FILE`: runs the plan; if the command cannot be
    started, writes why to START_FAILURE_FILE (and the log) and exits 125."""
    plan = json.loads(Path(arguments[0]).read_text(encoding="utf-8"))
    start_failure = os.open(
        arguments[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600
    )
    try:
        if plan.get("hostname"):
            socket.sethostname(plan["hostname"])  # the sandbox has its own UTS namespace
        if plan.get("network_namespace"):
            join_network(plan["network_namespace"])
        build_root(plan)
        enter_and_exec(plan)
    except (SandboxError, OSError) as error:
        message = f"localcluster: container could not start: {error}"
        os.write(start_failure, message.encode("utf-8", "replace"))
        print(message, file=sys.stderr, flush=True)
    return START_FAILURE_EXIT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
