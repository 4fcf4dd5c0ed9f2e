"""A published volume's usage: thin I/O (statvfs, and a walk of its files like `du -x`; a btrfs
subvolume's qgroup numbers where the volume has a limit)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from provisioner.node_volumes import btrfs_ioctl

SUBVOLUME_TOP_INODE = 256
"""BTRFS_FIRST_FREE_OBJECTID: the inode of every subvolume's top directory, and of no other."""


@dataclass(frozen=True)
class FilesystemSpace:
    bytes_total: int
    bytes_available: int
    inodes_total: int
    inodes_available: int


@dataclass(frozen=True)
class DirectoryUsage:
    bytes_used: int
    inodes_used: int


def filesystem_space(path: str) -> FilesystemSpace:
    """The space of the filesystem `path` is on, as an unprivileged writer sees it."""
    space = os.statvfs(path)
    return FilesystemSpace(
        bytes_total=space.f_blocks * space.f_frsize,
        bytes_available=space.f_bavail * space.f_frsize,
        inodes_total=space.f_files,
        inodes_available=space.f_favail,
    )


def directory_usage(path: str) -> DirectoryUsage:
    """Blocks allocated and inodes under `path` (itself included), each hard link once, not
    following symlinks nor crossing into another filesystem; entries that vanish or cannot be
    read while walking are skipped: usage is a measurement, not a promise."""
    top = os.lstat(path)
    seen: set[int] = {top.st_ino}
    used, inodes = top.st_blocks * 512, 1
    pending = [path]
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_dev != top.st_dev or info.st_ino in seen:
                continue
            seen.add(info.st_ino)
            used += info.st_blocks * 512
            inodes += 1
            if stat.S_ISDIR(info.st_mode):
                pending.append(entry.path)
    return DirectoryUsage(bytes_used=used, inodes_used=inodes)


@dataclass(frozen=True)
class LimitedUsage:
    """A subvolume's referenced bytes and their limit (committed numbers, as `btrfs qgroup
    show` prints them: writes count once their transaction is)."""

    used: int
    limit: int

    def available(self, space: FilesystemSpace) -> int:
        """What a writer can still write: the room under the limit, or the filesystem's free
        space where that is less (a limit is a cap, not a reservation)."""
        return max(0, min(self.limit - self.used, space.bytes_available))


def limited_usage(path: str) -> LimitedUsage | None:
    """The usage of the volume published at `path` (a bind mount of its directory) when it is a
    btrfs subvolume with a limit; None otherwise (a plain directory, quotas off, not btrfs),
    where the caller measures as before."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_ino != SUBVOLUME_TOP_INODE:
            return None
        used, limit = btrfs_ioctl.usage(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if limit is None else LimitedUsage(used, limit)
