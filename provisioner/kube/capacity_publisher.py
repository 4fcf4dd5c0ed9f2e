"""Keeps our CSIStorageCapacity objects equal to the desired set, with few writes.

Volumes come and go in bursts (200 claims in a few seconds); a write per event would cost more
API calls than the provisioning. So events only `poke()`: the publisher wakes at most once per
`min_interval`, recomputes the whole desired set from the controller's state, lists the
objects carrying our owner label, and writes only the differences (`capacity_changes`). A
periodic run (`resync`) repairs objects someone else changed or deleted. Runs on the leader
only: the controller starts and stops it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from provisioner.kube.client import KubeClients
from provisioner.kube.metrics import Metrics
from provisioner.storage_capacity import (
    CAPACITY_OWNER_LABEL,
    CapacityObject,
    capacity_changes,
    capacity_manifest,
    capacity_object_from_api,
    owner_label_value,
)

log = logging.getLogger(__name__)

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
MERGE = "application/merge-patch+json"
DesiredCapacities = Callable[[bool], Mapping[str, CapacityObject]]
"""Given whether our CSIDriver asks for capacity, the desired objects by name."""


class CapacityPublisher:
    def __init__(
        self,
        clients: KubeClients,
        *,
        namespace: str,
        provisioner_name: str,
        desired: DesiredCapacities,
        metrics: Metrics,
        min_interval: float = 1.0,
        resync: float = 60.0,
    ) -> None:
        self._clients = clients
        self._namespace = namespace
        self._provisioner_name = provisioner_name
        self._desired = desired
        self._writes = metrics.csi_storage_capacity_writes_total
        self._min_interval = min_interval
        self._resync = resync
        self._poked = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._collection = f"/apis/storage.k8s.io/v1/namespaces/{namespace}/csistoragecapacities"

    def poke(self) -> None:
        """Something that changes budgets happened: publish soon (coalesced)."""
        self._poked.set()

    def start(self) -> None:
        self._poked.set()
        self._thread = threading.Thread(target=self._loop, name="capacity-publisher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stopped.set()
        self._poked.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        last = 0.0
        while not self._stopped.is_set():
            self._poked.wait(self._resync)
            if self._stopped.is_set():
                return
            # Let a burst of pokes gather: one publication per interval at most.
            time.sleep(max(0.0, last + self._min_interval - time.monotonic()))
            self._poked.clear()
            last = time.monotonic()
            try:
                self.publish_once()
            except (ApiException, HTTPError, OSError) as error:
                log.warning("publishing CSIStorageCapacity failed, retrying: %s", error)
                self._poked.set()
            except Exception:
                log.exception("publishing CSIStorageCapacity failed, retrying")
                self._poked.set()

    def publish_once(self) -> int:
        """One reconciliation; returns the number of writes."""
        desired = self._desired(self._driver_wants_capacity())
        selector = f"{CAPACITY_OWNER_LABEL}={owner_label_value(self._provisioner_name)}"
        listed = self._clients.request_json(
            "GET", self._collection, query={"labelSelector": selector}
        )
        current = {
            str(item["metadata"]["name"]): capacity_object_from_api(item)
            for item in listed.get("items") or ()
        }
        changes = capacity_changes(desired, current)
        for name in changes.delete:
            self._write("delete", "DELETE", f"{self._collection}/{name}")
        for wanted in changes.create:
            body = capacity_manifest(
                wanted, namespace=self._namespace, provisioner_name=self._provisioner_name
            )
            self._write("create", "POST", self._collection, body=body)
        for wanted in changes.update:
            body = capacity_manifest(
                wanted, namespace=self._namespace, provisioner_name=self._provisioner_name
            )
            patch = {key: body[key] for key in ("capacity", "maximumVolumeSize")}
            self._write(
                "update", "PATCH", f"{self._collection}/{wanted.name}", body=patch, merge=True
            )
        if changes:
            log.info(
                "CSIStorageCapacity: %d created, %d updated, %d deleted",
                len(changes.create),
                len(changes.update),
                len(changes.delete),
            )
        return len(changes)

    def _write(
        self,
        operation: str,
        method: str,
        path: str,
        *,
        body: object = None,
        merge: bool = False,
    ) -> None:
        self._writes.labels(operation=operation).inc()
        try:
            self._clients.request_json(
                method, path, body=body, content_type=MERGE if merge else None
            )
        except ApiException as error:
            # Another writer (an old leader) got there first: the next run sees the result.
            if error.status not in (HTTP_NOT_FOUND, HTTP_CONFLICT):
                raise
            self._poked.set()

    def _driver_wants_capacity(self) -> bool:
        """Whether our CSIDriver has storageCapacity: true (the scheduler then needs objects
        for every node, budget or not)."""
        try:
            driver = self._clients.request_json(
                "GET", f"/apis/storage.k8s.io/v1/csidrivers/{self._provisioner_name}"
            )
        except ApiException as error:
            if error.status == HTTP_NOT_FOUND:
                return False
            raise
        return bool((driver.get("spec") or {}).get("storageCapacity"))
