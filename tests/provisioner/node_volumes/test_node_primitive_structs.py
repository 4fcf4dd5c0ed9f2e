"""The btrfs and loop ioctl layouts, against the kernel headers' rules worked out here again: pure.

The numbers are recomputed from asm-generic/ioctl.h's encoding (dir << 30 | size << 16 | type
<< 8 | nr) with the sizes of linux/btrfs.h's and linux/loop.h's structs, so a typo in either
module's constants is caught without a kernel; test_btrfs_ioctl.py and test_loop_devices.py
call each one on a real kernel."""

from __future__ import annotations

import struct

import pytest

from provisioner.csi.mount_table import parse_mountinfo
from provisioner.node_volumes import btrfs_structs as b
from provisioner.node_volumes import loop_structs as lo

WRITE, READ = 1, 2


def ioc(direction: int, kind: int, number: int, size: int) -> int:
    return direction << 30 | size << 16 | kind << 8 | number


def test_btrfs_numbers_follow_the_header() -> None:
    assert ioc(WRITE, 0x94, 14, 4096) == b.SUBVOL_CREATE
    assert ioc(WRITE, 0x94, 15, 4096) == b.SNAP_DESTROY
    assert ioc(WRITE, 0x94, 23, 4096) == b.SNAP_CREATE_V2
    assert ioc(READ | WRITE, 0x94, 17, 4096) == b.TREE_SEARCH
    assert ioc(READ | WRITE, 0x94, 18, 4096) == b.INO_LOOKUP
    assert ioc(READ | WRITE, 0x94, 40, 16) == b.QUOTA_CTL
    assert ioc(READ, 0x94, 43, 48) == b.QGROUP_LIMIT


def test_btrfs_argument_sizes_are_the_structs() -> None:
    assert len(b.vol_args("a")) == 4096
    assert len(b.snapshot_args(3, "a", True)) == 4096
    assert len(b.ino_lookup_args()) == 4096
    assert len(b.qgroup_search_args(256, b.QGROUP_INFO_KEY)) == 4096
    assert len(b.qgroup_limit_args(1)) == 48
    assert len(b.quota_ctl_args(b.QUOTA_CTL_ENABLE)) == 16


def test_snapshot_args_carry_the_source_fd_flag_and_name() -> None:
    raw = b.snapshot_args(7, "snap-1", read_only=True)
    fd, transid, flags = struct.unpack_from("=qQQ", raw)
    assert (fd, transid, flags) == (7, 0, b.SUBVOL_RDONLY)
    assert raw[56 : 56 + 7] == b"snap-1\0"
    assert struct.unpack_from("=qQQ", b.snapshot_args(7, "s", read_only=False))[2] == 0


def test_limit_args_limit_referenced_bytes_of_the_fds_own_subvolume() -> None:
    assert struct.unpack("=6Q", b.qgroup_limit_args(10 << 20)) == (0, 1, 10 << 20, 0, 0, 0)
    with pytest.raises(ValueError, match="positive"):
        b.qgroup_limit_args(0)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x", "a\0b", "x" * 256])
def test_names_reaching_anywhere_but_one_entry_below_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        b.vol_args(name)
    with pytest.raises(ValueError):
        b.snapshot_args(3, name, read_only=True)


def test_the_longest_entry_name_is_packed_whole() -> None:
    assert b.vol_args("x" * 255)[8 : 8 + 256] == b"x" * 255 + b"\0"


def found(subvolume: int, kind: int, values: tuple[int, ...], count: int = 1) -> bytearray:
    raw = b.qgroup_search_args(subvolume, kind)
    struct.pack_into("=I", raw, 7 * 8 + 2 * 4, count)
    struct.pack_into("=3Q2I", raw, 104, 9, 0, subvolume, kind, 40)
    struct.pack_into("<5Q", raw, 136, *values)
    return raw


def test_search_key_asks_for_one_item_of_the_quota_tree() -> None:
    key = struct.unpack_from("=7Q4I", b.qgroup_search_args(257, b.QGROUP_LIMIT_KEY))
    assert key == (8, 0, 0, 257, 257, 0, (1 << 64) - 1, 244, 244, 1, 0)
    with pytest.raises(ValueError):
        b.qgroup_search_args(257, 132)


def test_search_results_are_read_after_their_header() -> None:
    info = b.search_result_item(found(256, 242, (21, 10469376, 1, 16384, 2)), 256, 242)
    assert info is not None and b.referenced(info) == 10469376
    limit = b.search_result_item(found(256, 244, (1, 31457280, 0, 0, 0)), 256, 244)
    assert b.max_referenced(limit) == 31457280


def test_no_item_or_another_item_or_no_flag_is_no_limit() -> None:
    assert b.search_result_item(found(256, 244, (1, 5, 0, 0, 0), count=0), 256, 244) is None
    assert b.search_result_item(found(257, 244, (1, 5, 0, 0, 0)), 256, 244) is None
    assert b.max_referenced(None) is None
    assert b.max_referenced(b.QgroupItem((0, 5, 0, 0, 0))) is None


def test_loop_numbers_follow_the_header() -> None:
    assert (lo.LOOP_SET_FD, lo.LOOP_CLR_FD) == (0x4C00, 0x4C01)
    assert (lo.LOOP_SET_STATUS64, lo.LOOP_GET_STATUS64) == (0x4C04, 0x4C05)
    assert (lo.LOOP_SET_CAPACITY, lo.LOOP_CONFIGURE, lo.LOOP_CTL_GET_FREE) == (
        0x4C07,
        0x4C0A,
        0x4C82,
    )


def test_loop_config_is_fd_block_size_status_and_reserved_with_no_autoclear() -> None:
    config = lo.loop_config(5, "/base/ns/vol/block")
    assert len(lo.empty_status64()) == 232
    assert len(config) == lo.CONFIG_SIZE == 304
    assert struct.unpack_from("=2I", config) == (5, 0)
    status = lo.parse_status64(config[8 : 8 + 232])
    assert status.flags & lo.LO_FLAGS_AUTOCLEAR == 0
    assert status.file_name == "/base/ns/vol/block"


def test_status_names_are_cut_to_what_the_kernel_keeps() -> None:
    status = lo.parse_status64(lo.status64("/" + "x" * 100))
    assert len(status.file_name) == 63


def test_status_read_back_names_the_backing_inode() -> None:
    raw = lo.empty_status64()
    struct.pack_into("=2Q", raw, 0, 0x2A, 257)
    status = lo.parse_status64(raw)
    assert (status.device, status.inode) == (0x2A, 257)


@pytest.mark.parametrize(
    ("name", "number"),
    [("loop0", 0), ("loop17", 17), ("loop-control", None), ("loop1p1", None), ("sda", None)],
)
def test_only_loop_devices_are_numbered(name: str, number: int | None) -> None:
    assert lo.loop_number(name) == number


def test_mountinfo_gives_each_mounts_filesystem_type() -> None:
    entries = parse_mountinfo(
        "36 1 0:40 / /mnt/btrfs rw,relatime shared:1 master:2 - btrfs /dev/loop1 rw,ssd\n"
        "37 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "38 1 8:2 / /odd rw\n"
    )
    assert [entry.fs_type for entry in entries] == ["btrfs", "ext4", ""]
