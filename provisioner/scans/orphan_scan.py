"""Running the orphan listing and removal helpers across the nodes: shared by the `orphans`
command and the provisioner's periodic node scan. The decisions are `orphans`'s."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from provisioner.configuration.config import ConfigBundle, ProvisionerConfig
from provisioner.helper_pods.pod_runner import HelperPodError
from provisioner.helper_pods.pod_shapes import (
    HELPER_ACTION_LABEL,
    HELPER_POD_SELECTOR,
)
from provisioner.kube.client import KubeClients
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
from provisioner.provisioning.removal_gate import RemovalRefused
from provisioner.provisioning.removals import orphan_removal_permit
from provisioner.scans.node_scripts import (
    REMOVE_ORPHAN_ACTION,
    build_listing_pod,
    build_orphan_removal_pod,
)
from provisioner.scans.orphans import (
    ListingError,
    MissingDirectory,
    Orphan,
    Owner,
    base_paths_by_node,
    claim_owners,
    find_missing,
    find_orphans,
    helper_pod_owners,
    owned_relative_paths,
    parse_listing,
    volume_owners,
)

EXIT_CLEAN = 0
EXIT_FOUND = 1
EXIT_PARTIAL = 3


@dataclass
class Report:
    orphans: list[Orphan] = field(default_factory=list)
    missing: list[MissingDirectory] = field(default_factory=list)
    removed: dict[str, str] = field(default_factory=dict)
    """Orphan path -> "removed" or why it was kept."""
    problems: list[str] = field(default_factory=list)

    def exit_code(self) -> int:
        if self.problems:
            return EXIT_PARTIAL
        kept = [o for o in self.orphans if self.removed.get(orphan_key(o)) != "removed"]
        return EXIT_FOUND if kept or self.missing else EXIT_CLEAN


def orphan_key(orphan: Orphan) -> str:
    return f"{orphan.node}:{orphan.path}"


@dataclass(frozen=True)
class Holdings:
    """Who holds which paths, and the nodes: from API lists (the command) or the provisioner's
    informer caches (its periodic scan)."""

    owners: list[Owner]
    nodes: dict[str, NodeRecord]


def holdings_of(
    volumes: Iterable[VolumeRecord],
    nodes: Iterable[NodeRecord],
    helper_pods: Iterable[dict[str, Any]],
    provisioner_name: str,
    waiting: tuple[Iterable[ClaimRecord], Iterable[StorageClassRecord], ProvisionerConfig]
    | None = None,
) -> Holdings:
    """`waiting`: the claims, classes and config that tell which paths claims waiting for
    their volume hold (the command, which removes; the periodic scan only counts)."""
    by_name = {node.name: node for node in nodes if node.name}
    in_flight = [
        pod
        for pod in helper_pods
        if ((pod.get("metadata") or {}).get("labels") or {}).get(HELPER_ACTION_LABEL)
        != REMOVE_ORPHAN_ACTION
    ]
    owners = volume_owners(volumes, by_name, provisioner_name) + helper_pod_owners(in_flight)
    if waiting is not None:
        claims, classes, config = waiting
        by_class = {storage_class.name: storage_class for storage_class in classes}
        owners += claim_owners(claims, by_class, config, by_name, provisioner_name)
    return Holdings(owners, by_name)


def read_holdings(
    clients: KubeClients, provisioner_name: str, config: ProvisionerConfig
) -> Holdings:
    def items(path: str, **query: str) -> list[dict[str, Any]]:
        return list(clients.request_json("GET", path, query=query or None)["items"])

    return holdings_of(
        [volume_record(item) for item in items("/api/v1/persistentvolumes")],
        [node_record(item) for item in items("/api/v1/nodes")],
        items("/api/v1/pods", labelSelector=HELPER_POD_SELECTOR),
        provisioner_name,
        (
            [claim_record(item) for item in items("/api/v1/persistentvolumeclaims")],
            [storage_class_record(i) for i in items("/apis/storage.k8s.io/v1/storageclasses")],
            config,
        ),
    )


class ScanPods(Protocol):
    """What runs a scan's pods: the controller's `HelperPods`, or a `PodRunner` of its own for
    the `orphans` command."""

    def run_for_message(self, manifest: Mapping[str, Any], timeout: float) -> tuple[float, str]:
        """Runs the pod to its end; its seconds and the message it left. Raises
        `HelperPodError`."""
        ...


class OrphanScan:
    """Lists every node's base paths through helper pods and judges what they print."""

    def __init__(
        self,
        runner: ScanPods,
        bundle: ConfigBundle,
        *,
        namespace: str,
        service_account: str,
        caller: str = "scan",
    ) -> None:
        self._caller = caller
        self._runner = runner
        self._bundle = bundle
        self._namespace = namespace
        self._service_account = service_account

    def scan(self, holdings: Holdings, only_nodes: Sequence[str] = ()) -> Report:
        report = Report()
        for name in sorted(set(only_nodes) - set(holdings.nodes)):
            report.problems.append(f"node {name} does not exist")
        wanted = [n for n in holdings.nodes if not only_nodes or n in only_nodes]
        config = self._bundle.config
        shared = {
            path
            for name in list(config.storage_class_configs) or [""]
            if (path := config.shared_path_for(name)) is not None
        }
        owners = holdings.owners
        for node, base_paths in base_paths_by_node(config, wanted).items():
            for base_path in base_paths:
                is_shared = base_path in shared
                manifest = build_listing_pod(
                    self._bundle,
                    self._namespace,
                    self._service_account,
                    node=node,
                    base_path=base_path,
                    owned=owned_relative_paths(owners, node, base_path, shared=is_shared),
                    caller=self._caller,
                )
                try:
                    _, message = self._runner.run_for_message(
                        manifest, float(config.cmd_timeout_seconds)
                    )
                    listing = parse_listing(node, base_path, message, shared=is_shared)
                except (HelperPodError, ListingError) as error:
                    report.problems.append(f"listing {base_path} on {node}: {error}")
                    continue
                if listing.truncated:
                    report.problems.append(
                        f"listing {base_path} on {node} was cut short (too many entries):"
                        " remove what is shown and run again"
                    )
                if listing.skipped:
                    report.problems.append(
                        f"{listing.skipped} entries under {base_path} on {node} have a line"
                        " break in their name: not listed; look at them by hand"
                    )
                report.orphans += find_orphans(listing, owners)
                report.missing += find_missing(listing, owners)
        return report

    def remove(self, report: Report, holdings: Holdings, older_than_seconds: int) -> None:
        """Removes the report's directory orphans old enough; `holdings` read after the
        listing, so that a path a PV or helper took since keeps it."""
        for orphan in report.orphans:
            key = orphan_key(orphan)
            if not orphan.removable:
                report.removed[key] = f"kept: a {orphan.kind}, remove it by hand if unwanted"
                continue
            if orphan.age_seconds < older_than_seconds:
                report.removed[key] = "kept: younger than --older-than"
                continue
            permit = orphan_removal_permit(orphan, holdings.owners)
            if isinstance(permit, RemovalRefused):
                report.removed[key] = f"kept: {permit.reason}"
                continue
            manifest = build_orphan_removal_pod(
                self._bundle,
                self._namespace,
                self._service_account,
                node=orphan.node,
                base_path=orphan.base_path,
                path=orphan.path,
                min_age_seconds=older_than_seconds,
                permit=permit,
            )
            try:
                self._runner.run_for_message(
                    manifest, float(self._bundle.config.cmd_timeout_seconds)
                )
                report.removed[key] = "removed"
            except HelperPodError as error:
                report.removed[key] = f"kept: {error}"
