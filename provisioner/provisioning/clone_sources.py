"""A clone's source, found in the informers' caches, and the clones that wait for one.

The claim informer is keyed by UID; a clone names its source by namespace and name, so finding
it walks the cache. Only the reconcile of an unbound clone pays for that walk. A clone refused
because its source is not Bound yet (both applied in one manifest, say) is looked at again as
soon as its source binds, and again when its source's volume reaches the cache: `CloneWaits`
maps each source to the clones naming it, so a binding finds them without a walk.
"""

from __future__ import annotations

import threading

from provisioner.kube.informer import Informer
from provisioner.objects.records import ClaimRecord, VolumeRecord

SourceKey = tuple[str, str]
"""(namespace, name) of a source claim."""


class InformerClaimSources:
    """`clones.ClaimSources` over the claim and volume informers."""

    def __init__(self, claims: Informer[ClaimRecord], volumes: Informer[VolumeRecord]) -> None:
        self._claims = claims
        self._volumes = volumes

    def claim(self, namespace: str, name: str) -> ClaimRecord | None:
        found = [
            claim
            for _, claim in self._claims.items()
            if claim.namespace == namespace and claim.name == name
        ]
        # A deleted claim and its recreation may both be cached for a moment: the live one.
        found.sort(key=lambda claim: claim.being_deleted)
        return found[0] if found else None

    def volume(self, name: str) -> VolumeRecord | None:
        return self._volumes.get(name)


class CloneWaits:
    """Unbound clones by the source claim they name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clones: dict[SourceKey, set[str]] = {}

    def update(self, old: ClaimRecord | None, new: ClaimRecord | None) -> set[str]:
        """Follows a claim event (an unbound clone is kept under its source until it binds or
        goes); returns the clones to look at again: those of a source that just bound."""
        with self._lock:
            for claim, keep in ((old, False), (new, True)):
                key = _source_key(claim)
                if claim is None or key is None:
                    continue
                if keep and not claim.volume_name:
                    self._clones.setdefault(key, set()).add(claim.uid)
                elif not keep:
                    waiting = self._clones.get(key, set())
                    waiting.discard(claim.uid)
                    if not waiting:
                        self._clones.pop(key, None)
            if new is None or not new.volume_name or (old is not None and old.volume_name):
                return set()
            return set(self._clones.get((new.namespace, new.name), ()))

    def volume_seen(self, old: VolumeRecord | None, new: VolumeRecord | None) -> set[str]:
        """Follows a PV event: the clones waiting for the claim a PV just came to be bound to.
        A source's binding and its PV reach the caches through two informers, in either
        order: a clone looked at between the two finds its source bound to a volume not yet
        seen, and is looked at again when the volume is."""
        if new is None or new.claim_ref is None:
            return set()
        if old is not None and old.claim_ref == new.claim_ref:
            return set()
        with self._lock:
            return set(self._clones.get((new.claim_ref.namespace, new.claim_ref.name), ()))


def _source_key(claim: ClaimRecord | None) -> SourceKey | None:
    if claim is None or claim.data_source is None or not claim.data_source.is_claim:
        return None
    return (claim.data_source.namespace or claim.namespace, claim.data_source.name)
