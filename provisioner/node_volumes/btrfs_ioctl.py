"""btrfs subvolumes, snapshots and quota groups through ioctls on open directories: thin I/O.

Every call works on file descriptors: a parent directory is opened with `open_directory`
(O_DIRECTORY|O_NOFOLLOW, so a tenant's symlink in the last component is refused, ENOTDIR) and
the new or removed entry is one name below it. Errors are the kernel's, as OSError with its
errno: ENOTTY (or EINVAL) where the directory is not on btrfs, ENOENT from `usage` when quotas
are off or the subvolume has no qgroup, ENOTCONN from `set_limit` when quotas are off, EDQUOT on
a write past the limit, EROFS on a write into a read-only snapshot.
"""

from __future__ import annotations

import errno
import fcntl
import os

from provisioner.node_volumes import btrfs_structs as structs

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_directory(name: str, dir_fd: int | None = None) -> int:
    """An fd on the directory `name` (relative to `dir_fd` when given), never through a symlink
    at `name` itself. The caller closes it."""
    return os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)


def create_subvolume(parent_fd: int, name: str) -> None:
    """A new empty subvolume `name` in the directory `parent_fd`; EEXIST if the name is taken."""
    fcntl.ioctl(parent_fd, structs.SUBVOL_CREATE, structs.vol_args(name))


def snapshot(source_fd: int, parent_fd: int, name: str, read_only: bool) -> None:
    """A snapshot of the subvolume whose top directory is `source_fd`, made as `name` in
    `parent_fd`. Read-only is set in the same transaction: nobody can write into it first.
    The snapshot inherits the source's qgroup limit; the caller sets its own where it differs."""
    fcntl.ioctl(
        parent_fd, structs.SNAP_CREATE_V2, structs.snapshot_args(source_fd, name, read_only)
    )


def destroy_subvolume(parent_fd: int, name: str) -> None:
    """Removes the subvolume `name` in `parent_fd`, with its contents (ENOTEMPTY if it holds
    another subvolume). Its qgroup is left to the kernel's cleaner."""
    fcntl.ioctl(parent_fd, structs.SNAP_DESTROY, structs.vol_args(name))


def subvolume_id(fd: int) -> int:
    """The id of the subvolume `fd` lies in (5 for the filesystem's top)."""
    result = structs.ino_lookup_args()
    fcntl.ioctl(fd, structs.INO_LOOKUP, result)
    return structs.ino_lookup_tree_id(result)


def enable_quotas(fd: int) -> None:
    """Turns quota groups on for the filesystem of `fd`; nothing when they are on already."""
    fcntl.ioctl(fd, structs.QUOTA_CTL, structs.quota_ctl_args(structs.QUOTA_CTL_ENABLE))


def set_limit(fd: int, max_referenced: int) -> None:
    """Limits the referenced bytes of the subvolume whose top directory is `fd`."""
    fcntl.ioctl(fd, structs.QGROUP_LIMIT, structs.qgroup_limit_args(max_referenced))


def _search(fd: int, subvolume: int, item_type: int) -> structs.QgroupItem | None:
    args = structs.qgroup_search_args(subvolume, item_type)
    fcntl.ioctl(fd, structs.TREE_SEARCH, args)
    return structs.search_result_item(args, subvolume, item_type)


def usage(fd: int) -> tuple[int, int | None]:
    """(referenced bytes, their limit or None) of the subvolume `fd` lies in, as of the last
    committed transaction (what `btrfs qgroup show` prints; fresh writes count after a commit).
    TREE_SEARCH on the quota tree needs CAP_SYS_ADMIN; it fails ENOENT when quotas are off."""
    subvolume = subvolume_id(fd)
    info = _search(fd, subvolume, structs.QGROUP_INFO_KEY)
    if info is None:
        raise OSError(errno.ENOENT, f"subvolume {subvolume} has no qgroup")
    limit = _search(fd, subvolume, structs.QGROUP_LIMIT_KEY)
    return structs.referenced(info), structs.max_referenced(limit)
