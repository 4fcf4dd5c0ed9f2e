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

It is imported by `python -I -S` (sandbox_process.SANDBOX_LAUNCH) at every container start,
so it imports only what costs next to nothing: os, sys, marshal, ctypes and warnings (its plan
comes as marshal; paths are strings). json, pathlib, typing, socket and ctypes.util took a
start from about 16 ms to 63 ms of CPU, on the one machine that runs a whole test cluster: CPU
that a node's container runtime does not take from the control plane.
"""

from __future__ import annotations

import ctypes
import marshal
import os
import sys
import warnings  # noqa: F401 - os.execvpe imports it, past the chroot that hides the stdlib

TYPE_CHECKING = False  # typing itself costs more to import than the rest of this file
if TYPE_CHECKING:
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

_libc = ctypes.CDLL(None, use_errno=True)  # the C library the interpreter is linked with


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


def _inside(root: str, path: str) -> str:
    """`path` as the container will see it, its symlinks followed within `root` (an image's
    /var/run -> /run must not lead a mount to the host's /run), as runc resolves mount
    targets; the last missing components are appended as they are."""
    resolved = root
    pending = [part for part in path.split("/") if part not in ("", ".")]
    links = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            resolved = os.path.dirname(resolved) if resolved != root else root
            continue
        candidate = os.path.join(resolved, part)
        if not os.path.islink(candidate):
            resolved = candidate
            continue
        links += 1
        if links > MAX_SYMLINKS:
            raise SandboxError(f"too many symbolic links in {path}")
        target = os.readlink(candidate)
        if target.startswith("/"):
            resolved = root
        pending = [piece for piece in target.split("/") if piece not in ("", ".")] + pending
    return resolved


def _make_directories(directory: str) -> None:
    """Like mkdir -p, but each new directory is 0755 whatever the umask: a container running
    as another uid must be able to walk to its mounts (e.g. /root/.pyenv/... of the image)."""
    missing = []
    while not os.path.exists(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    for path in reversed(missing):
        os.mkdir(path)
        os.chmod(path, DIRECTORY_MODE)


def _make_mount_point(target: str, *, is_directory: bool) -> None:
    try:
        if is_directory:
            _make_directories(target)
        else:
            _make_directories(os.path.dirname(target))
            if not os.path.exists(target):
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666))
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


def _set_hostname(name: str) -> None:
    encoded = name.encode()
    if _libc.sethostname(encoded, ctypes.c_size_t(len(encoded))) != 0:
        error = ctypes.get_errno()
        raise SandboxError(f"cannot set hostname {name!r}: {os.strerror(error)}")


def _entry_by_entry(host: str, inside: str) -> None:
    """The host directory as a writable tmpfs whose entries are the host's, each bind-mounted
    read-only: a volume can then be mounted at a new path in it (/etc/config), as in an image,
    without creating anything on the host."""
    _mount("tmpfs", inside, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    with os.scandir(host) as entries:
        for entry in entries:
            target = os.path.join(inside, entry.name)
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), target)
            elif entry.is_dir() or entry.is_file():
                _make_mount_point(target, is_directory=entry.is_dir())
                _bind(entry.path, target, read_only=True)


def _image_layers(image_root: str, root: str) -> None:
    """The image's root filesystem, read-only, under a writable layer on a tmpfs of this
    namespace (the container's changes and its mount points go there and die with it)."""
    if any(character in image_root for character in ",:"):
        raise SandboxError(f"image root {image_root} has a ',' or ':' (overlayfs options)")
    layer = f"{root}-layer"
    os.makedirs(layer, exist_ok=True)
    _mount("tmpfs", layer, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    upper, work = os.path.join(layer, "upper"), os.path.join(layer, "work")
    os.mkdir(upper)
    os.mkdir(work)
    options = f"lowerdir={image_root},upperdir={upper},workdir={work}"
    _mount("overlay", root, "overlay", 0, options)


def _host_system_directories(root: str, targets: list[str]) -> list[str]:
    """The host's SYSTEM_DIRECTORIES read-only in `root`; returns those made entry by entry
    (to be remounted read-only with the root)."""
    shadowed = []
    for name in SYSTEM_DIRECTORIES:
        host = f"/{name}"
        inside = os.path.join(root, name)
        if os.path.islink(host):
            # /bin -> usr/bin and friends: a relative link resolves inside the new root too.
            if not os.path.islink(inside):
                os.symlink(os.readlink(host), inside)
        elif os.path.isdir(host):
            os.makedirs(inside, exist_ok=True)
            if any(target.startswith(f"/{name}/") for target in targets):
                _entry_by_entry(host, inside)
                shadowed.append(inside)
            else:
                _bind(host, inside, read_only=True)
    return shadowed


def build_root(plan: dict[str, Any]) -> None:
    root = os.path.normpath(plan["root"])
    os.makedirs(root, exist_ok=True)
    os.chmod(root, DIRECTORY_MODE)
    read_only_root = bool(plan.get("read_only_root"))
    image_root = plan.get("image_root")
    shadowed: list[str] = []
    if image_root:
        _image_layers(os.path.normpath(image_root), root)
    else:
        if read_only_root:
            # A mount of its own, so it can be made read-only once every mount point exists.
            _bind(root, root, read_only=False)
        targets = [str(mount["target"]) for mount in plan["mounts"]]
        shadowed = _host_system_directories(root, targets)
    for name in ("tmp", "dev", "proc"):
        os.makedirs(os.path.join(root, name), exist_ok=True)
    tmp = os.path.join(root, "tmp")
    if not image_root:  # an image's /tmp is the image's
        os.chmod(tmp, 0o1777)  # noqa: S103 - /tmp is world-writable and sticky, as on a host
    if plan.get("fresh_tmp", True):
        _mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    _bind("/dev", os.path.join(root, "dev"), read_only=False)
    _mount("proc", os.path.join(root, "proc"), "proc", MS_NOSUID | MS_NODEV)
    for mount in plan["mounts"]:
        source = mount["source"]
        if not os.path.exists(source):
            raise SandboxError(f"volume source {source} does not exist")
        target = _inside(root, mount["target"])
        _make_mount_point(target, is_directory=os.path.isdir(source))
        _bind(source, target, read_only=bool(mount["read_only"]))
    if read_only_root:
        _make_mount_point(_inside(root, plan["working_dir"] or "/"), is_directory=True)
        _mount(None, root, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        for inside in shadowed:
            _mount(None, inside, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def drop_privileges(plan: dict[str, Any]) -> None:
    """The pod's runAsUser/runAsGroup, as a container runtime sets them before the exec (no
    group of the harness's stays)."""
    if plan.get("group") is not None:
        os.setgroups([])
        os.setgid(int(plan["group"]))
    if plan.get("user") is not None:
        os.setuid(int(plan["user"]))


def enter_and_exec(plan: dict[str, Any]) -> None:
    """Chroots and execs. Past the chroot the runner's files are out of sight, so failures are
    reported through the start-failure file opened before it (close-on-exec: a successful exec
    leaves it empty)."""
    os.chroot(plan["root"])
    working_dir = plan["working_dir"] or "/"
    try:
        os.makedirs(working_dir, exist_ok=True)
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
    with open(arguments[0], "rb") as plan_file:
        plan = marshal.load(plan_file)  # noqa: S302 - written by the runner that started us
    start_failure = os.open(
        arguments[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600
    )
    try:
        if plan.get("hostname"):
            _set_hostname(plan["hostname"])  # the sandbox has its own UTS namespace
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
