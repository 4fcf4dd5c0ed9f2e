"""The btrfs ioctls the node plugin calls, as numbers and byte layouts: pure.

Numbers and layouts are those of linux/btrfs.h (uapi, BTRFS_IOCTL_MAGIC 0x94) and, for the
on-disk quota items, linux/btrfs_tree.h. Each number below is the `_IOW/_IOR/_IOWR` of that header
worked out by hand and checked against a running kernel (tests/provisioner/node_volumes/
test_btrfs_ioctl.py calls every one of them). Argument buffers are 4096 bytes for most calls:
they go to `fcntl.ioctl` as a `bytearray`, since `bytes` longer than 1024 are refused there.

The plugin uses these rather than btrfs-progs: ioctls work on file descriptors (a parent
directory opened without following symlinks), need nothing in the image, and cost no exec.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# linux/btrfs.h: BTRFS_IOC_SUBVOL_CREATE _IOW(0x94, 14, struct btrfs_ioctl_vol_args)
SUBVOL_CREATE = 0x5000940E
# linux/btrfs.h: BTRFS_IOC_SNAP_DESTROY _IOW(0x94, 15, struct btrfs_ioctl_vol_args)
SNAP_DESTROY = 0x5000940F
# linux/btrfs.h: BTRFS_IOC_SNAP_CREATE_V2 _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2)
SNAP_CREATE_V2 = 0x50009417
# linux/btrfs.h: BTRFS_IOC_TREE_SEARCH _IOWR(0x94, 17, struct btrfs_ioctl_search_args)
TREE_SEARCH = 0xD0009411
# linux/btrfs.h: BTRFS_IOC_INO_LOOKUP _IOWR(0x94, 18, struct btrfs_ioctl_ino_lookup_args)
INO_LOOKUP = 0xD0009412
# linux/btrfs.h: BTRFS_IOC_QUOTA_CTL _IOWR(0x94, 40, struct btrfs_ioctl_quota_ctl_args)
QUOTA_CTL = 0xC0109428
# linux/btrfs.h: BTRFS_IOC_QGROUP_LIMIT _IOR(0x94, 43, struct btrfs_ioctl_qgroup_limit_args)
# (_IOR although the kernel reads it: the header's historical direction, kept for the number)
QGROUP_LIMIT = 0x8030942B

VOL_ARGS_SIZE = 4096
"""struct btrfs_ioctl_vol_args: __s64 fd; char name[BTRFS_PATH_NAME_MAX + 1] (4088)."""
_VOL_ARGS = struct.Struct("=q4088s")
_VOL_ARGS_V2 = struct.Struct("=qQQ4Q4040s")
"""struct btrfs_ioctl_vol_args_v2: fd, transid, flags, a 32-byte union (qgroup inherit), then
name[BTRFS_SUBVOL_NAME_MAX + 1] (4040)."""
_QGROUP_LIMIT_ARGS = struct.Struct("=6Q")
"""struct btrfs_ioctl_qgroup_limit_args: qgroupid, then struct btrfs_qgroup_limit {flags,
max_rfer, max_excl, rsv_rfer, rsv_excl}."""
_INO_LOOKUP_ARGS = struct.Struct("=QQ4080s")
"""struct btrfs_ioctl_ino_lookup_args: treeid, objectid, name[BTRFS_INO_LOOKUP_PATH_MAX]."""
_QUOTA_CTL_ARGS = struct.Struct("=QQ")
"""struct btrfs_ioctl_quota_ctl_args: cmd, status."""
_SEARCH_KEY = struct.Struct("=7Q4I4Q")
"""struct btrfs_ioctl_search_key: tree_id, min/max objectid, min/max offset, min/max transid,
min/max type, nr_items, unused, unused1..4: 104 bytes, followed by a 3992-byte result buffer."""
SEARCH_ARGS_SIZE = 4096
_SEARCH_HEADER = struct.Struct("=3Q2I")
"""struct btrfs_ioctl_search_header: transid, objectid, offset, type, len (32 bytes)."""
_QGROUP_ITEM = struct.Struct("<5Q")
"""btrfs_qgroup_info_item {generation, rfer, rfer_cmpr, excl, excl_cmpr} and
btrfs_qgroup_limit_item {flags, max_rfer, max_excl, rsv_rfer, rsv_excl}: on-disk, little-endian."""

SUBVOL_RDONLY = 1 << 1
"""BTRFS_SUBVOL_RDONLY: the snapshot is made read-only, atomically with its creation."""
QGROUP_LIMIT_MAX_RFER = 1 << 0
"""BTRFS_QGROUP_LIMIT_MAX_RFER: the limit is on referenced bytes (shared extents count in full)."""
QUOTA_CTL_ENABLE = 1
"""BTRFS_QUOTA_CTL_ENABLE."""
QUOTA_TREE_OBJECTID = 8
QGROUP_INFO_KEY = 242
QGROUP_LIMIT_KEY = 244
FIRST_FREE_OBJECTID = 256
"""The inode number of every subvolume's top directory."""
SUBVOLUME_NAME_MAX = 255
"""The kernel's NAME_MAX: longer names fit the buffers but are refused with ENAMETOOLONG."""


def _name_bytes(name: str) -> bytes:
    """One directory entry's name, refused unless it names exactly one entry below the parent:
    a slash or a dot-name would reach elsewhere, and a NUL would cut it short in the kernel."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not a single directory entry name: {name!r}")
    raw = name.encode()
    if len(raw) > SUBVOLUME_NAME_MAX:
        raise ValueError(f"name longer than {SUBVOLUME_NAME_MAX} bytes: {name!r}")
    return raw


def vol_args(name: str) -> bytearray:
    """SUBVOL_CREATE / SNAP_DESTROY argument: `name` below the directory the ioctl is called on."""
    return bytearray(_VOL_ARGS.pack(0, _name_bytes(name)))


def snapshot_args(source_fd: int, name: str, read_only: bool) -> bytearray:
    """SNAP_CREATE_V2 argument: a snapshot of the subvolume open as `source_fd`, made as `name`
    below the directory the ioctl is called on."""
    flags = SUBVOL_RDONLY if read_only else 0
    return bytearray(_VOL_ARGS_V2.pack(source_fd, 0, flags, 0, 0, 0, 0, _name_bytes(name)))


def qgroup_limit_args(max_referenced: int) -> bytearray:
    """QGROUP_LIMIT argument: qgroupid 0 means the subvolume of the fd the ioctl is called on."""
    if max_referenced <= 0:
        raise ValueError(f"a limit must be positive, not {max_referenced}")
    return bytearray(_QGROUP_LIMIT_ARGS.pack(0, QGROUP_LIMIT_MAX_RFER, max_referenced, 0, 0, 0))


def ino_lookup_args() -> bytearray:
    """INO_LOOKUP argument asking for the tree (= subvolume id) of the fd's subvolume top."""
    return bytearray(_INO_LOOKUP_ARGS.pack(0, FIRST_FREE_OBJECTID, b""))


def ino_lookup_tree_id(result: bytes | bytearray) -> int:
    tree_id: int = _INO_LOOKUP_ARGS.unpack_from(result)[0]
    return tree_id


def quota_ctl_args(command: int) -> bytearray:
    return bytearray(_QUOTA_CTL_ARGS.pack(command, 0))


def qgroup_search_args(subvolume_id: int, item_type: int) -> bytearray:
    """TREE_SEARCH argument for the one quota-tree item of level-0 qgroup `0/<subvolume_id>`:
    its key is (0, item_type, qgroupid), and a level-0 qgroupid is the subvolume id itself."""
    if item_type not in (QGROUP_INFO_KEY, QGROUP_LIMIT_KEY):
        raise ValueError(f"not a qgroup item type: {item_type}")
    key = _SEARCH_KEY.pack(
        QUOTA_TREE_OBJECTID,
        0,
        0,
        subvolume_id,
        subvolume_id,
        0,
        (1 << 64) - 1,
        item_type,
        item_type,
        1,
        0,
        0,
        0,
        0,
        0,
    )
    return bytearray(key.ljust(SEARCH_ARGS_SIZE, b"\0"))


@dataclass(frozen=True)
class QgroupItem:
    """The five numbers of a qgroup info item (generation, rfer, rfer_cmpr, excl, excl_cmpr) or
    limit item (flags, max_rfer, max_excl, rsv_rfer, rsv_excl), as found."""

    values: tuple[int, int, int, int, int]


def search_result_item(
    result: bytes | bytearray, subvolume_id: int, item_type: int
) -> QgroupItem | None:
    """The item a `qgroup_search_args` search found, or None when there is none.

    The kernel writes back how many items it found in the key's nr_items; the first result
    header follows the 104-byte key, the item right after its 32-byte header. The header is
    checked against what was asked, since a search key is a range and not a lookup."""
    found = _SEARCH_KEY.unpack_from(result)[9]
    if found == 0:
        return None
    _, objectid, offset, kind, length = _SEARCH_HEADER.unpack_from(result, _SEARCH_KEY.size)
    if (objectid, offset, kind) != (0, subvolume_id, item_type) or length < _QGROUP_ITEM.size:
        return None
    values = _QGROUP_ITEM.unpack_from(result, _SEARCH_KEY.size + _SEARCH_HEADER.size)
    return QgroupItem(values)


def referenced(info: QgroupItem) -> int:
    return info.values[1]


def max_referenced(limit: QgroupItem | None) -> int | None:
    """The limit on referenced bytes, None when there is no limit item or it sets no such limit
    (btrfs keeps the item with the flag cleared after `qgroup limit none`)."""
    if limit is None or not limit.values[0] & QGROUP_LIMIT_MAX_RFER:
        return None
    return limit.values[1]
