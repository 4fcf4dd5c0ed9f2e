"""`python -m provisioner orphans`: directories under the configured base paths that no PV owns,
and PVs of ours whose directory is missing; with `--delete --older-than D`, removes the orphan
directories through helper pods under the teardown rules.

Exit codes: 0 nothing found (or every orphan found was removed); 1 orphans or missing
directories found (or some not removed); 2 bad flags, config or cluster access; 3 a node's
listing failed (what the other nodes showed is still printed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from provisioner.config import ConfigBundle, ConfigError, load_config_bundle, load_config_directory
from provisioner.helpers import HELPER_ACTION_LABEL, HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE
from provisioner.kube.client import KubeClients, KubeConfigError, create_clients
from provisioner.kube.helper_pods import HelperPodError, HelperPodRunner
from provisioner.node_scripts import build_listing_pod, build_orphan_removal_pod
from provisioner.options import DEFAULT_PROVISIONER_NAME
from provisioner.orphans import (
    MINIMUM_AGE_SECONDS,
    ListingError,
    MissingDirectory,
    Orphan,
    Owner,
    base_paths_by_node,
    find_missing,
    find_orphans,
    helper_pod_owners,
    owned_relative_paths,
    parse_duration,
    parse_listing,
    still_orphan,
    volume_owners,
)
from provisioner.records import node_record, volume_record

EXIT_CLEAN = 0
EXIT_FOUND = 1
EXIT_BAD_SETUP = 2
EXIT_PARTIAL = 3


@dataclass(frozen=True)
class OrphanOptions:
    kubeconfig: str | None
    namespace: str
    configmap_name: str
    config_path: Path | None
    provisioner_name: str
    service_account: str
    nodes: tuple[str, ...]
    delete: bool
    older_than_seconds: int
    output: str


def parse_orphan_options(
    argv: Sequence[str], environ: Mapping[str, str] = os.environ
) -> OrphanOptions:
    parser = argparse.ArgumentParser(
        prog="python -m provisioner orphans",
        description="List (and with --delete remove) directories under the configured base"
        " paths that no PV owns, and PVs whose directory is missing. Exit codes: 0 nothing"
        " found, 1 found, 2 bad flags/config/access, 3 a node could not be listed.",
    )
    add = parser.add_argument
    add("--kubeconfig", default=environ.get("KUBECONFIG") or None)
    add(
        "--namespace",
        default=environ.get("POD_NAMESPACE", "local-path-storage"),
        help="the provisioner's namespace: its ConfigMap, where helper pods run",
    )
    add("--configmap-name", default=environ.get("CONFIGMAP_NAME", "local-path-config"))
    add(
        "--config",
        dest="config_path",
        default=None,
        help="read config.json here (setup, teardown, helperPod.yaml beside it) instead of"
        " the ConfigMap",
    )
    add(
        "--provisioner-name",
        default=environ.get("PROVISIONER_NAME", DEFAULT_PROVISIONER_NAME),
        help="whose PVs count as ours (for missing directories)",
    )
    add(
        "--service-account-name",
        dest="service_account",
        default=environ.get("SERVICE_ACCOUNT_NAME", "local-path-storage-helper"),
    )
    add("--node", action="append", default=[], help="only this node (repeatable)")
    add("--delete", action="store_true", help="remove orphan directories (needs --older-than)")
    add("--older-than", default=None, help="with --delete: only orphans unchanged this long")
    add("--output", choices=("table", "json"), default="table")
    ns = parser.parse_args(list(argv))
    older_than = 0
    if ns.older_than is not None:
        try:
            older_than = parse_duration(ns.older_than)
        except ValueError as error:
            parser.error(f"--older-than: {error}")
    if ns.delete:
        if ns.older_than is None:
            parser.error("--delete needs --older-than (for example --older-than 24h)")
        if older_than < MINIMUM_AGE_SECONDS:
            parser.error(
                f"--older-than must be at least {MINIMUM_AGE_SECONDS // 60}m: a setup in flight"
                " holds a directory no PV owns yet for minutes"
            )
    return OrphanOptions(
        kubeconfig=ns.kubeconfig,
        namespace=ns.namespace,
        configmap_name=ns.configmap_name,
        config_path=Path(ns.config_path) if ns.config_path else None,
        provisioner_name=ns.provisioner_name,
        service_account=ns.service_account,
        nodes=tuple(ns.node),
        delete=ns.delete,
        older_than_seconds=older_than,
        output=ns.output,
    )


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
        kept = [o for o in self.orphans if self.removed.get(_key(o)) != "removed"]
        return EXIT_FOUND if kept or self.missing else EXIT_CLEAN


def _key(orphan: Orphan) -> str:
    return f"{orphan.node}:{orphan.path}"


class OrphanScan:
    """Lists every node's base paths through helper pods and judges the result; shared by the
    CLI and the provisioner's periodic scan."""

    def __init__(
        self,
        clients: KubeClients,
        bundle: ConfigBundle,
        *,
        namespace: str,
        service_account: str,
        provisioner_name: str,
    ) -> None:
        self._clients = clients
        self._bundle = bundle
        self._namespace = namespace
        self._service_account = service_account
        self._provisioner_name = provisioner_name
        self._runner = HelperPodRunner(clients)

    def owners(self) -> tuple[list[Owner], dict[str, Any]]:
        nodes = {
            record.name: record
            for record in map(node_record, self._list("/api/v1/nodes"))
            if record.name
        }
        volumes = [volume_record(item) for item in self._list("/api/v1/persistentvolumes")]
        pods = [
            pod
            for pod in self._list(
                "/api/v1/pods", label_selector=f"{HELPER_POD_LABEL}={HELPER_POD_LABEL_VALUE}"
            )
            if (pod.get("metadata") or {}).get("labels", {}).get(HELPER_ACTION_LABEL)
            != "remove-orphan"
        ]
        owners = volume_owners(volumes, nodes, self._provisioner_name) + helper_pod_owners(pods)
        return owners, nodes

    def scan(self, only_nodes: Sequence[str] = ()) -> Report:
        report = Report()
        owners, nodes = self.owners()
        unknown = sorted(set(only_nodes) - set(nodes))
        for name in unknown:
            report.problems.append(f"node {name} does not exist")
        wanted = [n for n in nodes if not only_nodes or n in only_nodes]
        config = self._bundle.config
        shared = {
            path
            for name in list(config.storage_class_configs) or [""]
            if (path := config.shared_path_for(name)) is not None
        }
        for node, base_paths in base_paths_by_node(config, wanted).items():
            for base_path in base_paths:
                manifest = build_listing_pod(
                    self._bundle,
                    self._namespace,
                    self._service_account,
                    node=node,
                    base_path=base_path,
                    owned=owned_relative_paths(owners, node, base_path),
                )
                try:
                    _, message = self._runner.run_for_message(
                        manifest, float(config.cmd_timeout_seconds)
                    )
                    listing = parse_listing(node, base_path, message, shared=base_path in shared)
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

    def remove(self, report: Report, older_than_seconds: int) -> None:
        """Removes the report's directory orphans old enough, after looking at the PVs and
        helper pods once more: one that appeared since the listing keeps its path."""
        owners, _ = self.owners()
        for orphan in report.orphans:
            key = _key(orphan)
            if not orphan.removable:
                report.removed[key] = f"kept: a {orphan.kind}, remove it by hand if unwanted"
                continue
            if orphan.age_seconds < older_than_seconds:
                report.removed[key] = "kept: younger than --older-than"
                continue
            if not still_orphan(orphan, owners):
                report.removed[key] = "kept: a PV or helper pod holds it now"
                continue
            manifest = build_orphan_removal_pod(
                self._bundle,
                self._namespace,
                self._service_account,
                node=orphan.node,
                base_path=orphan.base_path,
                path=orphan.path,
                min_age_seconds=older_than_seconds,
            )
            try:
                self._runner.run(manifest, float(self._bundle.config.cmd_timeout_seconds))
                report.removed[key] = "removed"
            except HelperPodError as error:
                report.removed[key] = f"kept: {error}"

    def _list(self, path: str, **query: str) -> list[dict[str, Any]]:
        return list(self._clients.request_json("GET", path, query=query or None)["items"])


def load_bundle(clients: KubeClients, options: OrphanOptions) -> ConfigBundle:
    if options.config_path is not None:
        return load_config_directory(options.config_path.parent, config_file=options.config_path)
    path = f"/api/v1/namespaces/{options.namespace}/configmaps/{options.configmap_name}"
    try:
        data = clients.request_json("GET", path).get("data") or {}
    except ApiException as error:
        raise ConfigError(
            f"ConfigMap {options.namespace}/{options.configmap_name}",
            f"cannot be read ({error.status} {error.reason}): pass --namespace and"
            " --configmap-name of the installation, or --config FILE",
        ) from None
    return load_config_bundle(
        data.get("config.json", ""),
        data.get("setup", ""),
        data.get("teardown", ""),
        data.get("helperPod.yaml", ""),
    )


def render_table(report: Report, out: TextIO) -> None:
    rows = [("NODE", "PATH", "KIND", "AGE", "STATE")]
    for orphan in report.orphans:
        state = report.removed.get(_key(orphan), "orphan")
        rows.append((orphan.node, orphan.path, orphan.kind, _age(orphan.age_seconds), state))
    for missing in report.missing:
        rows.append((missing.node, missing.path, "-", "-", f"missing: PV {missing.volume_name}"))
    if len(rows) == 1:
        out.write("no orphans, no missing directories\n")
    else:
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        for row in rows:
            cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:4])]
            out.write("  ".join([*cells, row[4]]) + "\n")
    for problem in report.problems:
        out.write(f"problem: {problem}\n")


def render_json(report: Report, out: TextIO) -> None:
    document = {
        "orphans": [
            {
                "node": o.node,
                "basePath": o.base_path,
                "path": o.path,
                "kind": o.kind,
                "ageSeconds": o.age_seconds,
                "state": report.removed.get(_key(o), "orphan"),
            }
            for o in report.orphans
        ],
        "missing": [
            {"volume": m.volume_name, "node": m.node, "path": m.path} for m in report.missing
        ],
        "problems": report.problems,
    }
    out.write(json.dumps(document, indent=2) + "\n")


def _age(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def main(argv: Sequence[str]) -> int:
    options = parse_orphan_options(argv)
    try:
        clients = create_clients(options.kubeconfig)
    except KubeConfigError as error:
        print(f"cannot reach Kubernetes: {error}", file=sys.stderr)
        return EXIT_BAD_SETUP
    try:
        bundle = load_bundle(clients, options)
        scan = OrphanScan(
            clients,
            bundle,
            namespace=options.namespace,
            service_account=options.service_account,
            provisioner_name=options.provisioner_name,
        )
        report = scan.scan(options.nodes)
        if options.delete:
            scan.remove(report, options.older_than_seconds)
    except ConfigError as error:
        print(f"invalid configuration: {error}", file=sys.stderr)
        return EXIT_BAD_SETUP
    except (ApiException, HTTPError, OSError) as error:
        print(f"talking to Kubernetes failed: {error}", file=sys.stderr)
        return EXIT_BAD_SETUP
    finally:
        clients.close()
    (render_json if options.output == "json" else render_table)(report, sys.stdout)
    return report.exit_code()
