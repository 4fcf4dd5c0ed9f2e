"""Keeps our CSIStorageCapacity objects equal to the desired set, with few writes.

Volumes come and go in bursts (200 claims in a few seconds); a write per event would cost more
API calls than the provisioning. So events only `poke()`, and the publisher recomputes the
whole desired set from the local-path provisioner's book and writes only the differences
(`capacity_changes`) against what it last published. Its window adapts: a lone change after a
quiet spell is published within `min_interval`; while changes keep coming the window doubles
up to `max_interval`, so a burst costs a handful of passes whatever its size, and what the
scheduler sees is never older than `max_interval`. Reads are kept off the hot path too: the
objects carrying our owner label and our CSIDriver are read at start, after a conflict, and on
each `resync`, which also repairs objects someone else changed or deleted. Runs on the leader
only: the local-path provisioner starts and stops it with the controller.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from http import HTTPStatus
from typing import Protocol

from urllib3.exceptions import HTTPError

from provisioner.capacity.storage_capacity import (
    CAPACITY_OWNER_LABEL,
    CapacityObject,
    capacity_changes,
    capacity_manifest,
    capacity_object_from_api,
    owner_label_value,
)
from provisioner.kube.api_error import ApiError
from provisioner.kube.client import KubeClients
from provisioner.kube.metrics import Metrics

log = logging.getLogger(__name__)

MERGE = "application/merge-patch+json"


class CapacitySource(Protocol):
    """Where the desired CSIStorageCapacity set is drawn from (the config, nodes, classes and
    the path book), read on the publisher's thread."""

    def desired(self, driver_wants_capacity: bool) -> Mapping[str, CapacityObject]:
        """Given whether our CSIDriver asks for capacity, the desired objects by name."""
        ...


def next_window(window: float, waited: float, min_interval: float, max_interval: float) -> float:
    """The publisher's next window, given the current one and how long it waited for this
    change since its last pass: a wait longer than the window means changes had stopped (back
    to the shortest window), a shorter one means a burst goes on (twice as long, capped)."""
    if waited > window:
        return min_interval
    return min(window * 2, max_interval)


class CapacityPublisher:
    def __init__(
        self,
        clients: KubeClients,
        *,
        namespace: str,
        provisioner_name: str,
        source: CapacitySource,
        metrics: Metrics,
        min_interval: float = 1.0,
        max_interval: float = 4.0,
        resync: float = 60.0,
    ) -> None:
        self._clients = clients
        self._namespace = namespace
        self._provisioner_name = provisioner_name
        self._source = source
        self._writes = metrics.csi_storage_capacity_writes_total
        self._min_interval = min_interval
        self._max_interval = max_interval
        self._resync = resync
        # What we last published (by name) and whether our CSIDriver asks for capacity, as
        # read at the last full pass; None forces a full pass (list and driver read).
        self._published: dict[str, CapacityObject | None] | None = None
        self._driver_wants = False
        self._poked = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._collection = f"/apis/storage.k8s.io/v1/namespaces/{namespace}/csistoragecapacities"

    def poke(self) -> None:
        """Something that changes budgets happened: publish soon (coalesced). An event already
        set is left alone (a first list pokes once per volume): the loop clears it before it
        reads what to publish, so this change is in that pass."""
        if not self._poked.is_set():
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
        last = -self._resync
        window = self._min_interval
        next_full = 0.0
        while not self._stopped.is_set():
            self._poked.wait(max(0.0, next_full - time.monotonic()))
            if self._stopped.is_set():
                return
            now = time.monotonic()
            if self._poked.is_set():
                window = next_window(window, now - last, self._min_interval, self._max_interval)
                # Let the rest of a burst gather: one pass per window at most.
                time.sleep(max(0.0, last + window - now))
            self._poked.clear()
            last = time.monotonic()
            full = last >= next_full
            try:
                self.publish_once(full=full)
                if full:
                    next_full = last + self._resync
            except (ApiError, HTTPError, OSError) as error:
                log.warning("publishing CSIStorageCapacity failed, retrying: %s", error)
                self._published = None
                self._poked.set()
            except Exception:
                log.exception("publishing CSIStorageCapacity failed, retrying")
                self._published = None
                self._poked.set()

    def publish_once(self, *, full: bool = True) -> int:
        """One reconciliation; returns the number of writes. A full one reads our CSIDriver and
        lists our objects; otherwise what we last published stands for them."""
        if full or self._published is None:
            self._driver_wants = self._driver_wants_capacity()
            selector = f"{CAPACITY_OWNER_LABEL}={owner_label_value(self._provisioner_name)}"
            listed = self._clients.request_json(
                "GET", self._collection, query={"labelSelector": selector}
            )
            self._published = {
                str(item["metadata"]["name"]): capacity_object_from_api(item)
                for item in listed.get("items") or ()
            }
        desired = self._source.desired(self._driver_wants)
        published = self._published
        changes = capacity_changes(desired, published)
        for name in changes.delete:
            if self._write("delete", "DELETE", f"{self._collection}/{name}"):
                published.pop(name, None)
        for wanted in changes.create:
            body = capacity_manifest(
                wanted, namespace=self._namespace, provisioner_name=self._provisioner_name
            )
            if self._write("create", "POST", self._collection, body=body):
                published[wanted.name] = wanted
        for wanted in changes.update:
            body = capacity_manifest(
                wanted, namespace=self._namespace, provisioner_name=self._provisioner_name
            )
            patch = {key: body[key] for key in ("capacity", "maximumVolumeSize")}
            path = f"{self._collection}/{wanted.name}"
            if self._write("update", "PATCH", path, body=patch, merge=True):
                published[wanted.name] = wanted
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
    ) -> bool:
        """Whether the write took; a conflict or a missing object means someone else wrote
        (an old leader, a user): the next pass is a full one that sees what they did."""
        self._writes.labels(operation=operation).inc()
        try:
            self._clients.request_json(
                method, path, body=body, content_type=MERGE if merge else None
            )
        except ApiError as error:
            if error.status not in (HTTPStatus.NOT_FOUND, HTTPStatus.CONFLICT):
                raise
            self._published = None
            self._poked.set()
            return False
        return True

    def _driver_wants_capacity(self) -> bool:
        """Whether our CSIDriver has storageCapacity: true (the scheduler then needs objects
        for every node, budget or not). A name with a `/` cannot name a CSIDriver (a DNS
        subdomain), so there is none to read: asking would read a subresource path instead."""
        if "/" in self._provisioner_name:
            return False
        try:
            driver = self._clients.request_json(
                "GET", f"/apis/storage.k8s.io/v1/csidrivers/{self._provisioner_name}"
            )
        except ApiError as error:
            if error.status == HTTPStatus.NOT_FOUND:
                return False
            raise
        return bool((driver.get("spec") or {}).get("storageCapacity"))
