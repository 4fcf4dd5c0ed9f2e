"""The local-path watches without a cluster: which keys an informer event queues, and what the
provisioner hears of it on the way. The provisioner is a recording fake; the informers are never
started."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any, cast

import msgspec

from provisioner.loop.controller import Key, Watch, WorkQueue
from provisioner.objects.records import ClaimRecord, ClaimReference, NodeRecord, VolumeRecord
from provisioner.objects.snapshot_handoff import SNAPSHOT_SETUP_ANNOTATION
from provisioner.provisioning.annotations import PROVISIONED_BY, STORAGE_PROVISIONER
from provisioner.provisioning.local_path_watches import LocalPathWatches, watched_caches
from provisioner.provisioning.snapshot_decisions import ContentFacts
from provisioner.provisioning.snapshots import contents_informer
from provisioner.provisioning.work_keys import CLAIM, EXPANSION, HELPER_POD, SNAPSHOT, VOLUME

NAME = "p"
OURS = {PROVISIONED_BY: NAME}


class RecordingProvisioner:
    """What the watches tell the provisioner."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, Any]] = []

    def volume_seen(self, volume: VolumeRecord) -> None:
        self.heard.append(("volume_seen", volume.name))

    def volume_gone(self, name: str) -> None:
        self.heard.append(("volume_gone", name))

    def poke_capacity(self) -> None:
        self.heard.append(("poke_capacity", None))

    def node_gone(self, name: str) -> None:
        self.heard.append(("node_gone", name))

    def node_back(self, name: str) -> None:
        self.heard.append(("node_back", name))


def watches_of() -> tuple[LocalPathWatches, RecordingProvisioner, WorkQueue[Key]]:
    clients = cast(Any, SimpleNamespace(list_function=lambda path: None))
    provisioner = RecordingProvisioner()
    queue: WorkQueue[Key] = WorkQueue("test")
    made = LocalPathWatches(
        watched_caches(clients, helper_namespace="ns"),
        cast(Any, provisioner),
        queue,
        provisioner_name=NAME,
    )
    return made, provisioner, queue


def keys(made: LocalPathWatches, informer_name: str, key: str, old: Any, new: Any) -> list[Key]:
    """Every key the watches on the named informer queue for one event."""
    watches: list[Watch[Any]] = [w for w in made.watches() if w.informer.name == informer_name]
    assert watches, informer_name
    return [queued for watch in watches for queued in watch.on_event(key, old, new)]


def claim(**fields: Any) -> ClaimRecord:
    return ClaimRecord(uid="u-1", namespace="ns", name="c", **fields)


def test_an_unbound_claim_of_ours_is_queued_and_one_that_went_or_is_not_ours_is_not() -> None:
    made, _, _ = watches_of()
    mine = claim(annotations={STORAGE_PROVISIONER: NAME})
    assert keys(made, "claims", "u-1", None, mine) == [(CLAIM, "u-1")]
    assert keys(made, "claims", "u-1", mine, None) == []
    assert keys(made, "claims", "u-1", None, claim(annotations={STORAGE_PROVISIONER: "x"})) == []


def test_a_bound_claim_that_asks_to_grow_gets_an_expansion_key_and_one_that_does_not_none() -> None:
    """Resizing has a key of its own: a claim's key is only ever its way to a PV."""
    made, _, _ = watches_of()
    volume = VolumeRecord("pvc-1", annotations=OURS, capacity="1Gi")
    # The informer's own store, as its watch would fill it (no handler is registered yet).
    made._caches.volumes._store("pvc-1", volume)
    grows = claim(volume_name="pvc-1", status_capacity="1Gi", requested_storage="2Gi")
    stays = claim(
        volume_name="pvc-1", status_capacity="1Gi", requested_storage="1Gi", allocated_storage="1Gi"
    )
    assert keys(made, "claims", "u-1", None, grows) == [(EXPANSION, "u-1")]
    assert keys(made, "claims", "u-1", None, stays) == []


def test_a_claim_without_allocated_resources_gets_a_key_except_as_it_binds() -> None:
    """One grown by an earlier version: at the first list, a resync or a later change. Not
    as it binds: a burst of new claims is not slowed by a status write each."""
    made, _, _ = watches_of()
    made._caches.volumes._store("pvc-1", VolumeRecord("pvc-1", annotations=OURS, capacity="2Gi"))
    binding = claim(volume_name="pvc-1", requested_storage="2Gi")
    bound = claim(volume_name="pvc-1", status_capacity="2Gi", requested_storage="2Gi")
    assert keys(made, "claims", "u-1", binding, bound) == []
    assert keys(made, "claims", "u-1", None, bound) == [(EXPANSION, "u-1")]
    assert keys(made, "claims", "u-1", bound, bound) == [(EXPANSION, "u-1")]
    left = msgspec.structs.replace(
        bound, allocated_storage="2Gi", resize_status="ControllerResizeInProgress"
    )
    assert keys(made, "claims", "u-1", left, left) == [(EXPANSION, "u-1")]
    # Nor as it goes: a release of many claims is not slowed by a status write each.
    going = msgspec.structs.replace(bound, being_deleted=True)
    assert keys(made, "claims", "u-1", bound, going) == []
    assert keys(made, "claims", "u-1", None, going) == []


def test_a_volumes_first_look_queues_its_claim_when_that_may_expand() -> None:
    """The claims are listed first, before their volumes are in the cache: a claim that asks
    to grow, or lags in its status, is found from its volume's first look (or a resync)."""
    made, _, _ = watches_of()
    lagging = claim(volume_name="pvc-1", status_capacity="2Gi", requested_storage="2Gi")
    made._caches.claims._store("u-1", lagging)
    ref = ClaimReference("ns", "c", "u-1")
    volume = VolumeRecord("pvc-1", annotations=OURS, claim_ref=ref, capacity="2Gi")
    assert keys(made, "volumes", "pvc-1", None, volume) == [(VOLUME, "pvc-1"), (EXPANSION, "u-1")]
    assert keys(made, "volumes", "pvc-1", volume, volume) == [(VOLUME, "pvc-1"), (EXPANSION, "u-1")]
    bound = msgspec.structs.replace(volume, phase="Bound")
    assert keys(made, "volumes", "pvc-1", volume, bound) == [(VOLUME, "pvc-1")]
    made._caches.claims._store("u-1", msgspec.structs.replace(lagging, allocated_storage="2Gi"))
    assert keys(made, "volumes", "pvc-1", None, volume) == [(VOLUME, "pvc-1")]


def test_a_volume_of_ours_is_recorded_and_queued_and_its_going_frees_its_path() -> None:
    made, provisioner, _ = watches_of()
    volume = VolumeRecord("pvc-1", annotations=OURS, capacity="1Gi")
    assert keys(made, "volumes", "pvc-1", None, volume) == [(VOLUME, "pvc-1")]
    assert keys(made, "volumes", "pvc-1", volume, None) == []
    assert provisioner.heard == [
        ("volume_seen", "pvc-1"),
        ("poke_capacity", None),
        ("volume_gone", "pvc-1"),
        ("poke_capacity", None),
    ]
    assert keys(made, "volumes", "other", None, VolumeRecord("other")) == []


def test_a_finished_helper_pod_is_queued_for_a_worker_to_collect() -> None:
    made, _, _ = watches_of()
    pod = {"metadata": {"name": "h"}, "status": {"phase": "Succeeded"}}
    assert keys(made, "helper-pods", "ns/h", None, pod) == [(HELPER_POD, "ns/h")]
    running = {"metadata": {"name": "h"}, "status": {"phase": "Running"}}
    assert keys(made, "helper-pods", "ns/h", None, running) == []


def test_a_node_that_goes_and_comes_back_is_told_to_the_provisioner() -> None:
    """What a class's nodeLossGracePeriod is counted from (and stopped by)."""
    made, provisioner, _ = watches_of()
    node = NodeRecord(name="n1")
    keys(made, "nodes", "n1", node, None)
    keys(made, "nodes", "n1", None, node)
    told = [heard for heard in provisioner.heard if heard[0].startswith("node_")]
    assert told == [("node_gone", "n1"), ("node_back", "n1")]


def test_the_sweeping_watches_are_the_volumes_and_the_nodes() -> None:
    """Their first list and resyncs queue behind other keys (`Watch.sweep_last`): a leader's
    sweep over its bound volumes must not hold up a claim."""
    made, _, _ = watches_of()
    assert {w.informer.name for w in made.watches() if w.sweep_last} == {"volumes", "nodes"}


def test_after_a_config_change_pending_claims_come_before_the_sweep_of_our_volumes() -> None:
    made, _, queue = watches_of()
    for name in ("pvc-1", "pvc-2"):
        made._caches.volumes._store(name, VolumeRecord(name, annotations=OURS))
    made._caches.claims._store("u-1", claim(annotations={STORAGE_PROVISIONER: NAME}))
    made.config_changed()
    handed_out = []
    while (key := queue.get(timeout=0)) is not None:
        handed_out.append(key)
        queue.done(key)
    assert handed_out == [(CLAIM, "u-1"), (VOLUME, "pvc-1"), (VOLUME, "pvc-2")]


class RecordingSnapshots:
    """What the contents watch tells the snapshot side."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, str]] = []

    def content_seen(self, content: ContentFacts) -> None:
        self.heard.append(("content_seen", content.name))

    def content_gone(self, name: str) -> None:
        self.heard.append(("content_gone", name))


def test_a_content_not_yet_admitted_or_being_deleted_is_queued_and_every_one_is_booked() -> None:
    clients = cast(Any, SimpleNamespace(list_function=lambda path: None))
    provisioner = RecordingProvisioner()
    snapshots = RecordingSnapshots()
    cast(Any, provisioner).snapshots = snapshots
    made = LocalPathWatches(
        watched_caches(clients, helper_namespace="ns"),
        cast(Any, provisioner),
        WorkQueue("test"),
        provisioner_name=NAME,
        contents=contents_informer(clients, driver="d", resync_period=0),
    )
    new = ContentFacts("snapcontent-1", "u", "d", "Delete", "pvc-1", None)
    admitted = dataclasses.replace(new, annotations={SNAPSHOT_SETUP_ANNOTATION: "{}"})
    deleting = dataclasses.replace(admitted, being_deleted=True)
    assert keys(made, "snapshot-contents", "snapcontent-1", None, new) == [
        (SNAPSHOT, "snapcontent-1")
    ]
    assert keys(made, "snapshot-contents", "snapcontent-1", new, admitted) == []
    assert keys(made, "snapshot-contents", "snapcontent-1", admitted, deleting) == [
        (SNAPSHOT, "snapcontent-1")
    ]
    assert keys(made, "snapshot-contents", "snapcontent-1", deleting, None) == []
    assert snapshots.heard == [
        ("content_seen", "snapcontent-1"),
        ("content_seen", "snapcontent-1"),
        ("content_seen", "snapcontent-1"),
        ("content_gone", "snapcontent-1"),
    ]


def test_without_the_snapshot_api_no_contents_are_watched() -> None:
    made, _, _ = watches_of()
    assert all(w.informer.name != "snapshot-contents" for w in made.watches())
