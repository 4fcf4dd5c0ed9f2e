"""The loop device ioctls the node plugin calls, as numbers and byte layouts: pure.

From linux/loop.h (uapi). The plugin calls them itself because busybox's `losetup` has neither
`-j` (find the device of a file) nor `-c` (re-read its size), and util-linux is not in the image.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# linux/loop.h: the ioctls on /dev/loopN
LOOP_SET_FD = 0x4C00
LOOP_CLR_FD = 0x4C01
LOOP_SET_STATUS64 = 0x4C04
LOOP_GET_STATUS64 = 0x4C05
LOOP_SET_CAPACITY = 0x4C07
LOOP_CONFIGURE = 0x4C0A
# linux/loop.h: the ioctl on /dev/loop-control
LOOP_CTL_GET_FREE = 0x4C82

LO_FLAGS_READ_ONLY = 1
LO_FLAGS_AUTOCLEAR = 4
"""Never set here: with it the device would go with the last close, and a volume's device must
outlive the plugin process that attached it (running pods hold it)."""

LO_NAME_SIZE = 64
_INFO64 = struct.Struct("=5Q4I64s64s32s2Q")
"""struct loop_info64: lo_device, lo_inode, lo_rdevice, lo_offset, lo_sizelimit, lo_number,
lo_encrypt_type, lo_encrypt_key_size, lo_flags, lo_file_name[64], lo_crypt_name[64],
lo_encrypt_key[32], lo_init[2]: 232 bytes."""
_CONFIG_HEAD = struct.Struct("=2I")
"""struct loop_config begins with fd and block_size, then a loop_info64, then __reserved[8]."""
CONFIG_SIZE = _CONFIG_HEAD.size + _INFO64.size + 8 * 8


def status64(file_name: str) -> bytearray:
    """A loop_info64 for LOOP_SET_STATUS64 (or inside LOOP_CONFIGURE): no offset, no size limit,
    no flags (no AUTOCLEAR, writable). The file name is only what `losetup` shows; the kernel
    keeps the first 63 bytes."""
    name = file_name.encode()[: LO_NAME_SIZE - 1]
    return bytearray(_INFO64.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, name, b"", b"", 0, 0))


def loop_config(backing_fd: int, file_name: str) -> bytearray:
    """LOOP_CONFIGURE's argument: attach `backing_fd` and set its status in one call, so no
    other process sees the device half set up. block_size 0 keeps the kernel's default."""
    head = _CONFIG_HEAD.pack(backing_fd, 0)
    return bytearray(head + status64(file_name) + bytes(8 * 8))


def empty_status64() -> bytearray:
    """A buffer for LOOP_GET_STATUS64 to fill."""
    return bytearray(_INFO64.size)


@dataclass(frozen=True)
class LoopStatus:
    """What identifies a loop device's backing file: the file's st_dev and st_ino as the kernel
    saw them at attach time (what `losetup -j` compares), and the name it was given."""

    device: int
    inode: int
    flags: int
    file_name: str


def parse_status64(raw: bytes | bytearray) -> LoopStatus:
    fields = _INFO64.unpack_from(raw)
    name = fields[9].split(b"\0", 1)[0].decode(errors="replace")
    return LoopStatus(device=fields[0], inode=fields[1], flags=fields[8], file_name=name)


def device_path(number: int) -> str:
    return f"/dev/loop{number}"


def loop_number(name: str) -> int | None:
    """N of a /sys/block entry `loopN`; None for anything else (loop-control, partitions)."""
    digits = name.removeprefix("loop")
    if digits == name or not digits.isdigit():
        return None
    return int(digits)
