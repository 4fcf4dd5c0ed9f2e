"""What a CSI volume's directory is, by its base path's filesystem, and the size it holds: thin I/O.

On btrfs a volume is a subvolume with a qgroup limit on its referenced bytes, so every CSI
volume there has a hard size (a tenant writing past it gets EDQUOT while its neighbours write
on) and a clone is an instant writable snapshot. Elsewhere a volume is a plain directory, as
before: nothing here touches it.

The subvolume is made through its parent's descriptor, reached from the base path one component
at a time without following a link (`open_parent`), after `prepare` made and checked those
parents (volume_steps.parents_step): a tenant who swaps a parent for a symbolic link in between
gets ELOOP/ENOTDIR, never a subvolume elsewhere. A limit is set only on a subvolume's own top
directory (inode 256): the ioctl limits the subvolume its descriptor lies in, and a plain
directory (one a class's reuseExistingData hands over) lies in its base path's subvolume, whose
limit is nobody's to set.
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import threading
from pathlib import Path
from typing import Literal

from provisioner.node_volumes import btrfs_ioctl
from provisioner.node_volumes.filesystem_kind import MOUNTINFO, filesystem_type

log = logging.getLogger(__name__)

Layout = Literal["directory", "subvolume"]
"""A plain directory, or a btrfs subvolume with a qgroup limit (block volumes: piece of its own)."""

SUBVOLUME_TOP_INODE = 256
"""BTRFS_FIRST_FREE_OBJECTID: the inode of every subvolume's top directory, and of no other."""
_QUOTAS_OFF = frozenset({errno.ENOTCONN, errno.ENOENT})
"""How QGROUP_LIMIT and the quota tree search say quota groups are off on the filesystem."""
_NO_SNAPSHOT = frozenset({errno.EXDEV, errno.EINVAL, errno.ENOTTY, errno.EOPNOTSUPP})
"""A snapshot refused because source and target are not one btrfs: the data is copied instead."""

SubvolumeMade = Literal["subvolume", "snapshot", "existing"]


class FilesystemKinds:
    """The layout of each base path's volumes, from its filesystem's type in the mount table;
    cached by the base path's device (one read of the mount table per filesystem, while a
    base path remounted on another filesystem is seen again at its next setup)."""

    def __init__(self, mountinfo: str = MOUNTINFO) -> None:
        self._mountinfo = mountinfo
        self._types: dict[int, str] = {}
        self._lock = threading.Lock()

    def layout(self, base_path: str) -> Layout:
        device = Path(base_path).stat().st_dev
        with self._lock:
            kind = self._types.get(device)
        if kind is None:
            kind = filesystem_type(base_path, self._mountinfo)
            with self._lock:
                self._types[device] = kind
        return "subvolume" if kind == "btrfs" else "directory"


def open_parent(base_path: str, path: str) -> tuple[int, str]:
    """An fd on the directory holding `path` (strictly inside `base_path`), and the last
    component's name: every component below the base path opened without following a link.
    The caller closes the fd."""
    parts = posixpath.relpath(path, base_path).split("/")
    if not parts or parts[0] in ("", ".", "..") or ".." in parts:
        raise ValueError(f"{path} is not strictly inside {base_path}")
    fd = os.open(base_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            below = btrfs_ioctl.open_directory(part, dir_fd=fd)
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def open_volume(base_path: str, path: str) -> int:
    """An fd on the volume's directory, reached as `open_parent` does (no link followed)."""
    parent, name = open_parent(base_path, path)
    try:
        return btrfs_ioctl.open_directory(name, dir_fd=parent)
    finally:
        os.close(parent)


def is_subvolume_top(fd: int) -> bool:
    return os.fstat(fd).st_ino == SUBVOLUME_TOP_INODE


def make_subvolume(base_path: str, path: str, source_fd: int | None = None) -> SubvolumeMade:
    """Makes the volume's directory as a subvolume (`subvolume`), or, for a clone or a restore
    whose source is a subvolume (`source_fd`, its top directory: a volume, or a read-only
    snapshot), as a writable snapshot of it (`snapshot`: instant, and the data is whole at
    once). `existing`: something is at the path already (an earlier attempt's, or anyone's:
    `prepare` decides whether it may be used, and a clone or restore then copies as before).
    Its parents must exist (`parents_step`)."""
    parent, name = open_parent(base_path, path)
    try:
        if source_fd is not None:
            try:
                btrfs_ioctl.snapshot(source_fd, parent, name, read_only=False)
                return "snapshot"
            except OSError as error:
                if error.errno == errno.EEXIST:
                    return "existing"
                if error.errno not in _NO_SNAPSHOT:
                    raise
                log.info("%s: no snapshot of its source (%s): copied", path, error)
        try:
            btrfs_ioctl.create_subvolume(parent, name)
        except FileExistsError:
            return "existing"
        return "subvolume"
    finally:
        os.close(parent)


def subvolume_to_snapshot(base_path: str, path: str) -> int | None:
    """An fd on the directory a new volume is to be a snapshot of (a clone's source, a
    restore's snapshot) when it is a subvolume's top, else None (the data is copied). The
    walk to it follows no symbolic link. The caller closes it."""
    try:
        fd = open_volume(base_path, path)
    except (OSError, ValueError):
        return None
    if is_subvolume_top(fd):
        return fd
    os.close(fd)
    return None


def limit_size(fd: int, size_bytes: int, base_path: str) -> str:
    """Sets the qgroup limit of the subvolume whose top directory is `fd` to `size_bytes`. Where
    quota groups are off on its filesystem they are turned on first; then what to tell the
    admin (else ""): nothing to configure, but a filesystem-wide change worth an event."""
    try:
        btrfs_ioctl.set_limit(fd, size_bytes)
    except OSError as error:
        if error.errno not in _QUOTAS_OFF:
            raise
        btrfs_ioctl.enable_quotas(fd)
        btrfs_ioctl.set_limit(fd, size_bytes)
        return (
            f"btrfs quota groups were off on the filesystem of base path {base_path}: the node"
            " plugin turned them on, so that each volume there is held to its size"
        )
    return ""


def apply_size(layout: Layout, base_path: str, path: str, size_bytes: int) -> str:
    """Gives the set-up volume at `path` the size `size_bytes` (an expansion), in its layout's
    one way; what to tell the admin, as `limit_size`. Raises OSError when it cannot."""
    if layout == "subvolume":
        fd = open_volume(base_path, path)
        try:
            if is_subvolume_top(fd):
                return limit_size(fd, size_bytes, base_path)
        finally:
            os.close(fd)
    # A plain directory has no size of its own to apply (nor one reused on btrfs). A block
    # volume's grow (its file's length, its loop device's capacity) is block_volumes.grow,
    # which VolumeExecutor.apply_size calls instead of this.
    return ""
