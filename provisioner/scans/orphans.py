"""Orphans: directories under a configured base path that no PV owns, and PVs of ours whose
directory is missing. Pure: the listing a node's helper pod printed, the PVs and the helper pods
in flight go in; what is an orphan, and which orphans may be removed, comes out.

Why so careful: an orphan removal is an `rm -rf` decided from a listing that is already a few
seconds old. A directory is only an orphan when no PV of any provisioner (ours or not, live or
Released), no claim of ours waiting for its volume and no helper pod in flight has a path
equal to it, inside it, or around it (on a shared path, whatever node it names); and a
removal is only offered for a plain directory, never a symbolic link (its target is not ours to
judge), older than a threshold no in-flight setup reaches.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from provisioner.configuration.class_rules import read_class_rules
from provisioner.configuration.config import ProvisionerConfig
from provisioner.objects.records import ClaimRecord, NodeRecord, StorageClassRecord, VolumeRecord
from provisioner.provisioning.annotations import PROVISIONED_BY
from provisioner.provisioning.claims import Provision, decide_claim_action
from provisioner.provisioning.paths import is_strictly_inside
from provisioner.provisioning.volume_facts import resolve_volume_node

EntryKind = Literal["directory", "file", "symlink", "other"]
ENTRY_KINDS: tuple[EntryKind, ...] = ("directory", "file", "symlink", "other")
MINIMUM_AGE_SECONDS = 600
"""`--older-than` may not go below this: a setup in flight (prepare, setup, PV save with its
retries) holds an unowned directory for minutes at most."""


class ListingError(ValueError):
    """A listing helper's output that does not parse: the node's listing is not trusted."""


@dataclass(frozen=True, slots=True)
class Owner:
    """A path a PV or an in-flight helper holds; `nodes` None means on every node (a shared
    filesystem, or a PV whose node cannot be told: it protects its path everywhere)."""

    path: str
    nodes: frozenset[str] | None
    volume_name: str = ""
    ours: bool = False

    def on(self, node: str, *, shared: bool = False) -> bool:
        """Whether it holds its path in a listing of `node`; on a shared filesystem every
        owner holds its path on every node, whatever node its PV or helper pod names: the
        listing node is only the one picked to list the directory all nodes see."""
        return shared or self.nodes is None or node in self.nodes


@dataclass(frozen=True, slots=True)
class ListedEntry:
    path: str
    kind: EntryKind
    mtime: int


@dataclass(frozen=True, slots=True)
class NodeListing:
    """What the listing helper printed for one base path on one node."""

    node: str
    base_path: str
    now: int
    """The node's clock when it listed: ages are measured on it, not on ours."""
    entries: tuple[ListedEntry, ...]
    missing: tuple[str, ...]
    """Owned paths the helper found absent (or not a plain directory)."""
    truncated: bool = False
    skipped: int = 0
    """Entries with a line break in their name: not listed, never removed."""
    shared: bool = False
    """A shared filesystem path (the same directory on every node)."""


@dataclass(frozen=True, slots=True)
class Orphan:
    node: str
    base_path: str
    path: str
    kind: EntryKind
    age_seconds: int
    shared: bool = False
    """Found under a shared filesystem path: every owner holds its path here."""

    @property
    def removable(self) -> bool:
        """Only plain directories are removed; files, links and others are reported."""
        return self.kind == "directory"


@dataclass(frozen=True, slots=True)
class MissingDirectory:
    volume_name: str
    node: str
    path: str


def base_paths_by_node(config: ProvisionerConfig, nodes: Iterable[str]) -> dict[str, list[str]]:
    """Every node-local base path configured for each node, over every class's storage; a
    shared filesystem path goes to the first node only (it is the same directory everywhere)."""
    classes = list(config.storage_class_configs) or [""]
    result: dict[str, list[str]] = {}
    shared_done: set[str] = set()
    for node in sorted(nodes):
        found: list[str] = []
        for name in classes:
            shared = config.shared_path_for(name)
            if shared is not None:
                if shared not in shared_done:
                    shared_done.add(shared)
                    found.append(shared)
                continue
            found += [p for p in config.paths_for(name, node) or () if p not in found]
        if found:
            result[node] = found
    return result


def volume_owners(
    volumes: Iterable[VolumeRecord], nodes: Mapping[str, NodeRecord], provisioner_name: str
) -> list[Owner]:
    """Every PV with a host path owns it, whoever provisioned it, whatever its phase."""
    owners = []
    for volume in volumes:
        if not volume.path:
            continue
        node_set: frozenset[str] | None = None
        if volume.affinity:
            node, _ = resolve_volume_node(volume, nodes)
            node_set = frozenset({node}) if node else None
        owners.append(
            Owner(
                path=posixpath.normpath(volume.path),
                nodes=node_set,
                volume_name=volume.name,
                ours=volume.annotations.get(PROVISIONED_BY) == provisioner_name,
            )
        )
    return owners


def claim_owners(
    claims: Iterable[ClaimRecord],
    classes: Mapping[str, StorageClassRecord],
    config: ProvisionerConfig,
    nodes: Mapping[str, NodeRecord],
    provisioner_name: str,
) -> list[Owner]:
    """A claim of ours still waiting for its volume holds the path its provisioning uses: the
    setup may have made the directory and the PV not be saved yet (a leader that stopped in
    between leaves exactly that, for as long as no provisioner runs). The path is the one
    the provisioner's own decision gives: a claim it would not provision now names none."""
    owners = []
    for claim in claims:
        name = claim.storage_class_name or ""
        decision = decide_claim_action(
            claim,
            read_class_rules(name, classes.get(name), config),
            (),
            nodes,
            provisioner_name=provisioner_name,
        )
        if isinstance(decision, Provision):
            plan = decision.plan
            owners.append(
                Owner(
                    path=posixpath.normpath(plan.path),
                    nodes=frozenset({plan.node_name}) if plan.node_name else None,
                    volume_name=plan.volume_name,
                )
            )
    return owners


def helper_pod_owners(pods: Iterable[Mapping[str, object]]) -> list[Owner]:
    """A helper pod in flight holds its VOL_DIR on its node (a setup before its PV exists); a
    batch pod, each of its volumes' (one per init container)."""
    owners = []
    for pod in pods:
        spec = pod.get("spec")
        if not isinstance(spec, Mapping):
            continue
        node = spec.get("nodeName")
        for container in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
            for variable in container.get("env") or ():
                if variable.get("name") == "VOL_DIR" and isinstance(variable.get("value"), str):
                    owner = Owner(
                        path=posixpath.normpath(variable["value"]),
                        nodes=frozenset({node}) if isinstance(node, str) and node else None,
                    )
                    if owner not in owners:
                        owners.append(owner)
    return owners


def owned_relative_paths(
    owners: Iterable[Owner], node: str, base_path: str, *, shared: bool = False
) -> list[str]:
    """What the listing helper must never look into, relative to the base path."""
    return sorted(
        {
            posixpath.relpath(owner.path, base_path)
            for owner in owners
            if owner.on(node, shared=shared) and is_strictly_inside(owner.path, base_path)
        }
    )


_ENTRY = re.compile(r"(directory|file|symlink|other) ([0-9]+) (.+)")


def parse_listing(node: str, base_path: str, text: str, *, shared: bool = False) -> NodeListing:
    """Parses the listing helper's output (see node_scripts.LIST_SCRIPT). Raises ListingError
    unless it is complete (ends with `end`) and every line is well formed."""
    lines = text.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    if not lines or not lines[0].startswith("now ") or lines[-1] != "end":
        raise ListingError(f"the listing of {base_path} on {node} is incomplete")
    try:
        now = int(lines[0][4:])
    except ValueError:
        raise ListingError(f"the listing of {base_path} on {node}: bad clock line") from None
    entries: list[ListedEntry] = []
    missing: list[str] = []
    truncated, skipped = False, 0
    for line in lines[1:-1]:
        if line == "truncated":
            truncated = True
        elif line.startswith("skipped "):
            skipped = int(line[8:]) if line[8:].isdigit() else 0
        elif line.startswith("missing "):
            missing.append(_inside(base_path, line[8:], node))
        elif (match := _ENTRY.fullmatch(line)) is not None:
            kind: EntryKind = match.group(1)  # type: ignore[assignment]
            path = _inside(base_path, match.group(3), node)
            entries.append(ListedEntry(path, kind, int(match.group(2))))
        else:
            raise ListingError(f"the listing of {base_path} on {node}: cannot read {line[:80]!r}")
    return NodeListing(
        node, base_path, now, tuple(entries), tuple(missing), truncated, skipped, shared
    )


def _inside(base_path: str, relative: str, node: str) -> str:
    path = posixpath.normpath(posixpath.join(base_path, relative))
    if relative.startswith("/") or not is_strictly_inside(path, base_path):
        raise ListingError(f"the listing of {base_path} on {node} names {relative!r}, outside it")
    return path


def _related(path: str, owned: str) -> bool:
    return path == owned or is_strictly_inside(path, owned) or is_strictly_inside(owned, path)


def find_orphans(listing: NodeListing, owners: Sequence[Owner]) -> list[Orphan]:
    """The listed entries no owner on that node holds, contains or lies inside. The helper
    already left those out; checking again means a wrong helper cannot make us remove one."""
    held = [owner.path for owner in owners if owner.on(listing.node, shared=listing.shared)]
    return [
        Orphan(
            node=listing.node,
            base_path=listing.base_path,
            path=entry.path,
            kind=entry.kind,
            age_seconds=max(0, listing.now - entry.mtime),
            shared=listing.shared,
        )
        for entry in listing.entries
        if not any(_related(entry.path, path) for path in held)
    ]


def still_orphan(orphan: Orphan, owners: Sequence[Owner]) -> bool:
    """Against a newer view of the owners: does nothing hold it now?"""
    return not any(
        _related(orphan.path, o.path) for o in owners if o.on(orphan.node, shared=orphan.shared)
    )


def find_missing(listing: NodeListing, owners: Sequence[Owner]) -> list[MissingDirectory]:
    """Our PVs on that node whose directory the helper did not find (a node-local PV whose
    node cannot be told is not reported: absent on one node says nothing)."""
    absent = set(listing.missing)
    return [
        MissingDirectory(owner.volume_name, listing.node, owner.path)
        for owner in owners
        if owner.ours
        and owner.volume_name
        and owner.path in absent
        and (listing.node in owner.nodes if owner.nodes is not None else listing.shared)
    ]


def removable_orphans(orphans: Iterable[Orphan], older_than_seconds: int) -> list[Orphan]:
    return [o for o in orphans if o.removable and o.age_seconds >= older_than_seconds]
