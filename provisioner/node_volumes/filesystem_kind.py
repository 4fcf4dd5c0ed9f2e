"""What a base path's filesystem can do for snapshots and sizes: its type, and reflinks: thin I/O.

The type comes from the mount table (btrfs gives subvolumes, qgroup limits and instant
snapshots). Reflink support is not a type's property (XFS has it only when made with reflink=1),
so it is asked of the filesystem itself: FICLONE between two scratch files.
"""

from __future__ import annotations

import errno
import fcntl
import os
import posixpath
import secrets
from pathlib import Path

from provisioner.csi.mount_table import containing_mount, parse_mountinfo

MOUNTINFO = "/proc/self/mountinfo"
FICLONE = 0x40049409
"""linux/fs.h: FICLONE _IOW(0x94, 9, int): share all of one file's extents into another."""
_NO_REFLINK = frozenset({errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL, errno.EXDEV})
"""How filesystems without shared extents refuse FICLONE (ext4 and tmpfs: EOPNOTSUPP)."""
_PROBE_BYTES = b"\0" * 4096
"""One block: cloning an empty file can succeed where no extent could ever be shared."""


def filesystem_type(path: str, mountinfo: str = MOUNTINFO) -> str:
    """The type ("btrfs", "xfs", "ext4", ...) of the mount `path` lies on, by its absolute,
    normalised spelling (no symlink resolved); "" when the table has no such mount."""
    text = Path(mountinfo).read_text(encoding="utf-8", errors="surrogateescape")
    entries = parse_mountinfo(text)
    mount = containing_mount(entries, posixpath.normpath(path))
    return "" if mount is None else mount.fs_type


def _scratch_file(directory_fd: int) -> tuple[str, int]:
    name = f".lps-reflink-probe-{secrets.token_hex(8)}"
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return name, os.open(name, flags, 0o600, dir_fd=directory_fd)


def supports_reflink(directory_fd: int) -> bool:
    """Whether files in the directory `directory_fd` can share extents: FICLONE of a one-block
    scratch file into another there. Both are removed again; errors other than a refusal of the
    clone itself (no space, a read-only filesystem) are raised."""
    made: list[tuple[str, int]] = []
    try:
        made.append(_scratch_file(directory_fd))
        made.append(_scratch_file(directory_fd))
        (_, source), (_, target) = made
        os.write(source, _PROBE_BYTES)
        try:
            fcntl.ioctl(target, FICLONE, source)
        except OSError as error:
            if error.errno in _NO_REFLINK:
                return False
            raise
        return True
    finally:
        for name, fd in made:
            os.close(fd)
            os.unlink(name, dir_fd=directory_fd)
