"""The leader's periodic, low-rate look at the nodes: the orphan listing (for the orphan metrics)
and the usage measurement (for the per-volume used-bytes metric and the Warning on a claim
whose volume outgrew its capacity).

Why periodic on the leader rather than in the `orphans` command: the metrics must be current
without anyone running a command, and the leader already holds what the scan needs in its
informer caches (PVs, nodes, helper pods), so a scan lists nothing from the API and costs two
short helper pods per node and base path, once an interval (default an hour). It never
removes anything: removal stays an operator's `orphans --delete`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from provisioner.configuration.config import ConfigBundle
from provisioner.configuration.config_watch import ConfigSource
from provisioner.helper_pods.pod_runner import HelperPodError
from provisioner.helper_pods.pods import HelperPods
from provisioner.kube.client import EventRecorder, ObjectReference
from provisioner.kube.metrics import Metrics
from provisioner.objects.records import NodeRecord, VolumeRecord
from provisioner.provisioning.annotations import PROVISIONED_BY
from provisioner.provisioning.caches import Caches
from provisioner.provisioning.volume_facts import resolve_volume_node
from provisioner.scans.orphan_scan import OrphanScan, holdings_of
from provisioner.scans.orphans import base_paths_by_node
from provisioner.scans.usage import (
    MeasuredVolume,
    batches,
    build_usage_pod,
    outgrown_message,
    parse_usage,
)

log = logging.getLogger(__name__)

FIRST_SCAN_DELAY_SECONDS = 300.0

OUTGREW_CAPACITY = "VolumeOutgrewCapacity"


class NodeScanner:
    def __init__(
        self,
        pods: HelperPods[Any],
        caches: Caches,
        config: ConfigSource,
        metrics: Metrics,
        recorder: EventRecorder,
        *,
        provisioner_name: str,
        namespace: str,
        service_account: str,
        interval_seconds: float,
    ) -> None:
        self._pods = pods
        self._caches = caches
        self._config = config
        self._metrics = metrics
        self._recorder = recorder
        self._provisioner_name = provisioner_name
        self._namespace = namespace
        self._service_account = service_account
        self._interval = interval_seconds
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._volume_labels: set[tuple[str, str, str]] = set()
        self._node_labels: set[str] = set()

    def start(self) -> None:
        if self._interval <= 0:
            return
        self._thread = threading.Thread(target=self._loop, name="node-scan", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        # Not at once: a new leader first works off what waited for it (a restart after a
        # crash, a failover), and the scan's pods would only compete with that work.
        first_delay = min(self._interval, FIRST_SCAN_DELAY_SECONDS)
        while not self._stopping.wait(first_delay):
            first_delay = self._interval
            try:
                self.scan_once()
            except Exception:
                log.exception("the node scan failed; trying again at the next interval")

    def scan_once(self) -> None:
        bundle = self._config.current
        volumes = [volume for _, volume in self._caches.volumes.items()]
        nodes = [node for _, node in self._caches.nodes.items()]
        pods = [pod for _, pod in self._caches.helper_pods.items()]
        holdings = holdings_of(volumes, nodes, pods, self._provisioner_name)
        scan = OrphanScan(
            self._pods,
            bundle,
            namespace=self._namespace,
            service_account=self._service_account,
        )
        report = scan.scan(holdings)
        for problem in report.problems:
            log.warning("node scan: %s", problem)
        orphans: dict[str, int] = dict.fromkeys(holdings.nodes, 0)
        missing: dict[str, int] = dict.fromkeys(holdings.nodes, 0)
        for orphan in report.orphans:
            orphans[orphan.node] = orphans.get(orphan.node, 0) + 1
        for gone in report.missing:
            missing[gone.node] = missing.get(gone.node, 0) + 1
        for node in self._node_labels - set(orphans):
            self._metrics.orphan_directories.remove(node)
            self._metrics.volumes_missing_directory.remove(node)
        for node, count in orphans.items():
            self._metrics.orphan_directories.labels(node).set(count)
            self._metrics.volumes_missing_directory.labels(node).set(missing.get(node, 0))
        self._node_labels = set(orphans)
        self._measure(bundle, volumes, holdings.nodes)

    def _measure(
        self, bundle: ConfigBundle, volumes: list[VolumeRecord], nodes: dict[str, NodeRecord]
    ) -> None:
        ours = [v for v in volumes if v.annotations.get(PROVISIONED_BY) == self._provisioner_name]
        located: dict[str, list[VolumeRecord]] = {}
        for volume in ours:
            node, _ = resolve_volume_node(volume, nodes) if volume.affinity else (None, None)
            if node:
                located.setdefault(node, []).append(volume)
        measured: list[MeasuredVolume] = []
        for node, base_paths in base_paths_by_node(bundle.config, located).items():
            for base_path in base_paths:
                for batch in batches(located[node], base_path):
                    measured += self._measure_batch(bundle, node, base_path, batch)
        seen: set[tuple[str, str, str]] = set()
        gauge = self._metrics.volume_used_bytes
        for result in measured:
            labels = (result.volume_name, result.node, result.storage_class)
            if result.used_bytes is None:
                continue
            gauge.labels(*labels).set(result.used_bytes)
            seen.add(labels)
            if result.outgrown:
                self._warn_outgrown(result, volumes)
        for labels in self._volume_labels - seen:
            gauge.remove(*labels)
        self._volume_labels = seen

    def _measure_batch(
        self, bundle: ConfigBundle, node: str, base_path: str, batch: list[VolumeRecord]
    ) -> list[MeasuredVolume]:
        manifest = build_usage_pod(
            bundle,
            self._namespace,
            self._service_account,
            node=node,
            base_path=base_path,
            batch=batch,
        )
        try:
            _, message = self._pods.run_for_message(
                manifest, float(bundle.config.cmd_timeout_seconds)
            )
        except HelperPodError as error:
            log.warning("measuring %s on %s: %s", base_path, node, error)
            return []
        measured = parse_usage(message, node, batch)
        if measured is None:
            log.warning("measuring %s on %s: an incomplete answer", base_path, node)
            return []
        return measured

    def _warn_outgrown(self, volume: MeasuredVolume, volumes: list[VolumeRecord]) -> None:
        record = next((v for v in volumes if v.name == volume.volume_name), None)
        ref = record.claim_ref if record is not None else None
        if ref is None:
            return
        self._recorder.warning(
            ObjectReference(
                kind="PersistentVolumeClaim", name=ref.name, namespace=ref.namespace, uid=ref.uid
            ),
            OUTGREW_CAPACITY,
            outgrown_message(volume),
        )
