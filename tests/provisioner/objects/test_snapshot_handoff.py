"""The snapshot contract between the controller and the node plugin: ids, handles, places and
the two annotations' JSON, read strictly (a handle is never a path)."""

from __future__ import annotations

import pytest

from provisioner.objects.node_handoff import (
    HandoffError,
    NodeRestoreSource,
    VolumeSetup,
)
from provisioner.objects.snapshot_handoff import (
    SnapshotRemoval,
    SnapshotSetup,
    parse_snapshot_handle,
    snapshot_handle,
    snapshot_id,
    snapshot_owner,
    snapshot_path,
    snapshot_removal_refusal,
)

ID = snapshot_id("snapcontent-1234")


def _setup(**changes: object) -> SnapshotSetup:
    fields: dict[str, object] = {
        "snapshot_id": ID,
        "source_volume": "pvc-a",
        "source_path": "/opt/lps/pvc-a",
        "base_path": "/opt/lps",
        "path": snapshot_path("/opt/lps", ID),
        "size_bytes": 1 << 30,
        "volume_mode": "Filesystem",
    }
    fields.update(changes)
    return SnapshotSetup(**fields)  # type: ignore[arg-type]


def test_an_id_is_stable_per_name_and_distinct_across_names() -> None:
    assert snapshot_id("snapcontent-1234") == ID
    assert len(ID) == 32
    assert snapshot_id("snapcontent-1235") != ID


def test_a_handle_round_trips_and_stays_within_the_csi_limit() -> None:
    handle = snapshot_handle("n" * 253, ID)
    assert len(handle) <= 128
    node, found = parse_snapshot_handle(handle) or ("", "")
    assert found == ID
    assert node.startswith("h-")
    assert parse_snapshot_handle(snapshot_handle("node-1", ID)) == ("node-1", ID)


@pytest.mark.parametrize(
    "handle",
    [
        f"v1/node-1/../../etc/{ID}",
        f"v1/node-1/{ID}/x",
        f"/opt/lps/.local-path-storage-snapshots/{ID}",
        f"v2/node-1/{ID}",
        "v1/node-1/" + "A" * 32,
        f"v1//{ID}",
    ],
)
def test_a_handle_that_is_not_ours_reads_as_none(handle: str) -> None:
    assert parse_snapshot_handle(handle) is None


def test_a_snapshot_lives_in_its_base_paths_area() -> None:
    assert snapshot_path("/opt/lps", ID) == f"/opt/lps/.local-path-storage-snapshots/{ID}"
    with pytest.raises(ValueError):
        snapshot_path("/opt/lps", "../x")
    assert snapshot_owner(ID) == f"snapshot:{ID}"


def test_a_setup_round_trips() -> None:
    setup = _setup()
    assert SnapshotSetup.from_json(setup.to_json()) == setup


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"path": "/opt/lps/pvc-b"}, "its id's place"),
        ({"snapshot_id": "x" * 32}, "not an id"),
        ({"source_volume": ""}, "no source volume"),
    ],
)
def test_a_setup_that_does_not_hold_together_is_refused(
    changes: dict[str, object], said: str
) -> None:
    with pytest.raises(HandoffError, match=said):
        SnapshotSetup.from_json(_setup(**changes).to_json())


def test_an_imported_setup_needs_no_source() -> None:
    setup = _setup(source_volume="", source_path="", imported=True)
    assert SnapshotSetup.from_json(setup.to_json()).imported


def test_a_removal_permit_holds_only_for_its_own_content_and_place() -> None:
    setup = _setup()
    permit = SnapshotRemoval("snapcontent-1234", "uid-1", ID, setup.path)
    assert SnapshotRemoval.from_json(permit.to_json()) == permit
    ok = {"content_name": "snapcontent-1234", "content_uid": "uid-1"}
    assert snapshot_removal_refusal(permit, setup, **ok) is None
    remade = {"content_name": "snapcontent-1234", "content_uid": "uid-2"}
    assert snapshot_removal_refusal(permit, setup, **remade) is not None
    elsewhere = SnapshotRemoval("snapcontent-1234", "uid-1", ID, "/opt/lps/pvc-a")
    assert "covers" in (snapshot_removal_refusal(elsewhere, setup, **ok) or "")


def test_a_volume_setup_carries_a_restore_source_but_never_with_a_clone_source() -> None:
    restore = NodeRestoreSource(ID, snapshot_path("/opt/lps", ID), "/opt/lps", "snapcontent-1")
    setup = VolumeSetup("/opt/lps", "/opt/lps/pvc-b", "Filesystem", 1 << 30, restore_source=restore)
    assert VolumeSetup.from_json(setup.to_json()) == setup
    both = setup.to_json().replace(
        '"clone_source":null',
        '"clone_source":{"volume_name":"a","path":"/p","base_path":"/b","claim_uid":"u"}',
    )
    with pytest.raises(HandoffError, match="both"):
        VolumeSetup.from_json(both)
