"""The one gate before a directory goes: every helper step that removes or empties a volume's
directory (the teardown code, the fixed `finish` step, a batch pod's parts of either) is built
only from a `RemovalPermit`, and only `decide_removal` makes one, from a `RemovalProof`.

What a proof rests on, and where each fact comes from (gathered by provisioning/removals.py at the
moment it asks):

- **The directory is the one this volume or attempt made.** On the API side: a class with
  `reuseExistingData` may have had `prepare` hand over a directory it found, so a give-back or
  a clean-up of such a class never removes it (`reuses_existing_data`, from the plan). On the
  node, where only the node can tell: the permit travels with the pod as an owner check (see
  `OwnerCheck`) that the fixed scripts run just before anything is removed, against the owner
  marker `prepare` wrote (fresh_directory): a teardown needs the marker to name this volume, or
  none (volumes made before markers, and those named for the volume, which skip `prepare`); a
  give-back or clean-up needs it to say this volume *made* the directory (a directory `prepare`
  reused is marked so), or, for a path named for the volume, none. So a pod that starts late
  removes nothing that became another volume's meanwhile.
- **No other volume of ours, and no claim in flight, shares the path** (`sharing`): the path
  book's `overlapping`, read under the book's lock. The book is the informer's picture of our
  PVs plus the provisions and teardowns in flight, and every provision reserves its path in it
  before any directory exists, under the same lock; so for a path the book holds for this
  volume (teardown decided, attempt reserved) no new claim can take it without the book seeing
  it, and the cache is as good as a read here.
- **For a give-back, no PV of this claim's exists** (`claim_volume_seen`): a fresh GET of the
  PV name, never the cache, which may not have seen a save whose answer was lost.
- **For a clone's give-back, the verdict on the source was taken once, before the first save**
  (`clone_verdict_before_save`): a retry after an unsettled save never reads the source again,
  so a source deleted after its clone bound never gives the clone's directory back.
- **The process still holds the lease** (`holds_lease`): a replica that lost it must not act on
  a picture another leader may already have changed.
- **An orphan** (`orphans --delete`, a command that leads nothing: `holds_lease` is true) is a
  directory no PV and no helper pod holds, by the owners the command read after its listing
  (`sharing`); no marker can name a live volume of it, so its node-side check is the removal
  script's own: no symbolic link on the way, and unchanged for `--older-than`.

- **A snapshot** (`SNAPSHOT_DELETE`: its data in the snapshot area of its source's base path) goes
  only when its VolumeSnapshotContent is being deleted with deletionPolicy Delete and names the
  snapshot its setup does (`snapshot`, from the contents informer: contents are cluster-scoped,
  written by admins and controllers only). The permit travels on the content (snapshot_handoff
  .SnapshotRemoval); the node re-reads the content before it acts, and removes only a snapshot
  whose marker names it (`snapshot_owner`).

Where reads are taken, and where the cache is trusted (the benchmark counts requests per
volume, so the common path takes none): a first teardown of a Released PV is decided from the
informer and the book: the informer saw the PV Released (a PV is never un-released), the book
holds its path as tearing down under its lock (no provision can take it meanwhile), and the
node check guards against what neither can see (a directory another process gave away). The
rare removals take a fresh read where the cache could lag: a give-back GETs the PV (its save's
answer may have been lost, so the informer may not have it yet). The clean-up after a failed
setup rests on the attempt's reservation in the book and on the node check (made by this
attempt), which no read could improve on.

Redone teardowns never reach the gate when the directory is already gone: the finalizer PATCH
marks the PV (claims.DIRECTORY_REMOVED_ANNOTATION), this process remembers a teardown pod that
succeeded, and a teardown pod that never started is followed by a read-only look that finds
the directory gone (node_scripts.PRESENCE_SCRIPT); in each case the PV goes without removing
anything. A redone teardown whose directory is still there is a teardown like the first.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass
from enum import Enum

from provisioner.objects.snapshot_handoff import snapshot_owner
from provisioner.provisioning.paths import is_named_for_volume


class RemovalKind(Enum):
    TEARDOWN = "volume teardown"
    GIVE_BACK = "give-back after a refused or lost save"
    CLONE_GIVE_BACK = "clone give-back"
    FAILED_SETUP_CLEAN_UP = "clean-up after a failed setup"
    ORPHAN_REMOVAL = "orphan removal"
    SNAPSHOT_DELETE = "snapshot deletion"


GIVE_BACKS = (RemovalKind.GIVE_BACK, RemovalKind.CLONE_GIVE_BACK)
CLEAN_UPS = (*GIVE_BACKS, RemovalKind.FAILED_SETUP_CLEAN_UP)
"""Removals of what an attempt made: never a directory `prepare` found and reused."""


@dataclass(frozen=True)
class RemovalProof:
    """What a removal rests on (see the module's docstring for where each fact comes from)."""

    kind: RemovalKind
    volume_name: str
    path: str
    base_path: str
    sharing: tuple[str, ...]
    """The other volumes and claims in flight whose path overlaps this one (the book's)."""
    holds_lease: bool
    reuses_existing_data: bool = False
    """The class hands existing directories to new claims (`reuseExistingData`)."""
    claim_volume_seen: bool | None = None
    """Give-backs: whether a fresh read found a PV of this claim's (None: not read)."""
    clone_verdict_before_save: bool | None = None
    """Clone give-backs: whether the source's verdict was taken before the first save."""
    snapshot: SnapshotProof | None = None
    """Snapshot deletions: what the content showed (`volume_name` is the content's name)."""


@dataclass(frozen=True)
class SnapshotProof:
    """What a snapshot's removal rests on, from the VolumeSnapshotContent as the informer shows
    it (cluster-scoped: only admins and controllers write it; the node re-reads it before it
    acts on the permit)."""

    content_being_deleted: bool
    deletion_policy: str
    snapshot_id: str
    """The id the content names by itself (its name's hash, or its handle's)."""
    setup_snapshot_id: str
    """The id of the setup we wrote on it: the snapshot the node made for it."""


@dataclass(frozen=True)
class OwnerCheck:
    """What the volume's owner marker must say, checked on the node just before removing:
    it names `owner`, and, with `made_only`, says that volume made the directory; no marker
    passes only with `absent_ok`."""

    owner: str
    made_only: bool
    absent_ok: bool


_GATE = object()


@dataclass(frozen=True)
class RemovalPermit:
    """Leave to build the helper steps that remove one volume's directory. Only
    `decide_removal` makes one: any other construction raises."""

    kind: RemovalKind
    volume_name: str
    """The volume whose directory it is; "" for an orphan."""
    path: str
    check: OwnerCheck | None
    """What the owner marker must say on the node; None for an orphan (see the module)."""
    gate: InitVar[object] = None
    """The gate's own token; not kept, so `dataclasses.replace` cannot carry it over to a
    changed permit."""

    def __post_init__(self, gate: object) -> None:
        if gate is not _GATE:
            raise TypeError("a RemovalPermit comes only from removal_gate.decide_removal")

    def covers(self, volume_name: str, path: str) -> bool:
        return self.volume_name == volume_name and self.path == path


@dataclass(frozen=True)
class RemovalRefused:
    """What was not proven; the directory stays."""

    reason: str


def decide_removal(proof: RemovalProof) -> RemovalPermit | RemovalRefused:
    """A permit to remove the proof's directory, or what was not proven."""
    what = f"{proof.kind.value} of {proof.path}"
    if not proof.holds_lease:
        return RemovalRefused(f"{what}: this replica no longer holds the leader lease")
    if proof.sharing:
        return RemovalRefused(f"{what}: the path is also used by {', '.join(proof.sharing)}")
    named = bool(proof.volume_name) and is_named_for_volume(
        proof.path, proof.base_path, proof.volume_name
    )
    if proof.kind in CLEAN_UPS and proof.reuses_existing_data and not named:
        return RemovalRefused(
            f"{what}: the class sets reuseExistingData, so the directory may hold data this"
            " claim did not write"
        )
    if proof.kind in GIVE_BACKS:
        if proof.claim_volume_seen is None:
            return RemovalRefused(f"{what}: no fresh read showed that no PV of the claim exists")
        if proof.claim_volume_seen:
            return RemovalRefused(f"{what}: a PV of this claim's exists and may bind")
    if proof.kind is RemovalKind.CLONE_GIVE_BACK and not proof.clone_verdict_before_save:
        return RemovalRefused(
            f"{what}: the verdict on the clone's source was not taken before its first save"
        )
    if proof.kind is RemovalKind.SNAPSHOT_DELETE:
        return _snapshot_permit(proof, what)
    if proof.kind is RemovalKind.ORPHAN_REMOVAL:
        return RemovalPermit(proof.kind, "", proof.path, None, _GATE)
    check = OwnerCheck(
        owner=proof.volume_name,
        made_only=proof.kind in CLEAN_UPS,
        # A teardown: volumes made before markers existed, or named for the volume, have none.
        absent_ok=named or proof.kind is RemovalKind.TEARDOWN,
    )
    return RemovalPermit(proof.kind, proof.volume_name, proof.path, check, _GATE)


def _snapshot_permit(proof: RemovalProof, what: str) -> RemovalPermit | RemovalRefused:
    """A snapshot's data goes only when its content is being deleted with policy Delete and
    names the snapshot its setup does; the node removes it only where the owner marker names
    that snapshot (a snapshot always has one: it is made with it)."""
    facts = proof.snapshot
    if facts is None:
        return RemovalRefused(f"{what}: nothing was read of its VolumeSnapshotContent")
    if not facts.content_being_deleted:
        return RemovalRefused(f"{what}: its VolumeSnapshotContent is not being deleted")
    if facts.deletion_policy != "Delete":
        return RemovalRefused(
            f"{what}: its VolumeSnapshotContent's deletionPolicy is {facts.deletion_policy},"
            " not Delete"
        )
    if not facts.snapshot_id or facts.snapshot_id != facts.setup_snapshot_id:
        return RemovalRefused(
            f"{what}: its VolumeSnapshotContent names snapshot {facts.snapshot_id or 'none'},"
            f" its setup {facts.setup_snapshot_id}"
        )
    check = OwnerCheck(
        owner=snapshot_owner(facts.setup_snapshot_id), made_only=False, absent_ok=False
    )
    return RemovalPermit(proof.kind, proof.volume_name, proof.path, check, _GATE)
