"""The frame of each of the node plugin's watches (its own node's PVs, its own node's
VolumeSnapshotContents): a label-selected informer, a work queue keyed by name with a
per-object exponential backoff, a few workers, and an event recorder. What a watch does with
an object is its own `process`.

Why a label-selected informer: the plugin lists and watches only the objects labelled for its
node (`node_selector`), never every PV or content: a steady cluster costs the API server one idle
watch per node and kind.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from provisioner.kube.client import EventRecorder, KubeClients
from provisioner.kube.informer import Informer, name_key
from provisioner.kube.object_decoding import DictObjects
from provisioner.loop.controller import WorkQueue
from provisioner.objects.node_handoff import node_selector

log = logging.getLogger(__name__)

R = TypeVar("R")

MERGE_PATCH = "application/merge-patch+json"
WORKERS = 2


class NodeWatch(Generic[R]):
    """`kind` names the objects in logs and threads (`volume`, `content`); `path` is their
    collection's API path; `to_record` what the informer keeps of each."""

    def __init__(
        self,
        kind: str,
        clients: KubeClients,
        path: str,
        to_record: Callable[[Mapping[str, Any]], R],
        *,
        driver_name: str,
        node_name: str,
        base_delay: float,
        max_delay: float,
    ) -> None:
        self.kind = kind
        self.clients = clients
        self.driver_name = driver_name
        self.node_name = node_name
        self.informer: Informer[R] = Informer(
            f"node-{kind}s-{node_name}",
            clients.list_function(path),
            objects=DictObjects(),
            to_record=to_record,
            key=name_key,
            label_selector=node_selector(node_name),
        )
        self.queue: WorkQueue[str] = WorkQueue(
            f"node-{kind}s", base_delay=base_delay, max_delay=max_delay
        )
        self.events = EventRecorder(
            clients, driver_name, host=node_name, spare_capacity=clients.spare_capacity
        )
        self.informer.add_event_handler(
            on_add=self._enqueue, on_update=self._enqueue, on_delete=self._enqueue
        )
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.informer.start()
        for number in range(WORKERS):
            thread = threading.Thread(
                target=self._work, name=f"node-{self.kind}s-{number}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self.queue.shutdown()
        self.informer.stop()
        for thread in self._threads:
            thread.join(10)
        self.events.stop()

    def liveness(self) -> str | None:
        return self.informer.liveness()

    def process(self, name: str) -> bool:
        """Does what the object asks for; True when done (or nothing to do), False to retry."""
        raise NotImplementedError

    def _enqueue(self, key: str, _: R | None, __: R | None) -> None:
        self.queue.add(key)

    def _work(self) -> None:
        while (name := self.queue.get()) is not None:
            try:
                if self.process(name):
                    self.queue.forget(name)
                else:
                    self.queue.add_rate_limited(name)
            except Exception:
                log.exception("%s %s: unexpected failure", self.kind, name)
                self.queue.add_rate_limited(name)
            finally:
                self.queue.done(name)
