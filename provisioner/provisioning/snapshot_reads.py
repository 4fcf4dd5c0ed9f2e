"""What a restore reads from the API server before it is decided (snapshot_sources decides it):
the claim's VolumeSnapshot, its bound content and, across namespaces, the ReferenceGrants there.

Why reads on demand and no informer: restores are rare, and an informer of every VolumeSnapshot
and ReferenceGrant in the cluster would cost memory and watches for them all. The reads happen
before the path book's lock is taken (the decision under it is pure), and only for a claim that
is a restore of ours (`restores_here`): a claim of any other class, or with any other data
source, costs nothing.
"""

from __future__ import annotations

from typing import Any

from provisioner.configuration.class_parameters import CSI_VOLUME_TYPE
from provisioner.configuration.class_rules import ClassRules
from provisioner.kube.client import KubeClients
from provisioner.objects.records import ClaimRecord
from provisioner.objects.snapshot_handoff import SNAPSHOT_GROUP
from provisioner.provisioning.actions import read_or_none
from provisioner.provisioning.snapshot_sources import GRANT_GROUP, SnapshotLookup


def restores_here(claim: ClaimRecord, rules: ClassRules) -> bool:
    """Whether the claim is a restore we serve: a VolumeSnapshot source in a CSI class (any
    other class leaves it, as before, to whoever fills VolumeSnapshots there)."""
    source = claim.data_source
    return (
        source is not None
        and source.is_volume_snapshot
        and rules.default_volume_type == CSI_VOLUME_TYPE
    )


class SnapshotReads:
    def __init__(self, clients: KubeClients, csi_driver: str) -> None:
        self._clients = clients
        self._csi_driver = csi_driver

    def lookup(self, claim: ClaimRecord, rules: ClassRules) -> SnapshotLookup | None:
        """What the restore is decided on (snapshot_sources.place_restore); None for a claim
        that is no restore of ours: nothing is read for it. A read that fails (not a 404)
        raises ActionFailed: the key is retried."""
        source = claim.data_source
        if source is None or not restores_here(claim, rules):
            return None
        namespace = source.namespace or claim.namespace
        snapshot = read_or_none(
            self._clients,
            f"/apis/{SNAPSHOT_GROUP}/v1/namespaces/{namespace}/volumesnapshots/{source.name}",
        )
        content = None
        bound = ((snapshot or {}).get("status") or {}).get("boundVolumeSnapshotContentName")
        if isinstance(bound, str) and bound:
            content = read_or_none(
                self._clients, f"/apis/{SNAPSHOT_GROUP}/v1/volumesnapshotcontents/{bound}"
            )
        grants: list[dict[str, Any]] = []
        if namespace != claim.namespace:
            listed = read_or_none(
                self._clients,
                f"/apis/{GRANT_GROUP}/v1beta1/namespaces/{namespace}/referencegrants",
            )
            # No ReferenceGrant CRD (404) means no grant: the restore is refused for that.
            grants = [item for item in (listed or {}).get("items") or [] if isinstance(item, dict)]
        return SnapshotLookup(self._csi_driver, snapshot, content, tuple(grants))
