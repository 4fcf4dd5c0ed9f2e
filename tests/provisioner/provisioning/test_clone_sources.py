"""Clones waiting for their source: a source that binds wakes exactly the clones naming it."""

from __future__ import annotations

import msgspec

from provisioner.objects.records import ClaimRecord, ClaimReference, DataSource, VolumeRecord
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


def test_a_source_volume_seen_after_its_binding_wakes_the_clones_again() -> None:
    """The source's binding can reach the cache before its PV does: the clone looked at then
    was refused ("bound to volume ..., which is not found") and waited for a resync."""
    waits = CloneWaits()
    waits.update(None, CLONE)
    volume = VolumeRecord(name="pvc-u-src", claim_ref=ClaimReference("ns", "src", "u-src"))
    assert waits.volume_seen(None, volume) == {"u-clone"}
    assert waits.volume_seen(volume, msgspec.structs.replace(volume, phase="Bound")) == set()
    unbound = VolumeRecord(name="pvc-other")
    assert waits.volume_seen(None, unbound) == set()
