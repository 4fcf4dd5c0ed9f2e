"""A published volume's usage: thin I/O (statvfs, and a walk of its files like `du -x`)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass


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
