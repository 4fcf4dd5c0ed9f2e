"""Loop devices for block volumes: attach a file, find its device again, grow it, detach: thin I/O.

The plugin keeps no loop state of its own. A restarted plugin finds a volume's device the way
`losetup -j` does: it asks each bound loop device (LOOP_GET_STATUS64) for the (st_dev, st_ino) of
its backing file and compares them with the volume's file, opened by its caller through the
no-symlink walk. /sys/block/loopN/loop/backing_file is not used: it is a path as seen from
whichever mount namespace attached the device.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from provisioner.node_volumes import loop_structs as structs

LOOP_CONTROL = "/dev/loop-control"
SYS_BLOCK = "/sys/block"
_ATTACH_ATTEMPTS = 8
"""GET_FREE then CONFIGURE is not atomic: another process may take the same free device in
between (EBUSY); each retry asks for a new free one."""


def _device_number(device: str) -> int:
    """N of `/dev/loopN`, refusing any other path: these ioctls are never sent to another device."""
    number = structs.loop_number(device.removeprefix("/dev/"))
    if number is None or structs.device_path(number) != device:
        raise ValueError(f"not a loop device path: {device!r}")
    return number


def _configure(loop_fd: int, backing_fd: int, file_name: str) -> None:
    try:
        fcntl.ioctl(loop_fd, structs.LOOP_CONFIGURE, structs.loop_config(backing_fd, file_name))
        return
    except OSError as error:
        # Kernels before 5.8 have no LOOP_CONFIGURE and answer EINVAL (ENOTTY on some).
        if error.errno not in (errno.EINVAL, errno.ENOTTY):
            raise
    set_fd_and_status(loop_fd, backing_fd, file_name)


def set_fd_and_status(loop_fd: int, backing_fd: int, file_name: str) -> None:
    """The two-call attach of kernels before LOOP_CONFIGURE; undone if the second call fails.
    Public so the tests can run it on a kernel that has LOOP_CONFIGURE."""
    fcntl.ioctl(loop_fd, structs.LOOP_SET_FD, backing_fd)
    try:
        fcntl.ioctl(loop_fd, structs.LOOP_SET_STATUS64, structs.status64(file_name))
    except OSError:
        fcntl.ioctl(loop_fd, structs.LOOP_CLR_FD)
        raise


def attach(backing_fd: int, file_name: str = "") -> str:
    """Binds the open file `backing_fd` to a free loop device and returns its path
    ("/dev/loopN"). The device is writable when the fd is; it has no AUTOCLEAR, so it stays
    until `detach`. `file_name` is only a label `losetup` shows."""
    control = os.open(LOOP_CONTROL, os.O_RDWR | os.O_CLOEXEC)
    try:
        for _ in range(_ATTACH_ATTEMPTS):
            number = fcntl.ioctl(control, structs.LOOP_CTL_GET_FREE)
            device = structs.device_path(number)
            loop_fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
            try:
                _configure(loop_fd, backing_fd, file_name)
                return device
            except OSError as error:
                if error.errno != errno.EBUSY:
                    raise
            finally:
                os.close(loop_fd)
    finally:
        os.close(control)
    raise OSError(errno.EBUSY, f"no free loop device after {_ATTACH_ATTEMPTS} attempts")


def _status(device: str) -> structs.LoopStatus | None:
    """The device's backing file identity; None when it is unbound (ENXIO) or gone."""
    try:
        loop_fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        raw = structs.empty_status64()
        fcntl.ioctl(loop_fd, structs.LOOP_GET_STATUS64, raw)
    except OSError as error:
        if error.errno == errno.ENXIO:
            return None
        raise
    finally:
        os.close(loop_fd)
    return structs.parse_status64(raw)


def find(backing_fd: int) -> str | None:
    """The loop device backed by the open file `backing_fd` (the lowest-numbered if several),
    or None when none is."""
    seen = os.fstat(backing_fd)
    names = (entry.name for entry in Path(SYS_BLOCK).iterdir())
    numbers = sorted(n for n in map(structs.loop_number, names) if n is not None)
    for number in numbers:
        device = structs.device_path(number)
        status = _status(device)
        if status is not None and (status.device, status.inode) == (seen.st_dev, seen.st_ino):
            return device
    return None


def grow(device: str) -> None:
    """Makes `device` take its backing file's size again, after the file was made larger."""
    _device_number(device)
    loop_fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.ioctl(loop_fd, structs.LOOP_SET_CAPACITY)
    finally:
        os.close(loop_fd)


def detach(device: str) -> None:
    """Unbinds `device` from its file; nothing when it is bound to none already.

    While another process still holds the device open (a mount, a pod, the kubelet's own loop),
    the kernel only marks it and unbinds at the last close: the caller confirms nothing uses it
    first when it must know the file is free."""
    _device_number(device)
    loop_fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.ioctl(loop_fd, structs.LOOP_CLR_FD)
    except OSError as error:
        if error.errno != errno.ENXIO:
            raise
    finally:
        os.close(loop_fd)
