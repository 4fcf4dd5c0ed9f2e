"""A CSI Block volume end to end on this machine, with real loop devices and real mounts: the
node's executor makes its directory and sparse file and attaches it; the Node service publishes
the device on a file target, a raw write through the target lands in the file; unpublish
unlinks the target; a new executor and service (a plugin restart) find the same device by the
file; the volume grows; its teardown waits while it is published, then detaches the device and
removes the directory by the gate's permit. Needs root.

The volume manager (volume_watch.NodeVolumes) stands in by `ExecutorDevices`, which answers
from the executor the watch would ask: the watch itself needs a cluster and is tested there."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from provisioner.configuration.config import BasePathRules
from provisioner.csi.csi_errors import CsiError
from provisioner.csi.generated import csi_pb2
from provisioner.csi.mounts import read_mount_table
from provisioner.csi.node_paths import node_base_paths
from provisioner.csi.node_server import NodeServer
from provisioner.node_volumes import block_volumes, loop_devices
from provisioner.node_volumes.snapshot_service import SnapshotService
from provisioner.node_volumes.volume_executor import Outcome, VolumeExecutor
from provisioner.node_volumes.volume_state import VolumeState
from provisioner.objects.node_handoff import VOLUME_PATH_KEY, NodeRestoreSource, VolumeSetup
from provisioner.objects.snapshot_handoff import SnapshotSetup, snapshot_id, snapshot_path
from tests.provisioner.csi.plugin_process import mount_capability
from tests.provisioner.node_volumes.test_volume_executor import (
    NODE,
    Stand,
    counting_setup,
    permit,
    tear_down,
)

pytestmark = pytest.mark.csi

MiB = 1 << 20
VOLUME = "pvc-1"


class ExecutorDevices:
    """What NodeVolumes answers, from one known setup instead of the PV watch."""

    def __init__(self, executor: VolumeExecutor, setup: VolumeSetup) -> None:
        self.executor = executor
        self.setup = setup

    def ensure_set_up(self, volume_id: str, path: str) -> None:
        assert (volume_id, path) == (VOLUME, self.setup.path)
        assert self.executor.set_up(volume_id, path, self.setup).ok

    def block_device(self, volume_id: str, path: str) -> str:
        assert (volume_id, path) == (VOLUME, self.setup.path)
        return self.executor.block_device(volume_id, self.setup)

    def block_usage(self, volume_id: str) -> tuple[str, int, int]:
        assert volume_id == VOLUME
        usage = self.executor.block_usage(self.setup)
        return usage.device or "", usage.size_bytes, usage.used_bytes


def devices_of(path: Path) -> list[str]:
    shown = subprocess.run(
        ["losetup", "-j", str(path)], check=False, capture_output=True, text=True
    ).stdout
    return [line.split(":", 1)[0] for line in shown.splitlines()]


@pytest.fixture
def stand(tmp_path: Path) -> Iterator[Stand]:
    """A node on tmp_path; after the test nothing of it stays mounted or attached."""
    root = tmp_path.resolve()
    yield Stand(root, counting_setup(root))
    inside = str(root) + "/"
    for point in sorted(
        {e.mount_point for e in read_mount_table() if e.mount_point.startswith(inside)},
        key=len,
        reverse=True,
    ):
        subprocess.run(["umount", "-l", point], check=True)
    for block in root.rglob(block_volumes.BLOCK_FILE):
        for device in devices_of(block):
            subprocess.run(["losetup", "-d", device], check=False)


def block_setup(stand: Stand, size: int = 16 * MiB) -> VolumeSetup:
    return VolumeSetup(str(stand.base), str(stand.base / "ns" / "disk"), "Block", size)


def service(stand: Stand, setup: VolumeSetup) -> tuple[VolumeExecutor, NodeServer]:
    executor = stand.executor()
    devices = ExecutorDevices(executor, setup)
    bases = node_base_paths(stand.bundle.config, NODE)
    return executor, NodeServer(NODE, bases, {}, volume_setups=devices, block_devices=devices)


def publish(
    server: NodeServer, setup: VolumeSetup, target: Path, *, read_only: bool = False, **mode: int
) -> None:
    server.node_publish_volume(
        csi_pb2.NodePublishVolumeRequest(
            volume_id=VOLUME,
            target_path=str(target),
            volume_capability=mount_capability(block=True, **mode),  # type: ignore[arg-type]
            volume_context={VOLUME_PATH_KEY: setup.path},
            readonly=read_only,
        )
    )


def unpublish(server: NodeServer, target: Path) -> None:
    server.node_unpublish_volume(
        csi_pb2.NodeUnpublishVolumeRequest(volume_id=VOLUME, target_path=str(target))
    )


def test_a_block_volume_from_setup_to_removal(stand: Stand, tmp_path: Path) -> None:
    setup = block_setup(stand)
    executor, server = service(stand, setup)
    assert executor.set_up(VOLUME, setup.path, setup) == Outcome("done")
    file = Path(setup.path) / block_volumes.BLOCK_FILE
    made = file.lstat()
    assert stat.S_ISREG(made.st_mode) and stat.S_IMODE(made.st_mode) == 0o600
    assert made.st_size == 16 * MiB and made.st_blocks == 0  # sparse: nothing written yet
    [device] = devices_of(file)  # attached at setup, once

    pod = tmp_path / "publish"
    pod.mkdir()  # the kubelet makes the parent, the plugin the file
    target = pod / "pod-a"
    publish(server, setup, target)
    publish(server, setup, target)  # idempotent: the same device is there
    shown = target.stat()
    assert stat.S_ISBLK(shown.st_mode) and shown.st_rdev == Path(device).stat().st_rdev
    payload = b"raw block data " * 300
    fd = os.open(target, os.O_RDWR)
    try:
        os.pwrite(fd, payload, 1 * MiB)
        os.fsync(fd)
    finally:
        os.close(fd)
    with file.open("rb") as data:
        data.seek(1 * MiB)
        assert data.read(len(payload)) == payload

    stats = server.node_get_volume_stats(
        csi_pb2.NodeGetVolumeStatsRequest(volume_id=VOLUME, volume_path=str(target))
    )
    [usage] = stats.usage
    assert usage.total == 16 * MiB
    assert 0 < usage.used == file.stat().st_blocks * 512 < 16 * MiB

    # A published device is not detached: its teardown waits, and nothing is removed.
    busy = tear_down(executor, setup, permit(setup.path))
    assert busy.kind == "busy" and "still mounted" in busy.message
    assert file.exists() and devices_of(file) == [device]

    unpublish(server, target)
    assert not target.exists() and not os.path.lexists(target)  # unlinked, not left
    unpublish(server, target)  # gone already: success

    # A restarted plugin: new executor and service, no loop state but the kernel's.
    executor, server = service(stand, setup)
    publish(server, setup, target, read_only=True)
    assert target.stat().st_rdev == Path(device).stat().st_rdev
    assert next(e for e in read_mount_table() if e.mount_point == str(target)).read_only
    with pytest.raises(CsiError) as other_mode:
        publish(server, setup, target)
    assert other_mode.value.code == grpc.StatusCode.ALREADY_EXISTS
    unpublish(server, target)
    assert devices_of(file) == [device]

    # Grown by the node's part of an expansion: the file and the device, never shrunk.
    assert executor.apply_size(VOLUME, setup, 32 * MiB) == Outcome("done")
    size = subprocess.run(
        ["blockdev", "--getsize64", device], check=True, capture_output=True, text=True
    )
    assert int(size.stdout) == 32 * MiB
    assert executor.apply_size(VOLUME, setup, 8 * MiB) == Outcome("already")
    assert block_volumes.grow(block_volumes.directory_of(setup.base_path, setup.path), 8 * MiB) == (
        32 * MiB
    )
    assert file.stat().st_size == 32 * MiB

    assert tear_down(executor, setup, permit(setup.path)) == Outcome("done")
    assert not Path(setup.path).exists()
    assert devices_of(file) == []


def test_after_a_reboot_publish_attaches_the_file_again(stand: Stand, tmp_path: Path) -> None:
    setup = block_setup(stand)
    executor, server = service(stand, setup)
    assert executor.set_up(VOLUME, setup.path, setup).ok
    file = Path(setup.path) / block_volumes.BLOCK_FILE
    [device] = devices_of(file)
    loop_devices.detach(device)  # what a reboot leaves: the file, the record, no device
    assert devices_of(file) == []
    target = tmp_path / "pod-b"
    publish(server, setup, target)
    [again] = devices_of(file)
    assert target.stat().st_rdev == Path(again).stat().st_rdev
    unpublish(server, target)


def test_a_read_write_once_pod_block_volume_goes_to_one_target(
    stand: Stand, tmp_path: Path
) -> None:
    setup = block_setup(stand)
    _, server = service(stand, setup)
    one_pod = csi_pb2.VolumeCapability.AccessMode.SINGLE_NODE_SINGLE_WRITER
    publish(server, setup, tmp_path / "pod-a", mode=one_pod)
    with pytest.raises(CsiError) as second:
        publish(server, setup, tmp_path / "pod-b", mode=one_pod)
    assert second.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert not (tmp_path / "pod-b").exists()
    unpublish(server, tmp_path / "pod-a")


def test_the_block_file_is_never_reached_through_a_link(stand: Stand, tmp_path: Path) -> None:
    """A tenant who swapped the file for a link (to a file outside the volume) gets nothing
    attached, grown or truncated through it."""
    setup = block_setup(stand)
    executor, server = service(stand, setup)
    assert executor.set_up(VOLUME, setup.path, setup).ok
    file = Path(setup.path) / block_volumes.BLOCK_FILE
    for device in devices_of(file):
        loop_devices.detach(device)
    outside = tmp_path / "outside"
    outside.write_bytes(b"x" * 10)
    file.unlink()
    file.symlink_to(outside)
    with pytest.raises(CsiError) as refused:
        publish(server, setup, tmp_path / "pod-a")
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    grown = executor.apply_size(VOLUME, setup, 32 * MiB)
    assert grown.kind == "failed" and "symbolic link" in grown.message
    assert outside.read_bytes() == b"x" * 10
    assert devices_of(outside) == []
    assert not (tmp_path / "pod-a").exists()


def test_a_block_publish_without_a_volume_manager_is_refused(tmp_path: Path) -> None:
    server = NodeServer(NODE, {str(tmp_path): BasePathRules(create=True)}, {})
    with pytest.raises(CsiError) as refused:
        server.node_publish_volume(
            csi_pb2.NodePublishVolumeRequest(
                volume_id=VOLUME,
                target_path=str(tmp_path / "t"),
                volume_capability=mount_capability(block=True),
                volume_context={VOLUME_PATH_KEY: str(tmp_path / "v")},
            )
        )
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "--manage-volumes" in refused.value.message


def test_a_device_held_open_is_not_detached_until_it_is_let_go(stand: Stand) -> None:
    """A pod's process (or the kubelet's own loop on the published file) holds the device:
    the kernel would only mark it, and the file would go while in use. The teardown waits."""
    setup = block_setup(stand)
    executor, _ = service(stand, setup)
    assert executor.set_up(VOLUME, setup.path, setup).ok
    [device] = devices_of(Path(setup.path) / block_volumes.BLOCK_FILE)
    holder = os.open(device, os.O_RDONLY)
    try:
        busy = tear_down(executor, setup, permit(setup.path))
        assert busy.kind == "busy" and "held open" in busy.message
        assert Path(setup.path, block_volumes.BLOCK_FILE).exists()
    finally:
        os.close(holder)
    assert tear_down(executor, setup, permit(setup.path)) == Outcome("done")
    assert not Path(setup.path).exists()


def test_a_block_volume_is_snapshotted_and_restored_with_its_bytes(stand: Stand) -> None:
    """A snapshot of a Block volume is the same directory operation as any (its one `block`
    file copied); a restore into a new Block volume keeps the copied file (only lengthened,
    never made anew) and attaches it: the bytes written through the source's device are read
    back through the restore's."""
    executor = stand.executor()
    source = block_setup(stand)
    assert executor.set_up(VOLUME, source.path, source).ok
    device = executor.block_device(VOLUME, source)
    written = os.urandom(4096) * 4
    with Path(device).open("r+b") as raw:
        raw.seek(1 << 20)
        raw.write(written)
        raw.flush()
        os.fsync(raw.fileno())
    state = VolumeState(stand.state_dir)
    service = SnapshotService("n1", [str(stand.base)], state, timeout_seconds=30)
    sid = snapshot_id("snapcontent-block")
    setup = SnapshotSetup(
        sid, VOLUME, source.path, str(stand.base), snapshot_path(str(stand.base), sid),
        source.size_bytes, "Block",
    )  # fmt: skip
    assert service.take(setup, "uid-block").outcome.kind == "done"
    restored = VolumeSetup(
        str(stand.base), str(stand.base / "ns" / "restored"), "Block", 32 * MiB,
        restore_source=NodeRestoreSource(sid, setup.path, str(stand.base), "snapcontent-block"),
    )  # fmt: skip
    assert executor.set_up("pvc-restored", restored.path, restored).ok
    again = executor.block_device("pvc-restored", restored)
    assert again != device
    with Path(again).open("rb") as raw:
        raw.seek(1 << 20)
        assert raw.read(len(written)) == written
    # The claim asked for more than the snapshot held: the file is lengthened to it.
    assert Path(restored.path, block_volumes.BLOCK_FILE).stat().st_size == 32 * MiB
