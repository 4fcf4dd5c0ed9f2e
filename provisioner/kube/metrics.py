"""Prometheus metrics, under the names sig-storage-lib-external-provisioner uses (so existing
dashboards work) plus our own `local_path_*` ones.

Everything lives in a `CollectorRegistry` owned by the `Metrics` object, never the global one:
tests and benchmarks can run several controllers in one process.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        registry = self.registry
        self.provision_total = Counter(
            "controller_persistentvolumeclaim_provision_total",
            "Claims provisioned successfully.",
            ["class", "source"],
            registry=registry,
        )
        self.provision_failed_total = Counter(
            "controller_persistentvolumeclaim_provision_failed_total",
            "Provisioning attempts that failed.",
            ["class", "source"],
            registry=registry,
        )
        self.provision_duration_seconds = Histogram(
            "controller_persistentvolumeclaim_provision_duration_seconds",
            "Time to provision a claim, helper pod included.",
            ["class", "source"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.delete_total = Counter(
            "controller_persistentvolume_delete_total",
            "Volumes deleted successfully.",
            ["class"],
            registry=registry,
        )
        self.delete_failed_total = Counter(
            "controller_persistentvolume_delete_failed_total",
            "Volume deletions that failed.",
            ["class"],
            registry=registry,
        )
        self.delete_duration_seconds = Histogram(
            "controller_persistentvolume_delete_duration_seconds",
            "Time to delete a volume, helper pod included.",
            ["class"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.helper_pod_duration_seconds = Histogram(
            "local_path_helper_pod_duration_seconds",
            "Helper pod runs from creation to outcome.",
            ["action", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.workqueue_depth = Gauge(
            "workqueue_depth", "Items ready in the work queue.", ["name"], registry=registry
        )
        self.workqueue_adds_total = Counter(
            "workqueue_adds_total", "Items added to the work queue.", ["name"], registry=registry
        )
        self.workqueue_retries_total = Counter(
            "workqueue_retries_total",
            "Items re-added after a failure.",
            ["name"],
            registry=registry,
        )
        self.config_reload_total = Counter(
            "local_path_config_reload_total",
            "Configuration reloads by result (success, invalid).",
            ["result"],
            registry=registry,
        )
        self.csi_storage_capacity_writes_total = Counter(
            "local_path_csistoragecapacity_writes_total",
            "CSIStorageCapacity objects written by the capacity publisher, by operation"
            " (create, update, delete).",
            ["operation"],
            registry=registry,
        )
        self.orphan_directories = Gauge(
            "local_path_orphan_directories",
            "Entries under a base path no PV owns, by node, at the last node scan.",
            ["node"],
            registry=registry,
        )
        self.volumes_missing_directory = Gauge(
            "local_path_volumes_missing_directory",
            "Our PVs whose directory the last node scan did not find, by node.",
            ["node"],
            registry=registry,
        )
        self.volume_used_bytes = Gauge(
            "local_path_volume_used_bytes",
            "Bytes a volume's directory uses (du, one filesystem, no links followed), at the"
            " last node scan.",
            ["volume", "node", "storage_class"],
            registry=registry,
        )
        self.leader = Gauge(
            "leader_election_master_status",
            "1 while this instance holds the leader lease.",
            ["name"],
            registry=registry,
        )

    def queue_metrics(self, name: str) -> WorkQueueMetrics:
        """The `QueueMetrics` for the work queue called `name`."""
        return WorkQueueMetrics(self, name)

    def observe_helper_pod(self, action: str, outcome: str, seconds: float) -> None:
        self.helper_pod_duration_seconds.labels(action=action, outcome=outcome).observe(seconds)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (what /metrics serves)."""
        return generate_latest(self.registry)


class WorkQueueMetrics:
    def __init__(self, metrics: Metrics, name: str) -> None:
        self._depth = metrics.workqueue_depth.labels(name=name)
        self._adds = metrics.workqueue_adds_total.labels(name=name)
        self._retries = metrics.workqueue_retries_total.labels(name=name)

    def added(self) -> None:
        self._adds.inc()

    def retried(self) -> None:
        self._retries.inc()

    def report_depth(self, read: Callable[[], int]) -> None:
        self._depth.set_function(read)
