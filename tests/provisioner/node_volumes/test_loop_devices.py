"""The plugin's loop device calls on the real kernel, with util-linux (`losetup -j`, `blockdev`) as
the oracle: a sparse file in tmp_path attached, written through, found again by a fresh lookup
as after a plugin restart, grown, detached. Every device a test attaches is detached after it,
by the name attach returned. Needs root."""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.node_volumes import loop_devices, loop_structs

pytestmark = pytest.mark.csi  # the CSI node plugin's root-only tests run with this mark

MiB = 1 << 20


def run(*command: str) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def open_block(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)


@pytest.fixture
def block(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB sparse `block` file, made as the node makes a block volume's file."""
    path = tmp_path / "block"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.ftruncate(fd, 16 * MiB)
    os.close(fd)
    yield path
    for line in run("losetup", "-j", str(path)).splitlines():  # only devices on our file
        subprocess.run(["losetup", "-d", line.split(":", 1)[0]], check=False)


@pytest.fixture
def attached(block: Path) -> Iterator[str]:
    fd = open_block(block)
    try:
        device = loop_devices.attach(fd, str(block))
    finally:
        os.close(fd)
    try:
        yield device
    finally:
        loop_devices.detach(device)


def test_attach_gives_a_device_losetup_finds_for_the_file(block: Path, attached: str) -> None:
    shown = run("losetup", "-j", str(block))
    assert shown.startswith(f"{attached}: ")
    assert run("losetup", "-n", "-O", "AUTOCLEAR", attached).strip() == "0"  # outlives the plugin
    assert int(run("blockdev", "--getsize64", attached)) == 16 * MiB


def test_writes_through_the_device_land_in_the_file(block: Path, attached: str) -> None:
    payload = b"raw block data" * 100
    device = os.open(attached, os.O_RDWR | os.O_CLOEXEC)
    try:
        os.pwrite(device, payload, 4096)
        os.fsync(device)
    finally:
        os.close(device)
    with block.open("rb") as file:
        file.seek(4096)
        assert file.read(len(payload)) == payload


def test_a_fresh_lookup_finds_the_device_by_the_files_identity(
    block: Path, attached: str, tmp_path: Path
) -> None:
    fd = os.open(block, os.O_RDONLY | os.O_NOFOLLOW)  # as a restarted plugin opens it again
    try:
        assert loop_devices.find(fd) == attached
    finally:
        os.close(fd)
    other = tmp_path / "other"
    other.write_bytes(b"")
    fd = os.open(other, os.O_RDONLY)
    try:
        assert loop_devices.find(fd) is None
    finally:
        os.close(fd)


def test_grow_takes_the_files_new_size(block: Path, attached: str) -> None:
    os.truncate(block, 32 * MiB)
    assert int(run("blockdev", "--getsize64", attached)) == 16 * MiB
    loop_devices.grow(attached)
    assert int(run("blockdev", "--getsize64", attached)) == 32 * MiB


def test_detach_frees_the_file_and_is_idempotent(block: Path) -> None:
    fd = open_block(block)
    try:
        device = loop_devices.attach(fd)
        assert loop_devices.find(fd) == device
        loop_devices.detach(device)
        assert run("losetup", "-j", str(block)) == ""
        assert loop_devices.find(fd) is None
        loop_devices.detach(device)
    finally:
        os.close(fd)


@pytest.mark.parametrize("device", ["/dev/sda", "/dev/loop-control", "/dev/loop0/../sda", "loop0"])
def test_only_loop_devices_are_grown_or_detached(device: str) -> None:
    with pytest.raises(ValueError, match="not a loop device"):
        loop_devices.detach(device)
    with pytest.raises(ValueError, match="not a loop device"):
        loop_devices.grow(device)


def test_the_two_call_attach_of_older_kernels_gives_the_same_device(block: Path) -> None:
    backing = open_block(block)
    control = os.open(loop_devices.LOOP_CONTROL, os.O_RDWR)
    device = loop_structs.device_path(fcntl.ioctl(control, loop_structs.LOOP_CTL_GET_FREE))
    os.close(control)
    loop_fd = os.open(device, os.O_RDWR)
    try:
        loop_devices.set_fd_and_status(loop_fd, backing, str(block))
        assert run("losetup", "-j", str(block)).startswith(f"{device}: ")
        assert run("losetup", "-n", "-O", "AUTOCLEAR", device).strip() == "0"
        assert loop_devices.find(backing) == device
    finally:
        os.close(loop_fd)
        os.close(backing)
        loop_devices.detach(device)
