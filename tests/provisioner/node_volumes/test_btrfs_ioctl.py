"""The plugin's btrfs ioctls on a real btrfs, with the `btrfs` tool as the oracle: each test gets a
fresh filesystem (a sparse file, mkfs.btrfs, mounted with -o loop under tmp_path), unmounted and
its loop device released after. Needs root, the kernel's btrfs, and btrfs-progs."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.node_volumes import btrfs_ioctl
from provisioner.node_volumes.filesystem_kind import filesystem_type, supports_reflink

pytestmark = pytest.mark.csi  # the CSI node plugin's root-only tests run with this mark

MiB = 1 << 20
IMAGE_BYTES = 256 * MiB
"""Sparse; about the smallest mkfs.btrfs makes with its default profiles."""


def run(*command: str) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def release_loop_devices(image: Path) -> None:
    """Detaches what still backs our image (a -o loop mount sets AUTOCLEAR, so normally nothing):
    only devices whose file is this image, so nothing of anyone else's is touched."""
    for line in run("losetup", "-j", str(image)).splitlines():
        device = line.split(":", 1)[0]
        if device.startswith("/dev/loop"):
            subprocess.run(["losetup", "-d", device], check=False)


@pytest.fixture
def btrfs(tmp_path: Path) -> Iterator[Path]:
    image = tmp_path / "btrfs.img"
    with image.open("wb") as sparse:
        sparse.truncate(IMAGE_BYTES)
    run("mkfs.btrfs", "-q", str(image))
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    run("mount", "-o", "loop", str(image), str(mount_point))
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)
        release_loop_devices(image)


@pytest.fixture
def top(btrfs: Path) -> Iterator[int]:
    fd = btrfs_ioctl.open_directory(str(btrfs))
    try:
        yield fd
    finally:
        os.close(fd)


def opened(parent_fd: int, name: str) -> int:
    return btrfs_ioctl.open_directory(name, dir_fd=parent_fd)


def qgroup_show(path: Path) -> dict[str, tuple[int, int | None]]:
    """`btrfs qgroup show --raw -re -f` read as {qgroupid: (referenced, max referenced)}; its
    JSON output crashes in btrfs-progs 6.2, so the text is parsed."""
    rows = run("btrfs", "qgroup", "show", "--raw", "-re", "-f", str(path)).splitlines()
    assert rows[0].split()[:5] == ["Qgroupid", "Referenced", "Exclusive", "Max", "referenced"]
    table = {}
    for row in rows[2:]:
        qgroup, referenced, _exclusive, max_referenced = row.split()[:4]
        table[qgroup] = (int(referenced), None if max_referenced == "none" else int(max_referenced))
    return table


def write_until_refused(path: Path, limit: int) -> tuple[int, OSError | None]:
    written = 0
    try:
        with path.open("wb") as file:
            while written < limit:
                file.write(b"x" * MiB)
                file.flush()
                os.fsync(file.fileno())
                written += MiB
    except OSError as error:
        return written, error
    return written, None


def test_a_subvolume_made_by_ioctl_is_one_the_tool_shows(btrfs: Path, top: int) -> None:
    btrfs_ioctl.create_subvolume(top, "pvc-a")
    volume = opened(top, "pvc-a")
    try:
        shown = run("btrfs", "subvolume", "show", str(btrfs / "pvc-a"))
        assert f"Subvolume ID: \t\t{btrfs_ioctl.subvolume_id(volume)}" in shown
        assert btrfs_ioctl.subvolume_id(top) == 5
    finally:
        os.close(volume)
    with pytest.raises(FileExistsError):
        btrfs_ioctl.create_subvolume(top, "pvc-a")


def test_a_read_only_snapshot_refuses_writes_and_a_writable_one_takes_them(
    btrfs: Path, top: int
) -> None:
    btrfs_ioctl.create_subvolume(top, "pvc-a")
    (btrfs / "pvc-a" / "data").write_text("before")
    (btrfs / ".snapshots").mkdir()
    volume, area = opened(top, "pvc-a"), opened(top, ".snapshots")
    try:
        btrfs_ioctl.snapshot(volume, area, "snap-1", read_only=True)
        btrfs_ioctl.snapshot(volume, top, "pvc-restored", read_only=False)
    finally:
        os.close(volume)
        os.close(area)
    (btrfs / "pvc-a" / "data").write_text("after")
    snap = btrfs / ".snapshots" / "snap-1"
    assert (snap / "data").read_text() == "before"
    assert run("btrfs", "property", "get", "-ts", str(snap), "ro").strip() == "ro=true"
    with pytest.raises(OSError) as refused:
        (snap / "new").write_text("x")
    assert refused.value.errno == errno.EROFS
    restored = btrfs / "pvc-restored"
    assert run("btrfs", "property", "get", "-ts", str(restored), "ro").strip() == "ro=false"
    (restored / "data").write_text("written in the restore")
    assert (snap / "data").read_text() == "before"


def test_a_write_past_the_limit_fails_edquot_while_a_neighbour_writes_on(
    btrfs: Path, top: int
) -> None:
    with pytest.raises(OSError) as off:
        btrfs_ioctl.usage(top)
    assert off.value.errno == errno.ENOENT  # quotas are off on a new filesystem
    btrfs_ioctl.enable_quotas(top)
    btrfs_ioctl.enable_quotas(top)  # a second time is nothing
    for name in ("tenant", "neighbour"):
        btrfs_ioctl.create_subvolume(top, name)
    tenant, neighbour = opened(top, "tenant"), opened(top, "neighbour")
    try:
        btrfs_ioctl.set_limit(tenant, 8 * MiB)
        btrfs_ioctl.set_limit(neighbour, 8 * MiB)
        written, error = write_until_refused(btrfs / "tenant" / "fill", 20 * MiB)
        assert error is not None and error.errno == errno.EDQUOT
        assert written <= 8 * MiB
        more, refused = write_until_refused(btrfs / "neighbour" / "fill", 4 * MiB)
        assert (more, refused) == (4 * MiB, None)
    finally:
        os.close(tenant)
        os.close(neighbour)


def test_usage_is_what_qgroup_show_prints(btrfs: Path, top: int) -> None:
    btrfs_ioctl.enable_quotas(top)
    btrfs_ioctl.create_subvolume(top, "pvc-a")
    btrfs_ioctl.create_subvolume(top, "pvc-b")
    (btrfs / "pvc-a" / "data").write_bytes(os.urandom(3 * MiB))
    a, b = opened(top, "pvc-a"), opened(top, "pvc-b")
    try:
        btrfs_ioctl.set_limit(a, 10 * MiB)
        run("btrfs", "filesystem", "sync", str(btrfs))  # qgroup numbers move at a commit
        shown = qgroup_show(btrfs / "pvc-a")
        referenced, limit = btrfs_ioctl.usage(a)
        assert (referenced, limit) == shown[f"0/{btrfs_ioctl.subvolume_id(a)}"]
        assert 3 * MiB <= referenced < 4 * MiB and limit == 10 * MiB
        assert btrfs_ioctl.usage(b) == (
            qgroup_show(btrfs / "pvc-b")[f"0/{btrfs_ioctl.subvolume_id(b)}"][0],
            None,
        )
    finally:
        os.close(a)
        os.close(b)


def test_destroy_removes_the_subvolume(btrfs: Path, top: int) -> None:
    btrfs_ioctl.create_subvolume(top, "pvc-a")
    (btrfs / "pvc-a" / "data").write_text("gone soon")
    assert "path pvc-a" in run("btrfs", "subvolume", "list", str(btrfs))
    btrfs_ioctl.destroy_subvolume(top, "pvc-a")
    assert "pvc-a" not in run("btrfs", "subvolume", "list", str(btrfs))
    assert not (btrfs / "pvc-a").exists()
    with pytest.raises(FileNotFoundError):
        btrfs_ioctl.destroy_subvolume(top, "pvc-a")


def test_a_symlinked_parent_is_not_followed(btrfs: Path, top: int) -> None:
    (btrfs / "elsewhere").symlink_to("/etc")
    with pytest.raises(OSError) as refused:
        opened(top, "elsewhere")
    # O_DIRECTORY|O_NOFOLLOW on a symlink: the link itself is no directory
    assert refused.value.errno == errno.ENOTDIR


def test_another_filesystem_answers_enotty(tmp_path: Path) -> None:
    plain = btrfs_ioctl.open_directory(str(tmp_path))
    try:
        for call in (btrfs_ioctl.subvolume_id, btrfs_ioctl.enable_quotas):
            with pytest.raises(OSError) as refused:
                call(plain)
            assert refused.value.errno == errno.ENOTTY
        with pytest.raises(OSError) as refused:
            btrfs_ioctl.create_subvolume(plain, "x")
        assert refused.value.errno == errno.ENOTTY
    finally:
        os.close(plain)


def test_filesystem_kind_tells_btrfs_and_reflinks(btrfs: Path, top: int, tmp_path: Path) -> None:
    assert filesystem_type(str(btrfs)) == "btrfs"
    assert filesystem_type(str(btrfs / "a" / "deeper")) == "btrfs"
    expected = run("stat", "-f", "-c", "%T", str(tmp_path)).strip()
    assert filesystem_type(str(tmp_path)) == ("ext4" if expected == "ext2/ext3" else expected)
    assert supports_reflink(top)
    assert [entry for entry in btrfs.iterdir() if "reflink" in entry.name] == []
    if expected in ("ext2/ext3", "tmpfs"):  # filesystems that never share extents
        plain = btrfs_ioctl.open_directory(str(tmp_path))
        try:
            assert not supports_reflink(plain)
        finally:
            os.close(plain)
        assert [entry for entry in tmp_path.iterdir() if "reflink" in entry.name] == []
