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
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from urllib3.exceptions import HTTPError

from provisioner.configuration.class_parameters import parse_duration
from provisioner.configuration.config import (
    ConfigBundle,
    ConfigError,
    load_config_bundle,
    load_config_directory,
)
from provisioner.configuration.options import DEFAULT_PROVISIONER_NAME
from provisioner.helper_pods.pod_runner import PodRunner
from provisioner.kube.api_error import ApiError
from provisioner.kube.client import KubeClients, KubeConfigError, create_clients
from provisioner.scans.orphan_scan import OrphanScan, Report, orphan_key, read_holdings
from provisioner.scans.orphans import MINIMUM_AGE_SECONDS

EXIT_BAD_SETUP = 2


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


DEFAULT_STACK_NAMESPACE = "local-path-storage-system"
"""Where the Pulumi stacks install the provisioner (components.naming.DEFAULT_NAMESPACE; run
from a workstation, this command most often meets a stack's installation, not rancher's)."""


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
        default=environ.get("POD_NAMESPACE", DEFAULT_STACK_NAMESPACE),
        help="the provisioner's namespace: its ConfigMap, where helper pods run (default: the"
        f" Pulumi stack's, {DEFAULT_STACK_NAMESPACE})",
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


def load_bundle(clients: KubeClients, options: OrphanOptions) -> ConfigBundle:
    if options.config_path is not None:
        return load_config_directory(options.config_path.parent, config_file=options.config_path)
    path = f"/api/v1/namespaces/{options.namespace}/configmaps/{options.configmap_name}"
    try:
        data = clients.request_json("GET", path).get("data") or {}
    except ApiError as error:
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
        state = report.removed.get(orphan_key(orphan), "orphan")
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
                "state": report.removed.get(orphan_key(o), "orphan"),
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
            PodRunner(clients),
            bundle,
            namespace=options.namespace,
            service_account=options.service_account,
            caller="cli",
        )
        config = bundle.config
        report = scan.scan(read_holdings(clients, options.provisioner_name, config), options.nodes)
        if options.delete:
            holdings = read_holdings(clients, options.provisioner_name, config)
            scan.remove(report, holdings, options.older_than_seconds)
    except ConfigError as error:
        print(f"invalid configuration: {error}", file=sys.stderr)
        return EXIT_BAD_SETUP
    except (ApiError, HTTPError, OSError) as error:
        print(f"talking to Kubernetes failed: {error}", file=sys.stderr)
        return EXIT_BAD_SETUP
    finally:
        clients.close()
    (render_json if options.output == "json" else render_table)(report, sys.stdout)
    return report.exit_code()
