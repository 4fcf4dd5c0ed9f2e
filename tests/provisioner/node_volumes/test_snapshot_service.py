"""The node's SnapshotService on real files: a plain directory (the confined copy step) and a
loop-mounted btrfs (a read-only subvolume snapshot). Take, idempotent retake, a partial copy
emptied and taken again, a source not set up refused, import only of this node's own ready
snapshot, and removal only with a current permit naming that very snapshot; forged or stale
permits remove nothing."""

from __future__ import annotations

import dataclasses
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from provisioner.csi.csi_errors import CsiError
from provisioner.csi.generated import csi_pb2
from provisioner.node_volumes import btrfs_ioctl
from provisioner.node_volumes.snapshot_records import SnapshotRecord
from provisioner.node_volumes.snapshot_restore import snapshot_lock_name
from provisioner.node_volumes.snapshot_rpcs import SnapshotPermit, SnapshotRpcs, SourceVolume
from provisioner.node_volumes.snapshot_service import SnapshotService
from provisioner.node_volumes.volume_records import VolumeRecord
from provisioner.node_volumes.volume_state import VolumeBusyError, VolumeState
from provisioner.objects.node_handoff import NodeRestoreSource, VolumeSetup
from provisioner.objects.snapshot_handoff import (
    SNAPSHOT_AREA,
    SnapshotRemoval,
    SnapshotSetup,
    snapshot_id,
    snapshot_path,
)
from provisioner.provisioning.fresh_directory import OWNERS_DIR, owner_marker_path
from tests.provisioner.node_volumes.test_btrfs_ioctl import btrfs  # noqa: F401 -- a fixture
from tests.provisioner.node_volumes.test_volume_executor import Stand, counting_setup

pytestmark = pytest.mark.csi  # root: bwrap's confined copy, btrfs ioctls

CONTENT = "snapcontent-0f4c"
UID = "uid-1"


class Node:
    def __init__(self, tmp_path: Path, base: Path) -> None:
        self.base = base
        self.state = VolumeState(tmp_path / "state")
        self.service = SnapshotService("n1", [str(base)], self.state, timeout_seconds=30)

    def volume(self, name: str, *, record: bool = True) -> Path:
        path = self.base / "ns" / name
        path.mkdir(parents=True)
        (path / "data.txt").write_text(f"data of {name}")
        (path / "link").symlink_to("/etc/hostname")
        if record:
            self.state.write(name, VolumeRecord("set-up", str(path)))
        return path

    def setup(self, source: str, content: str = CONTENT) -> SnapshotSetup:
        sid = snapshot_id(content)
        return SnapshotSetup(
            snapshot_id=sid,
            source_volume=source,
            source_path=str(self.base / "ns" / source),
            base_path=str(self.base),
            path=snapshot_path(str(self.base), sid),
            size_bytes=1 << 20,
            volume_mode="Filesystem",
        )


@pytest.fixture
def node(tmp_path: Path) -> Node:
    base = tmp_path / "base"
    base.mkdir()
    return Node(tmp_path, base)


def permit(setup: SnapshotSetup, content: str = CONTENT, uid: str = UID) -> SnapshotRemoval:
    return SnapshotRemoval(content, uid, setup.snapshot_id, setup.path)


def marker(setup: SnapshotSetup) -> str:
    return Path(owner_marker_path(setup.base_path, setup.path)).read_text()


def test_a_copy_snapshot_is_taken_once_recorded_ready_and_marked(node: Node) -> None:
    node.volume("pv-a")
    setup = node.setup("pv-a")
    taken = node.service.take(setup, UID)
    assert taken.outcome.kind == "done", taken.message
    snap = Path(setup.path)
    assert (snap / "data.txt").read_text() == "data of pv-a"
    assert (snap / "link").is_symlink()  # kept as a link, never followed
    area = snap.parent
    assert area.name == SNAPSHOT_AREA and (area.stat().st_mode & 0o777) == 0o700
    assert marker(setup) == f"snapshot:{setup.snapshot_id}\n"
    record = node.service.record(setup.snapshot_id)
    assert record is not None and record.state == "ready" and record.kind in ("copy", "reflink")
    assert (record.size_bytes, record.content_uid, record.source_volume) == (1 << 20, UID, "pv-a")
    again = node.service.take(setup, UID)
    assert again.outcome.kind == "already" and again.record == record


def test_a_ready_snapshot_whose_data_went_is_reported_never_retaken(node: Node) -> None:
    node.volume("pv-a")
    setup = node.setup("pv-a")
    assert node.service.take(setup, UID).ok
    for entry in Path(setup.path).iterdir():
        entry.unlink()
    Path(setup.path).rmdir()
    again = node.service.take(setup, UID)
    assert again.outcome.kind == "failed" and "is gone" in again.message
    assert not Path(setup.path).exists()
    imported = SnapshotSetup(
        setup.snapshot_id, "", "", setup.base_path, setup.path, 0, "Filesystem", imported=True
    )
    assert node.service.take(imported, UID).outcome.kind == "refused"


def test_a_partial_copy_is_emptied_and_taken_again(node: Node) -> None:
    node.volume("pv-a")
    setup = node.setup("pv-a")
    area = Path(setup.path).parent
    area.mkdir(mode=0o700)
    Path(setup.path).mkdir()
    (Path(setup.path) / "half-copied").write_text("torn")
    sid = setup.snapshot_id
    base = str(node.base)
    creating = SnapshotRecord(sid, "creating", "copy", base, setup.path, "pv-a", 1, 1, UID)
    node.service.store.write(creating)
    taken = node.service.take(setup, UID)
    assert taken.outcome.kind == "done", taken.message
    assert sorted(p.name for p in Path(setup.path).iterdir()) == ["data.txt", "link"]


def test_a_source_this_node_did_not_set_up_is_never_copied(node: Node) -> None:
    node.volume("pv-a", record=False)
    setup = node.setup("pv-a")
    taken = node.service.take(setup, UID)
    assert taken.outcome.kind == "failed" and "not set up" in taken.message
    assert not Path(setup.path).exists()
    node.state.write("pv-a", VolumeRecord("set-up", str(node.base / "elsewhere")))
    assert node.service.take(setup, UID).outcome.kind == "failed"


def test_a_gone_source_fails_in_plain_words(node: Node) -> None:
    path = node.volume("pv-a")
    (path / "data.txt").unlink()
    (path / "link").unlink()
    path.rmdir()
    taken = node.service.take(node.setup("pv-a"), UID)
    assert taken.outcome.kind == "failed" and "is gone" in taken.message


@pytest.mark.parametrize(
    "change",
    [
        {"source_path": "/etc"},
        {"base_path": "/etc", "path": snapshot_path("/etc", "0" * 32)},
        {"source_path": "BASE/.local-path-storage-snapshots"},
    ],
)
def test_paths_outside_this_node_or_in_its_area_are_refused(
    node: Node, change: dict[str, str]
) -> None:
    node.volume("pv-a")
    fields = {**node.setup("pv-a").__dict__}
    fields.update({k: v.replace("BASE", str(node.base)) for k, v in change.items()})
    if "path" in change:
        fields["snapshot_id"] = "0" * 32
    taken = node.service.take(SnapshotSetup(**fields), UID)
    assert taken.outcome.kind == "refused", taken.message
    assert not (node.base / SNAPSHOT_AREA).exists()


def test_import_needs_this_nodes_own_ready_record(node: Node) -> None:
    node.volume("pv-a")
    setup = node.setup("pv-a")
    imported = SnapshotSetup(
        setup.snapshot_id, "", "", setup.base_path, setup.path, 0, "Filesystem", imported=True
    )
    refused = node.service.take(imported, UID)
    assert refused.outcome.kind == "refused" and "names no snapshot" in refused.message
    Path(setup.path).mkdir(parents=True)  # a directory alone is no snapshot of ours
    assert node.service.take(imported, UID).outcome.kind == "refused"
    Path(setup.path).rmdir()
    assert node.service.take(setup, UID).ok
    confirmed = node.service.take(imported, "uid-2")
    assert confirmed.outcome.kind == "already" and confirmed.record is not None
    assert confirmed.record.state == "ready"


def test_removal_only_with_a_current_permit_for_that_snapshot(node: Node) -> None:
    node.volume("pv-a")
    node.volume("pv-b")
    setup, other = node.setup("pv-a"), node.setup("pv-b", "snapcontent-other")
    assert node.service.take(setup, UID).ok and node.service.take(other, "uid-9").ok

    def remove(removal: SnapshotRemoval, stale: str | None = None) -> str:
        done = node.service.remove(
            setup, removal, content_name=CONTENT, content_uid=UID, confirm=lambda: stale
        )
        return done.outcome.kind

    assert remove(permit(setup, uid="uid-old")) == "refused"  # another content's permit
    assert remove(permit(other)) == "refused"  # forged: names the other snapshot
    assert remove(SnapshotRemoval(CONTENT, UID, setup.snapshot_id, other.path)) == "refused"
    assert remove(permit(setup), stale="the content is gone") == "refused"
    assert Path(setup.path, "data.txt").is_file() and Path(other.path, "data.txt").is_file()
    assert remove(permit(setup)) == "done"
    assert not Path(setup.path).exists() and Path(other.path, "data.txt").is_file()
    assert not Path(owner_marker_path(setup.base_path, setup.path)).exists()
    record = node.service.record(setup.snapshot_id)
    assert record is not None and record.state == "removed"
    assert remove(permit(setup)) == "already"
    # Removed means removed: a late setup does not bring it back.
    assert node.service.take(setup, UID).outcome.kind == "refused"


def test_removal_refuses_a_place_another_owner_marked(node: Node) -> None:
    node.volume("pv-a")
    setup = node.setup("pv-a")
    assert node.service.take(setup, UID).ok
    Path(owner_marker_path(setup.base_path, setup.path)).write_text("pvc-someone\n")
    done = node.service.remove(
        setup, permit(setup), content_name=CONTENT, content_uid=UID, confirm=lambda: None
    )
    assert done.outcome.kind == "refused" and "pvc-someone" in done.message
    assert Path(setup.path, "data.txt").is_file()
    assert (node.base / OWNERS_DIR).is_dir()


@pytest.fixture
def btrfs_node(tmp_path: Path, btrfs: Path) -> Iterator[Node]:  # noqa: F811
    yield Node(tmp_path, btrfs)


def test_a_btrfs_subvolume_gets_a_read_only_snapshot_and_loses_it_with_its_permit(
    btrfs_node: Node,
) -> None:
    node = btrfs_node
    (node.base / "ns").mkdir()
    parent = btrfs_ioctl.open_directory(str(node.base / "ns"))
    try:
        btrfs_ioctl.create_subvolume(parent, "pv-a")
    finally:
        os.close(parent)
    source = node.base / "ns" / "pv-a"
    (source / "data.txt").write_text("on btrfs")
    node.state.write("pv-a", VolumeRecord("set-up", str(source)))
    setup = node.setup("pv-a")
    taken = node.service.take(setup, UID)
    assert taken.outcome.kind == "done", taken.message
    assert taken.record is not None and taken.record.kind == "btrfs"
    snap = Path(setup.path)
    assert snap.stat().st_ino == 256 and (snap / "data.txt").read_text() == "on btrfs"
    with pytest.raises(OSError) as refused:
        (snap / "new").write_text("x")
    assert refused.value.errno == errno.EROFS
    (source / "data.txt").write_text("changed after")
    assert (snap / "data.txt").read_text() == "on btrfs"
    done = node.service.remove(
        setup, permit(setup), content_name=CONTENT, content_uid=UID, confirm=lambda: None
    )
    assert done.outcome.kind == "done", done.message
    assert not snap.exists() and (source / "data.txt").is_file()


class _NoPermits:
    def for_snapshot(self, snapshot: str) -> SnapshotPermit | None:
        return None


class _Sources:
    def __init__(self, node: Node) -> None:
        self.node = node

    def find(self, volume_id: str) -> SourceVolume | None:
        path = self.node.base / "ns" / volume_id
        return SourceVolume(volume_id, str(path), str(self.node.base), 1 << 20)


def test_delete_snapshot_over_csi_without_the_gates_permit_removes_nothing(node: Node) -> None:
    node.volume("pv-a")
    rpcs = SnapshotRpcs(node.service, _Sources(node), _NoPermits())
    made = rpcs.create_snapshot(
        csi_pb2.CreateSnapshotRequest(name="snap-1", source_volume_id="pv-a")
    ).snapshot
    assert made.ready_to_use and made.snapshot_id == f"v1/n1/{snapshot_id('snap-1')}"
    with pytest.raises(CsiError) as refused:
        rpcs.delete_snapshot(csi_pb2.DeleteSnapshotRequest(snapshot_id=made.snapshot_id))
    assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert Path(snapshot_path(str(node.base), snapshot_id("snap-1")), "data.txt").is_file()
    # Handles of another node or not ours at all name nothing here: deleted, as far as we know.
    for other in (f"v1/n2/{snapshot_id('snap-1')}", "/etc/passwd"):
        rpcs.delete_snapshot(csi_pb2.DeleteSnapshotRequest(snapshot_id=other))
    assert Path(snapshot_path(str(node.base), snapshot_id("snap-1")), "data.txt").is_file()


@pytest.fixture
def small_node(tmp_path: Path) -> Iterator[Node]:
    """A node whose base path is a 2 MiB tmpfs."""
    base = tmp_path / "small"
    base.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(base)], check=True)
    try:
        yield Node(tmp_path, base)
    finally:
        subprocess.run(["umount", str(base)], check=True)


def test_no_space_fails_in_plain_words_leaves_nothing_and_is_retried(small_node: Node) -> None:
    node = small_node
    source = node.volume("pv-a")
    (source / "big").write_bytes(b"x" * (1200 << 10))
    setup = node.setup("pv-a")
    failed = node.service.take(setup, UID)
    assert failed.outcome.kind == "failed", failed.message
    assert "no space left in base path" in failed.message, failed.message
    assert not Path(setup.path).exists()
    record = node.service.record(setup.snapshot_id)
    assert record is not None and record.state == "failed"
    (source / "big").unlink()
    assert node.service.take(setup, UID).outcome.kind == "done"
    assert (Path(setup.path) / "data.txt").is_file()


def test_a_snapshot_taken_restores_and_shares_its_lock_with_restores(tmp_path: Path) -> None:
    """The service's record and lock are the ones the restore (snapshot_restore.py) reads and
    takes: a volume set up by the executor, snapshotted, restored into a new volume; once
    removed with its permit, a restore of it is refused."""
    stand = Stand(tmp_path.resolve(), counting_setup(tmp_path.resolve()))
    executor = stand.executor()
    source = VolumeSetup(str(stand.base), str(stand.base / "ns" / "src"), "Filesystem", 1 << 20)
    assert executor.set_up("pvc-src", source.path, source).ok
    Path(source.path, "data.txt").write_text("restore me")
    state = VolumeState(stand.state_dir)
    service = SnapshotService("n1", [str(stand.base)], state, timeout_seconds=30)
    sid = snapshot_id(CONTENT)
    setup = SnapshotSetup(
        sid, "pvc-src", source.path, str(stand.base), snapshot_path(str(stand.base), sid),
        1 << 20, "Filesystem",
    )  # fmt: skip
    assert service.take(setup, UID).outcome.kind == "done"
    with (
        service.store.locked(sid, 1),
        pytest.raises(VolumeBusyError),
        state.locked(snapshot_lock_name(sid), 0),
    ):
        pass
    restore_source = NodeRestoreSource(sid, setup.path, str(stand.base), CONTENT)
    restored = VolumeSetup(
        str(stand.base), str(stand.base / "ns" / "new"), "Filesystem", 1 << 20,
        restore_source=restore_source,
    )  # fmt: skip
    assert executor.set_up("pvc-new", restored.path, restored).ok
    assert Path(restored.path, "data.txt").read_text() == "restore me"
    removed = service.remove(
        setup, permit(setup), content_name=CONTENT, content_uid=UID, confirm=lambda: None
    )
    assert removed.outcome.kind == "done"
    again = dataclasses.replace(restored, path=str(stand.base / "ns" / "late"))
    late = executor.set_up("pvc-late", again.path, again)
    assert not late.ok and "deleted" in late.message
