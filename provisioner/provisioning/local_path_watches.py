"""What the local-path provisioner watches: the observation stage of a claim's journey.

`watched_caches` builds the informers (claims, volumes, classes, nodes, our helper pods) as the
`Caches` the decisions read. `LocalPathWatches` gives the loop its watches: each filters an event
cheaply on the informer's thread and says which keys to queue (an unbound claim of ours, a bound
claim that may expand, a PV of ours, a finished helper pod, the claims a class or a node change
affects, a VolumeSnapshotContent of our driver to admit or let go), telling the provisioner
what the book must record on the way (a PV or an admitted snapshot came or went, the capacity set
changed). The `LocalPathProvisioner` is the loop's `Reconciler` and `Lifecycle`;
the helper pods hear their informer themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from provisioner.capacity.storage_capacity import HOSTNAME_LABEL
from provisioner.helper_pods.pod_index import is_finished
from provisioner.helper_pods.pod_shapes import HELPER_POD_SELECTOR
from provisioner.kube.client import KubeClients
from provisioner.kube.informer import Informer, namespaced_name_key
from provisioner.kube.object_decoding import DictObjects, ObjectDecoding
from provisioner.loop.controller import (
    KeyQueue,
    Watch,
)
from provisioner.objects.api_objects import (
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    object_name,
    object_uid,
)
from provisioner.objects.node_handoff import NODE_SIZE_ANNOTATION
from provisioner.objects.records import (
    ClaimRecord,
    NodeRecord,
    StorageClassRecord,
    VolumeRecord,
    claim_record,
    node_record,
    storage_class_record,
    volume_record,
)
from provisioner.provisioning.annotations import PROVISIONED_BY
from provisioner.provisioning.caches import Caches
from provisioner.provisioning.claims import is_our_claim
from provisioner.provisioning.clone_sources import CloneWaits
from provisioner.provisioning.local_path_provisioner import LocalPathProvisioner
from provisioner.provisioning.snapshot_decisions import ContentFacts
from provisioner.provisioning.snapshots import needs_look
from provisioner.provisioning.work_keys import CLAIM, EXPANSION, HELPER_POD, SNAPSHOT, VOLUME, Key

WATCHED_INFORMERS = len(fields(Caches)) + 1
"""The informers `watched_caches` builds, and the VolumeSnapshotContents' where the snapshot API
is served (the loop stops each within its own second)."""


def watched_caches(
    clients: KubeClients, *, helper_namespace: str, resync_period: float = 900.0
) -> Caches:
    """The informers, not started: the loop starts them with the watches on them."""
    informer = functools.partial(Informer, resync_period=resync_period)
    lists = clients.list_function
    return Caches(
        claims=informer(
            "claims",
            lists("/api/v1/persistentvolumeclaims"),
            objects=ObjectDecoding(PersistentVolumeClaim),
            to_record=claim_record,
            key=object_uid,
        ),
        volumes=informer(
            "volumes",
            lists("/api/v1/persistentvolumes"),
            objects=ObjectDecoding(PersistentVolume),
            to_record=volume_record,
            key=object_name,
        ),
        classes=informer(
            "classes",
            lists("/apis/storage.k8s.io/v1/storageclasses"),
            objects=ObjectDecoding(StorageClass),
            to_record=storage_class_record,
            key=object_name,
        ),
        nodes=informer(
            "nodes",
            lists("/api/v1/nodes"),
            objects=ObjectDecoding(Node),
            to_record=node_record,
            key=object_name,
        ),
        helper_pods=informer(
            "helper-pods",
            lists(f"/api/v1/namespaces/{helper_namespace}/pods"),
            objects=DictObjects(),
            to_record=_helper_pod,
            key=namespaced_name_key,
            label_selector=HELPER_POD_SELECTOR,
        ),
    )


class LocalPathWatches:
    """The loop's watches for the local-path provisioner."""

    def __init__(
        self,
        caches: Caches,
        local_path: LocalPathProvisioner,
        queue: KeyQueue,
        *,
        provisioner_name: str,
        contents: Informer[ContentFacts] | None = None,
    ) -> None:
        """`contents`: our driver's VolumeSnapshotContents, where the snapshot API is served."""
        self._caches = caches
        self._contents = contents
        self._local_path = local_path
        self._queue = queue
        self._name = provisioner_name
        self._clone_waits = CloneWaits()

    def watches(self) -> Sequence[Watch[Any]]:
        caches = self._caches
        return [
            Watch(caches.claims, self._claim_changed),
            Watch(caches.claims, self._clone_source_changed),
            Watch(caches.volumes, self._volume_changed, sweep_last=True),
            Watch(caches.volumes, self._clone_source_volume_changed),
            Watch(caches.classes, self._class_changed),
            Watch(caches.nodes, self._node_changed, sweep_last=True),
            Watch(caches.helper_pods, self._helper_pod_changed),
            *([Watch(self._contents, self._content_changed)] if self._contents is not None else []),
        ]

    def config_changed(self) -> None:
        """After a config change every pending claim and our volumes get another look, the
        volumes (a sweep) behind the claims."""
        self._local_path.poke_capacity()
        for uid, claim in self._caches.claims.items():
            if not claim.volume_name and is_our_claim(claim, self._name):
                self._queue.add((CLAIM, uid))
        for name, volume in self._caches.volumes.items():
            if volume.annotations.get(PROVISIONED_BY) == self._name:
                self._queue.add((VOLUME, name), low_priority=True)

    # -- the watches: cheap filters, then the keys to queue ----------------------------------

    def _claim_changed(
        self, key: str, old: ClaimRecord | None, new: ClaimRecord | None
    ) -> list[Key]:
        # A claim that went needs no key: a setup of it that runs comes back when its helper
        # run ends (see `LocalPathProvisioner._settle_claim`).
        if new is None:
            return []
        if not new.volume_name and is_our_claim(new, self._name):
            return [(CLAIM, key)]
        if new.volume_name and self._may_expand(old, new):
            return [(EXPANSION, key)]
        return []

    def _clone_source_changed(
        self, key: str, old: ClaimRecord | None, new: ClaimRecord | None
    ) -> list[Key]:
        """A claim that just bound is a source its waiting clones may now be made from."""
        return [(CLAIM, uid) for uid in self._clone_waits.update(old, new)]

    def _clone_source_volume_changed(
        self, key: str, old: VolumeRecord | None, new: VolumeRecord | None
    ) -> list[Key]:
        """A volume that came bound to a source is what its waiting clones are made from."""
        return [(CLAIM, uid) for uid in self._clone_waits.volume_seen(old, new)]

    def _volume_changed(
        self, key: str, old: VolumeRecord | None, new: VolumeRecord | None
    ) -> list[Key]:
        keys: list[Key] = []
        if new is None:
            self._local_path.volume_gone(key)
        elif new.annotations.get(PROVISIONED_BY) == self._name:
            self._local_path.volume_seen(new)
            keys.append((VOLUME, key))
            if old is None or old == new or _node_size_changed(old, new):
                keys += self._claim_lagging(new)
        if _budget_changed(old, new, self._name):
            self._local_path.poke_capacity()
        return keys

    def _class_changed(
        self, key: str, old: StorageClassRecord | None, new: StorageClassRecord | None
    ) -> list[Key]:
        if any(c is not None and c.provisioner == self._name for c in (old, new)):
            self._local_path.poke_capacity()
        if new is None or new.provisioner != self._name:
            return []
        return [
            (CLAIM, uid)
            for uid, claim in self._caches.claims.items()
            if claim.storage_class_name == key and not claim.volume_name
        ]

    def _node_changed(self, key: str, old: NodeRecord | None, new: NodeRecord | None) -> list[Key]:
        if new is None:
            self._local_path.node_gone(key)
        elif old is None:
            self._local_path.node_back(key)
        if new is not None and old is not None:
            if new.labels.get(HOSTNAME_LABEL) != old.labels.get(HOSTNAME_LABEL):
                self._local_path.poke_capacity()
            return []
        self._local_path.poke_capacity()
        # A node came or went: claims waiting for it are affected, and so may be any of our
        # volumes (with a custom nodeAffinityKey the label value is not the node name).
        keys: list[Key] = [
            (CLAIM, uid)
            for uid, claim in self._caches.claims.items()
            if claim.selected_node == key and not claim.volume_name
        ]
        keys += [
            (VOLUME, name)
            for name, volume in self._caches.volumes.items()
            if volume.annotations.get(PROVISIONED_BY) == self._name
        ]
        return keys

    def _helper_pod_changed(
        self, key: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> list[Key]:
        # The helper pods hear the event themselves (`HelperPods.observe`); a finished pod is
        # a leftover unless a run of ours follows it. No API call on the informer's thread: a
        # worker collects it.
        if new is not None and is_finished(new):
            return [(HELPER_POD, key)]
        return []

    def _content_changed(
        self, key: str, old: ContentFacts | None, new: ContentFacts | None
    ) -> list[Key]:
        """A content of our driver: the book counts an admitted one (and forgets it when it
        goes); one not yet admitted, or being deleted, is a worker's to decide."""
        snapshots = self._local_path.snapshots
        if snapshots is None:
            return []
        if new is None:
            snapshots.content_gone(key)
            return []
        snapshots.content_seen(new)
        return [(SNAPSHOT, key)] if needs_look(new) else []

    def _claim_lagging(self, volume: VolumeRecord) -> list[Key]:
        """At a volume's first look or resync: its claim's key, if that claim may expand. The
        claims are listed before the volumes, so at a claim's first look its volume was not in
        the cache yet (`_may_expand` said no)."""
        ref = volume.claim_ref
        claim = self._caches.claims.get(ref.uid) if ref is not None else None
        if claim is None or claim.volume_name != volume.name:
            return []
        return [(EXPANSION, claim.uid)] if self._volume_may_grow(None, claim, volume) else []

    def _may_expand(self, old: ClaimRecord | None, claim: ClaimRecord) -> bool:
        volume = self._caches.volumes.get(claim.volume_name)
        return volume is not None and self._volume_may_grow(old, claim, volume)

    def _volume_may_grow(
        self, old: ClaimRecord | None, claim: ClaimRecord, volume: VolumeRecord
    ) -> bool:
        """Cheap filter: the claim asks for more than its PV of ours has, or its status lags (a
        claim with no status capacity yet is still being bound: not ours to act on, see
        `decide_expansion`, so a fresh bind wakes no worker). A status that lags only in its
        allocatedResources (a claim bound, or grown by an earlier version, before this one
        set them) is caught up on any later event of the claim, the first list and resyncs
        included, not on its bind: a burst of new claims is not slowed by a write each."""
        if volume.annotations.get(PROVISIONED_BY) != self._name or claim.being_deleted:
            return False
        status = claim.status_capacity
        if claim.requested_storage != volume.capacity or (
            status is not None and status != volume.capacity
        ):
            return True
        just_bound = old is not None and old.status_capacity is None
        return (
            status is not None
            and not just_bound
            and (claim.resize_status is not None or claim.allocated_storage != volume.capacity)
        )


def _node_size_changed(old: VolumeRecord, new: VolumeRecord) -> bool:
    """A CSI volume's node said it applied a new size: its claim's resize may be finished."""
    return old.annotations.get(NODE_SIZE_ANNOTATION) != new.annotations.get(NODE_SIZE_ANNOTATION)


def _budget_changed(old: VolumeRecord | None, new: VolumeRecord | None, name: str) -> bool:
    """Whether a PV event can change what our paths have free: one of ours came, went, or
    changed size."""
    ours = [v for v in (old, new) if v is not None and v.annotations.get(PROVISIONED_BY) == name]
    if not ours:
        return False
    return old is None or new is None or old.capacity != new.capacity


def _helper_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """Helper pods are few and short-lived: keep them whole (the runs read their status; the
    decoding drops managedFields)."""
    return obj
