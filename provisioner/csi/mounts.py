"""The mount syscalls and the mount table: thin I/O, through libc (no mount binary needed in the
image, and errno comes back as it is).

A volume's directory is opened one component at a time from its base path with O_NOFOLLOW, and
the bind mount's source is that open descriptor (/proc/self/fd/N), so the directory mounted is
the one checked, even if a path component is swapped for a symlink in between.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

import grpc

from provisioner.csi.csi_errors import CsiError
from provisioner.csi.mount_table import MountEntry, parse_mountinfo
from provisioner.csi.node_paths import VolumeDirectory

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
UMOUNT_NOFOLLOW = 8
MOUNTINFO = "/proc/self/mountinfo"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def read_mount_table() -> list[MountEntry]:
    with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as mountinfo:  # noqa: PTH123 (one read of a proc file)
        return parse_mountinfo(mountinfo.read())


def open_volume_directory(directory: VolumeDirectory) -> int:
    """An O_PATH descriptor of the directory, reached without following a symlink below the
    base path; CsiError(NOT_FOUND) when it is missing, FAILED_PRECONDITION when a component is
    a symlink or not a directory."""
    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        fd = os.open(directory.base_path, flags)
    except FileNotFoundError:
        raise CsiError(
            grpc.StatusCode.NOT_FOUND,
            f"base path {directory.base_path} does not exist on this node: is its disk mounted?",
        ) from None
    try:
        for part in directory.parts:
            child = os.open(part, flags | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
    except FileNotFoundError:
        os.close(fd)
        raise CsiError(
            grpc.StatusCode.NOT_FOUND,
            f"volume directory {directory.path} does not exist on this node: the volume was"
            " removed or never made here",
        ) from None
    except OSError as error:
        os.close(fd)
        if error.errno in (errno.ENOTDIR, errno.ELOOP):
            raise CsiError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"volume directory {directory.path} is not a plain directory (a symlink or a"
                " file lies on its path): refused, so no mount can leave the base path",
            ) from None
        raise
    return fd


def same_directory(fd: int, path: str) -> bool:
    mine, theirs = os.fstat(fd), Path(path).stat(follow_symlinks=False)
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


def _call(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def bind_mount(fd: int, target: str, *, read_only: bool) -> None:
    """Bind-mounts the directory open at `fd` on `target`, nosuid and nodev (a tenant's files
    gain no rights), read-only when asked; undone if the second step fails."""
    source = f"/proc/self/fd/{fd}".encode()
    _call(_libc.mount(source, target.encode(), None, MS_BIND, None), f"bind mount at {target}")
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (MS_RDONLY if read_only else 0)
    try:
        _call(_libc.mount(None, target.encode(), None, flags, None), f"remount of {target}")
    except OSError:
        unmount(target)
        raise


def make_target_file(target: str) -> None:
    """A Block publish's target: a file (the kubelet made its parent, not the file), made
    without following a link; one there already is kept, a directory or anything else
    refused."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    except OSError as error:
        if error.errno not in (errno.EISDIR, errno.ELOOP):
            raise
        raise CsiError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{target} is a directory or a symbolic link: a block volume is published on a file",
        ) from None
    os.close(fd)


def bind_device(device: str, target: str, *, read_only: bool) -> None:
    """Bind-mounts the device node `device` (a /dev/loopN) on the file `target`. Not nodev:
    that would make the node unusable, and the node is the point.

    Read-only by a remount when asked, so the mount table (and a retried publish) shows the
    mode. The flag does not stop a write opened through the node (measured: the kernel checks
    a mount's read-only flag for files, not for device nodes); what holds the pod to reading is
    the kubelet, which gives a read-only volumeDevice to the container with the device
    permission "r" (the device cgroup)."""
    _call(
        _libc.mount(device.encode(), target.encode(), None, MS_BIND, None),
        f"bind mount of {device} at {target}",
    )
    if not read_only:
        return
    try:
        _call(
            _libc.mount(None, target.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY, None),
            f"read-only remount of {target}",
        )
    except OSError:
        unmount(target)
        raise


def remove_target(target: str) -> None:
    """What publish made at the target, once nothing is mounted there: its directory (mount)
    or its file (block); nothing when it is gone already."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    try:
        if stat.S_ISDIR(mode):
            Path(target).rmdir()
        else:
            Path(target).unlink()
    except FileNotFoundError:
        pass


def device_mounts(entries: Iterable[MountEntry], device: str) -> list[str]:
    """Where the device `device` is mounted: bind mounts of its node (a block publish, the
    kubelet's map of it: devtmpfs, root /loopN) and mounts of a filesystem on it (the
    entry's device field is its major:minor)."""
    name = device.removeprefix("/dev/")
    rdev = Path(device).stat().st_rdev
    number = f"{os.major(rdev)}:{os.minor(rdev)}"
    return [
        entry.mount_point
        for entry in entries
        if (entry.root == f"/{name}" and entry.fs_type == "devtmpfs") or entry.device == number
    ]


def unmount(target: str) -> None:
    _call(_libc.umount2(target.encode(), UMOUNT_NOFOLLOW), f"unmount of {target}")
