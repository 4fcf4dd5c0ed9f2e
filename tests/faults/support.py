"""What the fault tests check after the dust settles: claims bound once, no stray helper pods,
no directory without a live volume, nothing outside the base paths touched.

Every fault test gets base paths of its own (`/opt/faults-<label>-<random>`), so "every
directory under the base path belongs to a live PV" is a statement about that test alone even
though the session cluster is shared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import shutil
import stat
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families
from urllib3.exceptions import HTTPError

from localcluster import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE, LocalCluster, wait_for
from localcluster.raw_api import call_json, manifest
from provisioner.configuration.config import ConfigError, parse_config_json
from provisioner.configuration.options import parse_options
from provisioner.kube.leader_election import lease_name_for
from provisioner.process.app import Provisioner
from provisioner.provisioning.fresh_directory import OWNERS_DIR
from tests.provisioner.e2e.support import (
    CONFIGMAP,
    HELPER_SERVICE_ACCOUNT,
    ConfigFiles,
    ProvisionerSetup,
    volume_node,
    volume_path,
)

FAULT_BASE_PREFIX = "/opt/faults-"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
FINALIZER = "external-provisioner.volume.kubernetes.io/finalizer"
HELPER_SELECTOR = f"{HELPER_POD_LABEL}={HELPER_POD_LABEL_VALUE}"

Snapshot = dict[str, tuple[object, ...]]


SHARED_HELPER_PODS = ("--helper-pods-per-node", "1")
"""Provisioner flags for a test of batch pods: each node runs one helper pod at a time, so the
volumes that arrive while it runs share its next pod, however many pods a node runs at once by
default."""


def unique_base_path(label: str) -> str:
    return f"{FAULT_BASE_PREFIX}{label}-{uuid.uuid4().hex[:6]}"


# -- creating load ---------------------------------------------------------------------------


def in_process_provisioner(
    setup: ProvisionerSetup, cluster: LocalCluster, extra: Sequence[str] = ()
) -> Provisioner:
    """A provisioner for `setup` built in this process (not yet running: call `run()` on a
    thread), so a test can reach into its API client; no leader election, probes on a free
    port; `extra`: more flags."""
    options = parse_options(
        [
            "start",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--provisioner-name={setup.name}",
            f"--namespace={setup.namespace}",
            f"--config={setup.config_dir / 'config.json'}",
            f"--configmap-name={CONFIGMAP}",
            f"--service-account-name={HELPER_SERVICE_ACCOUNT}",
            "--metrics-address=127.0.0.1",
            "--metrics-port=0",
            "--no-leader-election",
            *extra,
        ],
        environ={},
    )
    return Provisioner(options)


def create_claims_with_consumers(
    setup: ProvisionerSetup,
    storage_class: str,
    names: Iterable[str],
    node_selector: Mapping[str, str] | None = None,
) -> None:
    """A claim and a pod using it per name (the pod makes the scheduler select a node)."""
    for name in names:
        setup.create_claim(name, storage_class)
        setup.create_consumer(name, name, node_selector)


# -- reading state ---------------------------------------------------------------------------


def claims_by_name(setup: ProvisionerSetup) -> dict[str, dict[str, Any]]:
    listed = call_json(setup.core.list_namespaced_persistent_volume_claim, setup.namespace)
    return {claim["metadata"]["name"]: claim for claim in listed["items"]}


def our_volumes(setup: ProvisionerSetup) -> list[dict[str, Any]]:
    """PVs provisioned by this setup's provisioner, or bound to a claim of its namespace."""
    listed = call_json(setup.core.list_persistent_volume)["items"]
    return [
        volume
        for volume in listed
        if (volume["metadata"].get("annotations") or {}).get(PROVISIONED_BY) == setup.name
        or (volume["spec"].get("claimRef") or {}).get("namespace") == setup.namespace
    ]


def helper_pods(setup: ProvisionerSetup) -> list[dict[str, Any]]:
    listed = call_json(
        setup.core.list_namespaced_pod, setup.namespace, label_selector=HELPER_SELECTOR
    )
    return list(listed["items"])


def events_with_reason(
    setup: ProvisionerSetup, object_name: str, reason: str
) -> list[dict[str, Any]]:
    """The provisioner's events of that reason on objects of that name in its namespace (the
    controller-manager reports ProvisioningFailed too, e.g. for a class it has not seen yet)."""
    return [
        event
        for event in setup.events(object_name)
        if event.get("reason") == reason
        and (event.get("source") or {}).get("component") == setup.name
        and event.get("involvedObject", {}).get("namespace", "") in ("", setup.namespace)
    ]


def event_count(events: Iterable[Mapping[str, Any]]) -> int:
    return sum(int(event.get("count") or 1) for event in events)


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels`."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def lease_holder(setup: ProvisionerSetup) -> str:
    """The identity holding the provisioner's Lease ("" when none or no Lease yet)."""
    coordination = client.CoordinationV1Api(setup.cluster.admin_client)
    try:
        lease = call_json(
            coordination.read_namespaced_lease, lease_name_for(setup.name), setup.namespace
        )
    except ApiException as error:
        if error.status == 404:
            return ""
        raise
    return str(lease.get("spec", {}).get("holderIdentity") or "")


def holder_pid(identity: str) -> int | None:
    """The pid in an identity `<hostname>_<pid>_<random>`."""
    parts = identity.rsplit("_", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


# -- waiting ---------------------------------------------------------------------------------


def wait_all_bound(
    setup: ProvisionerSetup, names: Sequence[str], timeout: float
) -> dict[str, dict[str, Any]]:
    """Waits until every named claim is Bound; the error names those still pending."""
    pending: list[str] = list(names)

    def all_bound() -> dict[str, dict[str, Any]] | None:
        claims = claims_by_name(setup)
        pending[:] = [
            name for name in names if claims.get(name, {}).get("status", {}).get("phase") != "Bound"
        ]
        return claims if not pending else None

    try:
        return wait_for(all_bound, timeout, f"{len(names)} claims to be Bound", interval=1.0)
    except TimeoutError as error:
        raise AssertionError(f"{error}; still pending: {sorted(pending)[:20]}") from None


def wait_no_helper_pods(setup: ProvisionerSetup, timeout: float) -> None:
    def none_left() -> bool | None:
        return True if not helper_pods(setup) else None

    try:
        wait_for(none_left, timeout, "no helper pods to be left", interval=1.0)
    except TimeoutError:
        left = [
            f"{pod['metadata']['name']} ({pod.get('status', {}).get('phase')})"
            for pod in helper_pods(setup)
        ]
        raise AssertionError(f"helper pods left behind after {timeout:.0f}s: {left}") from None


# -- invariants ------------------------------------------------------------------------------


def assert_each_claim_bound_once(
    setup: ProvisionerSetup, names: Sequence[str]
) -> list[dict[str, Any]]:
    """Every claim Bound to `pvc-<its uid>`, exactly one PV per claim, none for anything else."""
    claims = claims_by_name(setup)
    uids = {}
    for name in names:
        claim = claims[name]
        uid = claim["metadata"]["uid"]
        assert claim["status"]["phase"] == "Bound", f"{name} is {claim['status']['phase']}"
        assert claim["spec"]["volumeName"] == f"pvc-{uid}", f"{name} bound to the wrong PV"
        uids[uid] = name
    volumes = our_volumes(setup)
    referenced = [volume["spec"]["claimRef"]["uid"] for volume in volumes]
    duplicates = sorted({uid for uid in referenced if referenced.count(uid) > 1})
    assert not duplicates, f"claims provisioned twice: {[uids.get(u, u) for u in duplicates]}"
    for volume in volumes:
        uid = volume["spec"]["claimRef"]["uid"]
        assert volume["metadata"]["name"] == f"pvc-{uid}", volume["metadata"]["name"]
    assert sorted(referenced) == sorted(uids), "volumes for claims that are not ours, or missing"
    return volumes


def node_directories(cluster: LocalCluster) -> dict[str, Path]:
    """Every node's directory, including those of nodes deleted since (a dead node's disk)."""
    root = cluster.node_dir("any").parent
    return {path.name: path for path in sorted(root.iterdir()) if path.is_dir()}


def assert_no_orphan_directories(
    cluster: LocalCluster, base_paths: Iterable[str], volumes: Iterable[dict[str, Any]]
) -> None:
    """Every live volume's directory exists on its node, and every directory under a base path
    on any node is a live volume's directory there or a parent of one."""
    live: dict[str, set[str]] = {}
    for volume in volumes:
        live.setdefault(volume_node(volume), set()).add(volume_path(volume))
    missing = [
        f"{node}:{path}"
        for node, paths in live.items()
        for path in paths
        if not (cluster.node_dir(node) / path.lstrip("/")).is_dir()
    ]
    assert not missing, f"live volumes without their directory: {missing[:10]}"
    orphans: list[str] = []
    for node, node_dir in node_directories(cluster).items():
        paths = live.get(node, set())
        for base in base_paths:
            orphans += _orphans(node, node_dir, node_dir / base.lstrip("/"), base, paths)
    assert not orphans, f"directories no live volume owns: {orphans[:10]}"


def _orphans(node: str, node_dir: Path, directory: Path, path: str, live: set[str]) -> list[str]:
    if not directory.is_dir():
        return []
    found: list[str] = []
    for child in sorted(directory.iterdir()):
        if not child.is_dir() or child.is_symlink() or child.name == OWNERS_DIR:
            continue  # OWNERS_DIR: the provisioner's own markers, in every base path
        child_path = f"{path}/{child.name}"
        if child_path in live:
            continue
        if any(other.startswith(child_path + "/") for other in live):
            found += _orphans(node, node_dir, child, child_path, live)
        else:
            found.append(f"{node}:{child_path}")
    return found


def snapshot_nodes(cluster: LocalCluster) -> Snapshot:
    """Every entry under every node directory: kind, mode, size, mtime, link target."""
    root = cluster.node_dir("any").parent
    entries: Snapshot = {}
    for directory, subdirectories, files in os.walk(root):
        for name in [*subdirectories, *files]:
            path = Path(directory) / name
            info = path.lstat()
            link = str(path.readlink()) if stat.S_ISLNK(info.st_mode) else ""
            entries[str(path.relative_to(root))] = (
                stat.S_IFMT(info.st_mode),
                stat.S_IMODE(info.st_mode),
                info.st_size if not stat.S_ISDIR(info.st_mode) else 0,
                info.st_mtime_ns,
                link,
            )
    return entries


def changed_paths(before: Snapshot, after: Snapshot) -> set[str]:
    return {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}


def unexpected_changes(changed: Iterable[str], expected: Iterable[str]) -> list[str]:
    """Changes that are neither an expected path, inside one, nor a directory above one (whose
    mtime moves when an entry is added)."""
    wanted = list(expected)
    return sorted(
        path
        for path in changed
        if not any(
            path == want or path.startswith(want + "/") or want.startswith(path + "/")
            for want in wanted
        )
    )


def node_relative(node: str, path: str) -> str:
    """A node's absolute path as a snapshot key."""
    return f"{node}/{path.strip('/')}"


# -- clean-up --------------------------------------------------------------------------------


def purge(setup: ProvisionerSetup, files: ConfigFiles) -> None:
    """After a test (its provisioner stopped): its PVs go, finalizers and all, and its base
    paths are removed from every node directory."""
    for volume in our_volumes(setup):
        name = volume["metadata"]["name"]
        with contextlib.suppress(ApiException):
            setup.core.patch_persistent_volume(name, manifest({"metadata": {"finalizers": None}}))
        with contextlib.suppress(ApiException):
            setup.core.delete_persistent_volume(name)
    try:
        base_paths = parse_config_json(json.dumps(files.config)).all_base_paths()
    except ConfigError:
        return
    for node_dir in node_directories(setup.cluster).values():
        for base in base_paths:
            if base.startswith(FAULT_BASE_PREFIX):
                shutil.rmtree(node_dir / base.lstrip("/"), ignore_errors=True)


# -- following helper pods -------------------------------------------------------------------

BATCH_VOLUMES = "local-path-storage.io/batch-volumes"


@dataclass(frozen=True)
class HelperPodSeen:
    """One helper pod as a watch saw it: the volumes it served (by name), the positions (in
    the watch's order) of its creation and of its end (finished or gone; None: never), and its
    status as last seen (the provisioner deletes a finished pod: this is what a test can still
    read of its containers, their IDs and images)."""

    name: str
    action: str
    volumes: tuple[str, ...]
    created: int
    ended: int | None
    status: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)


class HelperPodSource(Protocol):
    """Where helper pods run: a ProvisionerSetup, or a deployed stack's namespace."""

    @property
    def core(self) -> client.CoreV1Api: ...

    @property
    def namespace(self) -> str: ...


class HelperPodRecorder:
    """Watches a setup's helper pods from now on, in the API server's order of changes, so a
    test can count them and check that no two pods serving one volume ever ran at once."""

    def __init__(self, setup: HelperPodSource) -> None:
        self._setup = setup
        self._lock = threading.Lock()
        self._lives: dict[str, list[HelperPodSeen]] = {}
        self._position = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="helper-recorder", daemon=True)

    def start(self) -> HelperPodRecorder:
        self._thread.start()
        return self

    def stop(self) -> list[HelperPodSeen]:
        self._stopping.set()
        self._thread.join(15)
        return self.pods()

    def pods(self) -> list[HelperPodSeen]:
        """Every life of every helper pod seen (a name may be used again), by creation."""
        with self._lock:
            lives = [life for name in self._lives for life in self._lives[name]]
        return sorted(lives, key=lambda pod: pod.created)

    def _watch(self) -> None:
        core = self._setup.core
        version = ""
        while not self._stopping.is_set():
            try:
                if not version:
                    namespace = self._setup.namespace
                    listed = call_json(
                        core.list_namespaced_pod, namespace, label_selector=HELPER_SELECTOR
                    )
                    for pod in listed["items"]:
                        self._record("ADDED", pod)
                    version = listed["metadata"]["resourceVersion"]
                stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                    core.list_namespaced_pod,
                    self._setup.namespace,
                    label_selector=HELPER_SELECTOR,
                    resource_version=version,
                    timeout_seconds=5,
                )
                for event in stream:
                    pod = event["raw_object"]
                    if event["type"] == "ERROR":
                        version = ""
                        break
                    version = pod["metadata"]["resourceVersion"]
                    self._record(event["type"], pod)
                    if self._stopping.is_set():
                        break
            except (ApiException, HTTPError, OSError):
                # The API server went away (a test restarts it): list again once it is back.
                version = ""
                self._stopping.wait(0.5)

    def _record(self, kind: str, pod: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        name = metadata["name"]
        phase = (pod.get("status") or {}).get("phase")
        with self._lock:
            self._position += 1
            lives = self._lives.setdefault(name, [])
            if not lives or (lives[-1].ended is not None and kind == "ADDED"):
                annotations = metadata.get("annotations") or {}
                labels = metadata.get("labels") or {}
                volumes = json.loads(annotations.get(BATCH_VOLUMES, "[]")) or [
                    labels.get("local-path-storage.io/volume", "")
                ]
                lives.append(
                    HelperPodSeen(
                        name,
                        labels.get("local-path-storage.io/helper-action", ""),
                        tuple(volumes),
                        self._position,
                        None,
                    )
                )
            if lives[-1].ended is None and (kind == "DELETED" or phase in ("Succeeded", "Failed")):
                lives[-1] = dataclasses.replace(lives[-1], ended=self._position)
            lives[-1] = dataclasses.replace(lives[-1], status=pod.get("status") or {})


def overlapping_runs(pods: Iterable[HelperPodSeen]) -> list[str]:
    """Pairs of pods serving one volume whose lives (creation to end) overlap."""
    by_volume: dict[str, list[HelperPodSeen]] = {}
    for pod in pods:
        if pod.action not in ("prepare", "create", "delete", "finish"):
            continue
        for volume in pod.volumes:
            by_volume.setdefault(volume, []).append(pod)
    found = []
    for volume, served in by_volume.items():
        served.sort(key=lambda pod: pod.created)
        for earlier, later in itertools.pairwise(served):
            if earlier.ended is None or earlier.ended > later.created:
                found.append(f"{volume}: {earlier.name} and {later.name}")
    return found
