"""A CSI Block volume on this node: one sparse file `block` in the volume's directory, served as
a loop device. Thin I/O over loop_devices.py.

The directory is made, owned and removed as any volume's (the same steps, the same gate); only
the file and its device are this module's. Every open goes through the no-symlink walk from the
base path (mounts.open_volume_directory) and then O_NOFOLLOW, so a tenant who replaced the file
or a directory above it with a link cannot make the plugin attach, grow or truncate anything
outside the volume. The plugin keeps no loop state: the device of a volume is found each time by
the file's identity (loop_devices.find), so a restarted plugin, or one after a reboot (when the
device is gone and is attached again), serves the same volume.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

import grpc

from provisioner.csi.csi_errors import CsiError
from provisioner.csi.mounts import device_mounts, open_volume_directory, read_mount_table
from provisioner.csi.node_paths import VolumeDirectory, parts_below
from provisioner.node_volumes import loop_devices

BLOCK_FILE = "block"
BLOCK_FILE_MODE = 0o600
"""Only root reads or writes the file itself: a pod reaches its data through the device."""
MAX_DEVICES = 8
"""Devices of one file detached before giving up (one is the rule; more only after a race)."""


class BlockBusyError(Exception):
    """The volume's device is still published or held open: the teardown is retried."""


@dataclass(frozen=True)
class BlockUsage:
    size_bytes: int
    """The file's length: the device's size."""
    used_bytes: int
    """What the sparse file occupies on its filesystem (st_blocks * 512)."""
    device: str | None
    """Its loop device, if one is attached."""


def directory_of(base_path: str, path: str) -> VolumeDirectory:
    parts = parts_below(base_path, path)
    if not parts:
        raise CsiError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"volume directory {path} is not strictly inside base path {base_path}",
        )
    return VolumeDirectory(base_path, parts)


def make_block_file(directory: VolumeDirectory, size_bytes: int) -> None:
    """Makes the volume's `block` file, sparse, `size_bytes` long. One there already (a retry,
    or a clone's copy of its source's file) is kept and only made longer if it is shorter:
    a block file never shrinks, that would cut a tenant's data."""
    directory_fd = open_volume_directory(directory)
    try:
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(BLOCK_FILE, flags, BLOCK_FILE_MODE, dir_fd=directory_fd)
        except FileExistsError:
            fd = _open_file(directory_fd, directory)
        try:
            if os.fstat(fd).st_size < size_bytes:
                os.ftruncate(fd, size_bytes)
        finally:
            os.close(fd)
    finally:
        os.close(directory_fd)


def open_block_file(directory: VolumeDirectory) -> int:
    """The volume's `block` file open read-write (what the device is attached to)."""
    directory_fd = open_volume_directory(directory)
    try:
        return _open_file(directory_fd, directory)
    finally:
        os.close(directory_fd)


def _open_file(directory_fd: int, directory: VolumeDirectory) -> int:
    where = f"{directory.path}/{BLOCK_FILE}"
    try:
        fd = os.open(BLOCK_FILE, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory_fd)
    except FileNotFoundError:
        raise CsiError(
            grpc.StatusCode.NOT_FOUND, f"{where} does not exist: the block volume was not set up"
        ) from None
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise CsiError(
            grpc.StatusCode.FAILED_PRECONDITION, f"{where} is a symbolic link: refused"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CsiError(grpc.StatusCode.FAILED_PRECONDITION, f"{where} is not a regular file")
    return fd


def attached_device(directory: VolumeDirectory) -> str:
    """The loop device ("/dev/loopN") backed by the volume's file, attached now if none is
    (first setup, or after a reboot took the devices)."""
    fd = open_block_file(directory)
    try:
        return loop_devices.find(fd) or loop_devices.attach(fd, f"{directory.path}/{BLOCK_FILE}")
    finally:
        os.close(fd)


def grow(directory: VolumeDirectory, size_bytes: int) -> int:
    """Makes the volume `size_bytes` long (file, then its device, if attached): the node's part
    of an expansion. Never shrinks. Returns the size the volume now has."""
    fd = open_block_file(directory)
    try:
        size = os.fstat(fd).st_size
        if size < size_bytes:
            os.ftruncate(fd, size_bytes)
            size = size_bytes
        device = loop_devices.find(fd)
        if device is not None:
            # Even when the file was long enough already: a crash between the truncate and
            # this call left the device at its old size.
            loop_devices.grow(device)
        return size
    finally:
        os.close(fd)


def usage(directory: VolumeDirectory) -> BlockUsage:
    fd = open_block_file(directory)
    try:
        seen = os.fstat(fd)
        return BlockUsage(seen.st_size, seen.st_blocks * 512, loop_devices.find(fd))
    finally:
        os.close(fd)


def detach(directory: VolumeDirectory) -> None:
    """Frees the volume's file of every loop device before its directory goes: nothing when the
    file or the device is gone already. BlockBusyError while a device is still published (a
    mount of it is left) or held open (a pod's process, the kubelet's own loop on the
    published file): the kernel would only unbind it at its last close, and the file would go
    while in use; the caller retries."""
    try:
        fd = open_block_file(directory)
    except CsiError as error:
        if error.code == grpc.StatusCode.NOT_FOUND:
            return
        raise
    try:
        for _ in range(MAX_DEVICES):
            device = loop_devices.find(fd)
            if device is None:
                return
            mounted = device_mounts(read_mount_table(), device)
            if mounted:
                raise BlockBusyError(
                    f"{device} (the device of {directory.path}) is still mounted at"
                    f" {', '.join(mounted)}: not detached"
                )
            try:
                loop_devices.detach(device)
            except OSError as error:
                if error.errno != errno.EBUSY:
                    raise
                raise BlockBusyError(f"{device} is busy: not detached yet") from None
            if loop_devices.find(fd) == device:
                raise BlockBusyError(
                    f"{device} (the device of {directory.path}) is still held open: it is"
                    " detached at its last close"
                )
        raise BlockBusyError(f"{directory.path}/{BLOCK_FILE} has more than {MAX_DEVICES} devices")
    finally:
        os.close(fd)
