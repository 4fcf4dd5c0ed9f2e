"""The node plugin process with real bind mounts: what csi-sanity does not check.

A tenant is hostile: a symlink inside a base path must not lead a mount out of it. A plugin
restarted under running pods keeps no state yet serves their unpublish. The stats report what
was written, and the condition turns abnormal when the directory is removed behind the mount,
when the base path's disk is unmounted, or when the disk is full.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import grpc
import pytest

from provisioner.csi.generated import csi_pb2
from provisioner.csi.mount_table import mount_at
from provisioner.csi.mounts import read_mount_table
from provisioner.node_volumes import btrfs_ioctl
from provisioner.objects.node_handoff import VOLUME_PATH_KEY
from tests.provisioner.csi.plugin_process import (
    PluginProcess,
    call,
    mount_capability,
    plugin_process,
    require_root,
)
from tests.provisioner.node_volumes.test_btrfs_ioctl import (
    IMAGE_BYTES,
    release_loop_devices,
    run,
)

pytestmark = [pytest.mark.csi, pytest.mark.usefixtures("unmount_leftovers")]


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[PluginProcess]:
    require_root()
    with plugin_process(tmp_path) as running:
        yield running


def publish(
    plugin: PluginProcess, directory: Path, target: Path, *, read_only: bool = False
) -> csi_pb2.NodePublishVolumeResponse:
    request = csi_pb2.NodePublishVolumeRequest(
        volume_id=directory.name,
        target_path=str(target),
        volume_capability=mount_capability(),
        volume_context={VOLUME_PATH_KEY: str(directory)},
        readonly=read_only,
    )
    return call(
        plugin.endpoint, "Node/NodePublishVolume", request, csi_pb2.NodePublishVolumeResponse
    )


def unpublish(plugin: PluginProcess, target: Path) -> None:
    request = csi_pb2.NodeUnpublishVolumeRequest(volume_id="v", target_path=str(target))
    call(plugin.endpoint, "Node/NodeUnpublishVolume", request, csi_pb2.NodeUnpublishVolumeResponse)


def stats(plugin: PluginProcess, target: Path) -> csi_pb2.NodeGetVolumeStatsResponse:
    request = csi_pb2.NodeGetVolumeStatsRequest(volume_id="v", volume_path=str(target))
    return call(
        plugin.endpoint, "Node/NodeGetVolumeStats", request, csi_pb2.NodeGetVolumeStatsResponse
    )


def refusal(action: Callable[[], object]) -> grpc.StatusCode:
    """The status a call the plugin refuses ends with."""
    with pytest.raises(grpc.RpcError) as refused:
        action()
    code: grpc.StatusCode = refused.value.code()
    return code


def mounted(target: Path) -> bool:
    return mount_at(read_mount_table(), str(target)) is not None


def published_volume(plugin: PluginProcess, tmp_path: Path) -> tuple[Path, Path]:
    """A volume directory `pvc-1` made in the base path and published: (directory, target)."""
    volume = plugin.base_path / "pvc-1"
    volume.mkdir()
    target = tmp_path / "pod" / "mount"
    publish(plugin, volume, target)
    return volume, target


def test_only_root_may_call_the_plugin(plugin: PluginProcess) -> None:
    # Whoever can call NodePublishVolume can mount a volume anywhere.
    assert plugin.socket.stat().st_mode & 0o077 == 0


def test_publish_binds_the_directory_idempotently_and_read_only_when_asked(
    plugin: PluginProcess, tmp_path: Path
) -> None:
    volume, target = published_volume(plugin, tmp_path)
    publish(plugin, volume, target)  # the same again: success, one mount
    (target / "written").write_text("data")
    assert (volume / "written").read_text() == "data"
    entry = mount_at(read_mount_table(), str(target))
    assert entry is not None
    assert {"rw", "nosuid", "nodev"} <= entry.options
    assert sum(e.mount_point == str(target) for e in read_mount_table()) == 1
    # The same target asked read-only now: incompatible with what is there.
    assert refusal(lambda: publish(plugin, volume, target, read_only=True)) == (
        grpc.StatusCode.ALREADY_EXISTS
    )
    other = plugin.base_path / "pvc-2"
    other.mkdir()
    assert refusal(lambda: publish(plugin, other, target)) == grpc.StatusCode.ALREADY_EXISTS

    read_only = tmp_path / "pod" / "read-only"
    publish(plugin, volume, read_only, read_only=True)
    with pytest.raises(OSError) as write:
        (read_only / "more").write_text("x")
    assert write.value.errno == errno.EROFS
    assert (read_only / "written").read_text() == "data"

    for each in (target, read_only):
        unpublish(plugin, each)
        unpublish(plugin, each)  # gone already: success
        assert not each.exists()
    assert (volume / "written").read_text() == "data"


def test_no_path_leads_a_mount_out_of_the_base_path(plugin: PluginProcess, tmp_path: Path) -> None:
    outside = tmp_path / "secrets"
    outside.mkdir()
    (outside / "key").write_text("private")
    (plugin.base_path / "evil").symlink_to(outside)
    (plugin.base_path / "nested").mkdir()
    (plugin.base_path / "nested" / "link").symlink_to(outside)
    target = tmp_path / "pod" / "mount"
    (outside / "inner").mkdir()
    for planted in (plugin.base_path / "evil", plugin.base_path / "nested" / "link" / "inner"):
        assert refusal(partial(publish, plugin, planted, target)) == (
            grpc.StatusCode.FAILED_PRECONDITION
        )
    assert refusal(lambda: publish(plugin, outside, target)) == grpc.StatusCode.INVALID_ARGUMENT
    assert refusal(lambda: publish(plugin, plugin.base_path, target)) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    assert refusal(lambda: publish(plugin, plugin.base_path / "gone", target)) == (
        grpc.StatusCode.NOT_FOUND
    )
    assert not mounted(target)
    assert not target.exists()


def test_a_restarted_plugin_keeps_the_mount_and_serves_its_unpublish(tmp_path: Path) -> None:
    require_root()
    base = tmp_path / "base"
    target = tmp_path / "pod" / "mount"
    with plugin_process(tmp_path / "first", base) as first:
        volume = base / "pvc-1"
        volume.mkdir()
        publish(first, volume, target)
        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait()
    assert mounted(target)
    (target / "after-crash").write_text("still here")
    with plugin_process(tmp_path / "second", base) as second:
        publish(second, volume, target)  # the kubelet retrying: already there, success
        assert stats(second, target).usage[0].used > 0
        unpublish(second, target)
    assert not mounted(target)
    assert not target.exists()
    assert (volume / "after-crash").read_text() == "still here"


def test_stats_report_what_was_written_and_a_removed_directory_as_abnormal(
    plugin: PluginProcess, tmp_path: Path
) -> None:
    volume, target = published_volume(plugin, tmp_path)
    (target / "sub").mkdir()
    (target / "sub" / "file").write_bytes(os.urandom(3 << 20))
    answer = stats(plugin, target)
    by_unit = {usage.unit: usage for usage in answer.usage}
    space = os.statvfs(target)
    written = by_unit[csi_pb2.VolumeUsage.BYTES]
    assert 3 << 20 <= written.used < 4 << 20
    assert written.total == space.f_blocks * space.f_frsize
    assert 0 < written.available <= written.total
    assert by_unit[csi_pb2.VolumeUsage.INODES].used == 3  # the volume, sub, file
    assert not answer.volume_condition.abnormal

    subprocess.run(["rm", "-rf", str(volume)], check=True)
    condition = stats(plugin, target).volume_condition
    assert condition.abnormal
    assert f"{volume} is missing" in condition.message
    unpublish(plugin, target)


def test_stats_of_a_path_that_is_not_this_drivers_volume_is_not_found(
    plugin: PluginProcess, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run(["mount", "--bind", str(elsewhere), str(elsewhere)], check=True)
    try:
        assert refusal(lambda: stats(plugin, elsewhere)) == grpc.StatusCode.NOT_FOUND
    finally:
        subprocess.run(["umount", str(elsewhere)], check=True)
    assert refusal(lambda: stats(plugin, tmp_path / "never-mounted")) == grpc.StatusCode.NOT_FOUND


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs as a base path's disk, unmounted (lazily) after the test if still there."""
    require_root()
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    yield disk
    if mounted(disk):
        subprocess.run(["umount", "-l", str(disk)], check=True)


def test_a_full_disk_and_an_unmounted_one_are_abnormal(small_disk: Path, tmp_path: Path) -> None:
    with plugin_process(tmp_path / "plugin", small_disk, mount_point=True) as plugin:
        volume = small_disk / "pvc-1"
        volume.mkdir()
        target = tmp_path / "pod" / "mount"
        publish(plugin, volume, target)
        assert not stats(plugin, target).volume_condition.abnormal
        with pytest.raises(OSError) as full:
            (target / "filler").write_bytes(b"\0" * (2 << 20))
        assert full.value.errno == errno.ENOSPC
        condition = stats(plugin, target).volume_condition
        assert condition.abnormal
        assert "full" in condition.message
        (target / "filler").unlink()
        # The disk goes away under the running pod: the bind mount keeps it alive, the base
        # path is no longer its mount point.
        subprocess.run(["umount", "-l", str(small_disk)], check=True)
        condition = stats(plugin, target).volume_condition
        assert condition.abnormal
        assert "not mounted" in condition.message
        unpublish(plugin, target)
        assert not target.exists()


def test_a_read_write_once_pod_volume_is_published_to_one_target_at_a_time(
    plugin: PluginProcess, tmp_path: Path
) -> None:
    volume = plugin.base_path / "pvc-1"
    volume.mkdir()
    one_pod = csi_pb2.VolumeCapability.AccessMode.SINGLE_NODE_SINGLE_WRITER

    def publish_once(target: Path) -> csi_pb2.NodePublishVolumeResponse:
        request = csi_pb2.NodePublishVolumeRequest(
            volume_id=volume.name,
            target_path=str(target),
            volume_capability=mount_capability(mode=one_pod),
            volume_context={VOLUME_PATH_KEY: str(volume)},
        )
        return call(
            plugin.endpoint, "Node/NodePublishVolume", request, csi_pb2.NodePublishVolumeResponse
        )

    first, second = tmp_path / "pod-1" / "mount", tmp_path / "pod-2" / "mount"
    publish_once(first)
    publish_once(first)  # the same target again: idempotent
    assert refusal(lambda: publish_once(second)) == grpc.StatusCode.FAILED_PRECONDITION
    assert not mounted(second)
    unpublish(plugin, first)
    publish_once(second)  # the first pod gone: the second may have it
    assert mounted(second)
    unpublish(plugin, second)


def test_stats_of_a_btrfs_volume_are_its_qgroup_s(plugin: PluginProcess, tmp_path: Path) -> None:
    """A subvolume with a limit reports the limit as its total, its referenced bytes as used,
    and what is left under the limit as available; inodes are counted as for any directory."""
    image = tmp_path / "btrfs.img"
    with image.open("wb") as sparse:
        sparse.truncate(IMAGE_BYTES)
    run("mkfs.btrfs", "-q", str(image))
    run("mount", "-o", "loop", str(image), str(plugin.base_path))
    try:
        top = btrfs_ioctl.open_directory(str(plugin.base_path))
        try:
            btrfs_ioctl.create_subvolume(top, "pvc-1")
            btrfs_ioctl.enable_quotas(top)
            volume_fd = btrfs_ioctl.open_directory("pvc-1", dir_fd=top)
            try:
                btrfs_ioctl.set_limit(volume_fd, 16 << 20)
            finally:
                os.close(volume_fd)
        finally:
            os.close(top)
        volume, target = plugin.base_path / "pvc-1", tmp_path / "pod" / "mount"
        publish(plugin, volume, target)
        (target / "file").write_bytes(os.urandom(3 << 20))
        run("btrfs", "filesystem", "sync", str(target))
        by_unit = {usage.unit: usage for usage in stats(plugin, target).usage}
        written = by_unit[csi_pb2.VolumeUsage.BYTES]
        assert written.total == 16 << 20
        assert 3 << 20 <= written.used < 4 << 20
        assert written.available == written.total - written.used
        assert by_unit[csi_pb2.VolumeUsage.INODES].used == 2  # the volume, file
        unpublish(plugin, target)
    finally:
        subprocess.run(["umount", str(plugin.base_path)], check=True)
        release_loop_devices(image)
