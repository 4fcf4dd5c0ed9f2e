"""Clones waiting for their source: a source that binds wakes exactly the clones naming it."""

from __future__ import annotations

import msgspec

from provisioner.objects.records import ClaimRecord, DataSource
from provisioner.provisioning.clone_sources import CloneWaits

SOURCE = ClaimRecord(uid="u-src", namespace="ns", name="src")
CLONE = ClaimRecord(
    uid="u-clone",
    namespace="ns",
    name="copy",
    data_source=DataSource("", "PersistentVolumeClaim", "src"),
)


def test_a_source_that_binds_wakes_the_clones_naming_it_once() -> None:
    waits = CloneWaits()
    assert waits.update(None, CLONE) == set()
    other = msgspec.structs.replace(CLONE, uid="u-other", namespace="elsewhere")
    snapshot = msgspec.structs.replace(
        CLONE,
        uid="u-snap",
        data_source=DataSource("snapshot.storage.k8s.io", "VolumeSnapshot", "src"),
    )
    waits.update(None, other)
    waits.update(None, snapshot)
    assert waits.update(None, SOURCE) == set()
    bound = msgspec.structs.replace(SOURCE, volume_name="pvc-u-src")
    assert waits.update(SOURCE, bound) == {"u-clone"}
    # Only the binding wakes them, not every later change of the bound source.
    assert waits.update(bound, msgspec.structs.replace(bound, resource_version="2")) == set()


def test_a_clone_that_bound_or_went_is_no_longer_woken() -> None:
    waits = CloneWaits()
    waits.update(None, CLONE)
    waits.update(CLONE, msgspec.structs.replace(CLONE, volume_name="pvc-u-clone"))
    second = msgspec.structs.replace(CLONE, uid="u-second")
    waits.update(None, second)
    waits.update(second, None)
    assert waits.update(SOURCE, msgspec.structs.replace(SOURCE, volume_name="pvc-u-src")) == set()
