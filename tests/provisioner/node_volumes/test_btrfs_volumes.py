"""CSI volumes on a btrfs base path, made by the node's executor for real: the fixed scripts run
confined as the node plugin runs them, on a fresh loop-mounted btrfs per test (quota groups off,
as mkfs leaves them), with the `btrfs` tool as the oracle. Needs root, the kernel's btrfs and
btrfs-progs."""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.csi.volume_usage import filesystem_space, limited_usage
from provisioner.node_volumes.clone_copy import is_copied
from provisioner.node_volumes.snapshot_service import SnapshotService
from provisioner.node_volumes.volume_executor import Outcome, VolumeExecutor
from provisioner.node_volumes.volume_layout import SUBVOLUME_TOP_INODE, FilesystemKinds
from provisioner.node_volumes.volume_records import VolumeRecord
from provisioner.node_volumes.volume_state import VolumeState
from provisioner.objects.node_handoff import NodeCloneSource, NodeRestoreSource, VolumeSetup
from provisioner.objects.snapshot_handoff import SnapshotSetup, snapshot_id, snapshot_path
from tests.provisioner.node_volumes.test_btrfs_ioctl import (
    IMAGE_BYTES,
    qgroup_show,
    release_loop_devices,
    run,
    write_until_refused,
)
from tests.provisioner.node_volumes.test_volume_executor import (
    Stand,
    counting_setup,
    permit,
    tear_down,
)

pytestmark = pytest.mark.csi  # the CSI node plugin's root-only tests run with this mark

MiB = 1 << 20


@pytest.fixture
def stand(tmp_path: Path) -> Iterator[Stand]:
    """A node whose one base path is the top of a fresh btrfs."""
    root = tmp_path.resolve()
    stand = Stand(root, counting_setup(root))
    image = root / "btrfs.img"
    with image.open("wb") as sparse:
        sparse.truncate(IMAGE_BYTES)
    run("mkfs.btrfs", "-q", str(image))
    run("mount", "-o", "loop", str(image), str(stand.base))
    try:
        yield stand
    finally:
        subprocess.run(["umount", str(stand.base)], check=True)
        release_loop_devices(image)


def volume(stand: Stand, relative: str, size: int, **changes: object) -> VolumeSetup:
    return VolumeSetup(str(stand.base), str(stand.base / relative), "Filesystem", size, **changes)  # type: ignore[arg-type]


def limit_of(path: str) -> int | None:
    run("btrfs", "filesystem", "sync", path)
    subvolume = run("btrfs", "subvolume", "show", path)
    line = next(row for row in subvolume.splitlines() if "Subvolume ID:" in row)
    return qgroup_show(Path(path))[f"0/{line.split()[-1]}"][1]


def test_a_volume_is_a_subvolume_held_to_its_size_quotas_turned_on_once(stand: Stand) -> None:
    executor = stand.executor()
    first = volume(stand, "ns/claim", 8 * MiB)
    made = executor.set_up("pvc-1", first.path, first)
    assert made.kind == "done"
    assert "quota groups were off" in made.notice and str(stand.base) in made.notice
    assert Path(first.path).stat().st_ino == SUBVOLUME_TOP_INODE
    assert limit_of(first.path) == 8 * MiB
    # The marker says the volume made it (its teardown's made_only check passes), not reused.
    assert stand.marker(first.path).read_text() == "pvc-1\n"
    assert stand.setup_runs() == 1
    # The parent a pathPattern gives is a plain directory, made by `prepare`.
    assert (stand.base / "ns").stat().st_ino != SUBVOLUME_TOP_INODE
    second = volume(stand, "ns/other", 4 * MiB)
    assert executor.set_up("pvc-2", second.path, second) == Outcome("done")  # no notice again
    assert limit_of(second.path) == 4 * MiB
    assert executor.set_up("pvc-1", first.path, first) == Outcome("already")


def test_a_tenant_past_its_size_gets_edquot_while_a_neighbour_writes_on(stand: Stand) -> None:
    executor = stand.executor()
    tenant, neighbour = volume(stand, "tenant", 8 * MiB), volume(stand, "neighbour", 8 * MiB)
    assert executor.set_up("pvc-t", tenant.path, tenant).ok
    assert executor.set_up("pvc-n", neighbour.path, neighbour).ok
    written, refused = write_until_refused(Path(tenant.path) / "fill", 32 * MiB)
    assert refused is not None and refused.errno == errno.EDQUOT
    assert written <= 8 * MiB
    written, refused = write_until_refused(Path(neighbour.path) / "fill", 4 * MiB)
    assert (written, refused) == (4 * MiB, None)


def test_stats_read_the_qgroup(stand: Stand) -> None:
    executor = stand.executor()
    setup = volume(stand, "claim", 16 * MiB)
    assert executor.set_up("pvc-1", setup.path, setup).ok
    (Path(setup.path) / "data").write_bytes(b"x" * (3 * MiB))
    run("btrfs", "filesystem", "sync", setup.path)
    usage = limited_usage(setup.path)
    assert usage is not None
    assert usage.limit == 16 * MiB
    assert 3 * MiB <= usage.used < 4 * MiB
    space = filesystem_space(setup.path)
    assert usage.available(space) == min(16 * MiB - usage.used, space.bytes_available)
    # A plain directory on the same btrfs has no limit of its own: measured as before.
    (stand.base / "plain").mkdir()
    assert limited_usage(str(stand.base / "plain")) is None


def test_expansion_raises_the_limit_once(stand: Stand) -> None:
    executor = stand.executor()
    setup = volume(stand, "claim", 8 * MiB)
    assert executor.set_up("pvc-1", setup.path, setup).ok
    assert executor.apply_size("pvc-1", setup, 8 * MiB) == Outcome("already")
    assert executor.apply_size("pvc-1", setup, 24 * MiB) == Outcome("done")
    assert limit_of(setup.path) == 24 * MiB
    assert executor.state.read("pvc-1") == VolumeRecord("set-up", setup.path, 24 * MiB)
    assert executor.apply_size("pvc-1", setup, 24 * MiB) == Outcome("already")
    written, refused = write_until_refused(Path(setup.path) / "fill", 16 * MiB)
    assert (written, refused) == (16 * MiB, None)  # past the old limit
    not_set_up = volume(stand, "other", 8 * MiB)
    assert executor.apply_size("pvc-2", not_set_up, 16 * MiB).kind == "busy"


def test_a_clone_is_a_snapshot_of_its_source_with_its_own_limit(stand: Stand) -> None:
    executor = stand.executor()
    source = volume(stand, "ns/src", 8 * MiB)
    assert executor.set_up("pvc-src", source.path, source).ok
    (Path(source.path) / "data").write_text("the tenant's data")
    clone = volume(
        stand,
        "ns/clone",
        32 * MiB,
        clone_source=NodeCloneSource("pvc-src", source.path, source.base_path, "uid-src"),
    )
    assert executor.set_up("pvc-clone", clone.path, clone) == Outcome("done")
    shown = run("btrfs", "subvolume", "show", clone.path)
    assert "Parent UUID:" in shown and "Parent UUID: \t\t-" not in shown  # a snapshot
    assert (Path(clone.path) / "data").read_text() == "the tenant's data"
    assert limit_of(clone.path) == 32 * MiB  # its own, not the source's 8 MiB
    assert limit_of(source.path) == 8 * MiB
    assert is_copied(clone.base_path, clone.path, "pvc-clone")
    assert stand.marker(clone.path).read_text() == "pvc-clone\n"
    (Path(clone.path) / "data").write_text("the clone's own")
    assert (Path(source.path) / "data").read_text() == "the tenant's data"


def test_a_restore_of_a_btrfs_snapshot_is_a_writable_snapshot_with_its_own_limit(
    stand: Stand,
) -> None:
    """The snapshot service's read-only snapshot, restored: no copy, a snapshot of it as the
    new volume's subvolume, held to the new volume's size; the tenant's writes to either side
    never show on the other, and the snapshot stays as it was taken."""
    executor = stand.executor()
    source = volume(stand, "ns/src", 8 * MiB)
    assert executor.set_up("pvc-src", source.path, source).ok
    (Path(source.path) / "data").write_text("as it was at the snapshot")
    sid = snapshot_id("snapcontent-1")
    taken = SnapshotSetup(
        sid, "pvc-src", source.path, str(stand.base), snapshot_path(str(stand.base), sid),
        8 * MiB, "Filesystem",
    )  # fmt: skip
    service = SnapshotService(
        "n1", [str(stand.base)], VolumeState(stand.state_dir), timeout_seconds=30
    )
    snapshot = service.take(taken, "uid-content")
    assert snapshot.outcome.kind == "done"
    assert snapshot.record is not None and snapshot.record.kind == "btrfs"
    (Path(source.path) / "data").write_text("written after the snapshot")
    restored = volume(
        stand,
        "ns/restored",
        32 * MiB,
        restore_source=NodeRestoreSource(sid, taken.path, str(stand.base), "snapcontent-1"),
    )
    made = executor.set_up("pvc-restored", restored.path, restored)
    assert made == Outcome("done")
    shown = run("btrfs", "subvolume", "show", restored.path)
    assert "Parent UUID:" in shown and "Parent UUID: \t\t-" not in shown  # a snapshot
    assert run("btrfs", "property", "get", restored.path, "ro").strip() == "ro=false"
    assert (Path(restored.path) / "data").read_text() == "as it was at the snapshot"
    assert limit_of(restored.path) == 32 * MiB
    assert is_copied(restored.base_path, restored.path, "pvc-restored")
    assert stand.marker(restored.path).read_text() == "pvc-restored\n"
    (Path(restored.path) / "data").write_text("the restore's own")
    assert (Path(taken.path) / "data").read_text() == "as it was at the snapshot"
    assert (Path(source.path) / "data").read_text() == "written after the snapshot"
    # Set up again (the node lost its record): the data written since is kept, nothing copied.
    for record in (stand.state_dir / "volumes").iterdir():
        record.unlink()
    assert executor.set_up("pvc-restored", restored.path, restored).ok
    assert (Path(restored.path) / "data").read_text() == "the restore's own"


def test_a_teardown_by_the_permit_removes_the_subvolume(stand: Stand) -> None:
    executor = stand.executor()
    setup = volume(stand, "ns/claim", 8 * MiB)
    assert executor.set_up("pvc-1", setup.path, setup).ok
    (Path(setup.path) / "data").write_text("x")
    # Another volume's permit removes nothing: the owner check is as for any directory.
    refused = tear_down(executor, setup, permit(setup.path, owner="pvc-2", volume_name="pvc-2"))
    assert refused.kind == "refused" and Path(setup.path).is_dir()
    assert tear_down(executor, setup, permit(setup.path, made_only=True)) == Outcome("done")
    assert not Path(setup.path).exists()
    assert not stand.marker(setup.path).exists()
    listed = run("btrfs", "subvolume", "list", str(stand.base))
    assert "ns/claim" not in listed


def test_a_plain_base_path_keeps_plain_directories(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    plain = Stand(root, counting_setup(root))
    assert FilesystemKinds().layout(str(plain.base)) == "directory"
    executor: VolumeExecutor = plain.executor()
    setup = plain.setup()
    assert executor.set_up("pvc-1", setup.path, setup) == Outcome("done")  # no notice
    assert limited_usage(setup.path) is None
    assert executor.apply_size("pvc-1", setup, 4 << 20) == Outcome("done")
    assert executor.state.read("pvc-1") == VolumeRecord("set-up", setup.path, 4 << 20)


def test_someone_s_directory_at_the_path_is_refused_and_left_without_a_limit(
    stand: Stand,
) -> None:
    setup = volume(stand, "ns/claim", 8 * MiB)
    Path(setup.path).mkdir(parents=True)
    (Path(setup.path) / "theirs").write_text("an earlier claim's data")
    outcome = stand.executor().set_up("pvc-1", setup.path, setup)
    assert outcome.kind == "failed" and "already exists with data" in outcome.message
    assert Path(setup.path).stat().st_ino != SUBVOLUME_TOP_INODE
    assert (Path(setup.path) / "theirs").read_text() == "an earlier claim's data"
    assert stand.setup_runs() == 0


def test_a_clone_of_a_plain_directory_is_copied_into_a_subvolume_with_its_limit(
    stand: Stand,
) -> None:
    """A source made before its base path's volumes were subvolumes has no snapshot to take."""
    executor = stand.executor()
    source = volume(stand, "ns/src", 8 * MiB)
    (stand.base / "ns").mkdir()
    Path(source.path).mkdir()
    (Path(source.path) / "data").write_text("the tenant's data")
    executor.state.write("pvc-src", VolumeRecord("set-up", source.path))
    clone = volume(
        stand,
        "ns/clone",
        16 * MiB,
        clone_source=NodeCloneSource("pvc-src", source.path, source.base_path, "uid-src"),
    )
    assert executor.set_up("pvc-clone", clone.path, clone).ok
    assert Path(clone.path).stat().st_ino == SUBVOLUME_TOP_INODE
    assert "Parent UUID: \t\t-" in run("btrfs", "subvolume", "show", clone.path)  # no snapshot
    assert (Path(clone.path) / "data").read_text() == "the tenant's data"
    assert limit_of(clone.path) == 16 * MiB
