"""The common snapshot controller (external-snapshotter) and its CRDs, for clusters that ask.

Why: a VolumeSnapshot becomes a VolumeSnapshotContent only through the common snapshot
controller, which every real cluster with snapshots runs beside the CSI driver; the tests of
the provisioner's snapshots need the real one, watching the real API, not objects made by
hand. It is built from Go modules like the control plane (scripts/build-go-tools.sh
snapshot-controller), and the CRDs it serves (plus the ReferenceGrant CRD, which guards
cross-namespace restores) are copied beside it, keyed by the versions pinned in versions.env.
Only clusters that ask (ClusterOptions.snapshots, LocalCluster.enable_snapshots) get them, so
every other cluster starts as fast as before and has no snapshot API at all.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.binaries import cache_root, read_versions
from localcluster.errors import ComponentFailedError, MissingBinariesError
from localcluster.processes import ManagedProcess
from localcluster.raw_api import call_json, manifest

BUILD_TARGET = "snapshot-controller"
SNAPSHOT_CRD_FILES = (
    "snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
    "snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
    "snapshot.storage.k8s.io_volumesnapshots.yaml",
)
REFERENCE_GRANT_CRD_FILE = "gateway.networking.k8s.io_referencegrants.yaml"
CRD_FILES = (*SNAPSHOT_CRD_FILES, REFERENCE_GRANT_CRD_FILE)
STOP_GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class SnapshotTools:
    """The pinned snapshot-controller binary and the CRD files built beside it."""

    binary: Path
    crds: tuple[Path, ...]


def locate_snapshot_tools(cache: Path | None = None) -> SnapshotTools:
    """The pinned build, or MissingBinariesError naming what is absent and how to build it."""
    root = cache or cache_root()
    versions = read_versions()
    binary = (
        root / "bin" / f"snapshot-controller-{versions.get('EXTERNAL_SNAPSHOTTER_VERSION', '')}"
    )
    # The same key build-go-tools.sh writes: the client module's and gateway-api's versions.
    crd_dir = (
        root
        / "crds"
        / (
            f"snapshot-{versions.get('EXTERNAL_SNAPSHOTTER_CLIENT_VERSION', '')}"
            f"-gateway-{versions.get('GATEWAY_API_VERSION', '')}"
        )
    )
    crds = tuple(crd_dir / name for name in CRD_FILES)
    missing = [binary] if not os.access(binary, os.X_OK) else []
    missing += [path for path in crds if not path.is_file()]
    if missing:
        raise MissingBinariesError(missing, BUILD_TARGET)
    return SnapshotTools(binary, crds)


def snapshot_controller_args(binary: Path, kubeconfig: Path) -> list[str]:
    """Its command line, as upstream's out-of-cluster example runs it, tuned for tests."""
    return [
        str(binary),
        # The admin identity: this stands for a controller an administrator installed with
        # its own cluster-wide rights; the provisioner's rights are what the tests judge.
        f"--kubeconfig={kubeconfig}",
        "--leader-election=false",
        "--worker-threads=4",
        # Upstream retries a failed step after 1 s doubling to 5 min; a test waiting for a
        # retry (a PV bound after its snapshot was made) should not wait minutes.
        "--retry-interval-start=100ms",
        "--retry-interval-max=5s",
        # Group snapshots need CRDs we do not install; with the gate on it would first wait
        # `--retry-crd-interval-max` (30 s) for them and only then go on without.
        "--feature-gates=CSIVolumeGroupSnapshot=false",
    ]


def crd_documents(paths: tuple[Path, ...]) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions in the files (a file may hold several documents)."""
    documents: list[dict[str, Any]] = []
    for path in paths:
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                documents.append(document)
    return documents


def is_established(crd: dict[str, Any]) -> bool:
    """True once the API server serves the CRD's resource (condition Established=True)."""
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def apply_crds(api: client.ApiClient, documents: list[dict[str, Any]], timeout: float) -> None:
    """Creates each CRD (an existing one is left as it is) and waits until all are Established."""
    extensions = client.ApiextensionsV1Api(api)
    for document in documents:
        try:
            extensions.create_custom_resource_definition(manifest(document))
        except ApiException as error:
            if error.status != HTTPStatus.CONFLICT:
                raise
    names = [str(document["metadata"]["name"]) for document in documents]
    deadline = time.monotonic() + timeout
    for name in names:
        while not is_established(call_json(extensions.read_custom_resource_definition, name)):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"CRD {name} was not Established after {timeout:.0f}s")
            time.sleep(0.05)


class SnapshotController:
    """The CRDs and the snapshot-controller process of one cluster."""

    def __init__(self, tools: SnapshotTools, kubeconfig: Path, logs: Path) -> None:
        self.tools = tools
        self.apiserver_log = logs / "kube-apiserver.log"
        self.process = ManagedProcess(
            "snapshot-controller",
            snapshot_controller_args(tools.binary, kubeconfig),
            logs / "snapshot-controller.log",
            # It handles only SIGINT (cmd/snapshot-controller/main.go: signal.Notify(c,
            # os.Interrupt)): its workers stop and it exits 0. SIGTERM is Go's default action,
            # an exit by the signal in the middle of whatever it was writing.
            stop_signal=signal.SIGINT,
        )

    def start(self, api: client.ApiClient, timeout: float) -> None:
        """Applies the CRDs, waits until they are served, then starts the controller (which
        otherwise spends its first seconds waiting for them)."""
        try:
            apply_crds(api, crd_documents(self.tools.crds), timeout)
        except TimeoutError as error:
            raise ComponentFailedError(
                "kube-apiserver",
                f"did not establish the snapshot CRDs ({error})",
                self.apiserver_log,
            ) from error
        self.process.start()

    def check_alive(self) -> None:
        if self.process.pid is not None and not self.process.is_running():
            raise ComponentFailedError(
                self.process.name,
                f"exited early (exit code {self.process.exit_code()})",
                self.process.log_path,
            )

    def stop(self) -> None:
        self.process.stop(STOP_GRACE_SECONDS)
