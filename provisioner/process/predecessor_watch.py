"""Watching, before and while working, for the pods of the provisioner this one takes over.

rancher/local-path-provisioner v0.0.37 holds no leader lock (its main.go turns the library's
election off), so there is no Lease the two could share. A replica taking over its installation
(stack config `adopt`, `--predecessor-selector`) therefore starts its controller only once no
pod of rancher's is left in its namespace (which pods are rancher's: process/predecessors.py),
rancher's unlabelled helper pods and terminating pods included: such a pod works until its
process ends. The leader waits (standbys wait on the lease anyway), after winning the lease and
before its informers start, so no claim is looked at while rancher may still provision it.

And it keeps watching while it leads: a predecessor's pod that appears then (rancher scaled up
again, a helper pod of a rancher running elsewhere) is reported to `on_returned`, once; the
process stops working on it (app.py). One informer serves both: the namespace's pods but our
helper pods, which a label selector leaves on the server, so it holds a handful of pods.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from urllib3.exceptions import HTTPError

from provisioner.helper_pods.pod_shapes import HELPER_POD_LABEL
from provisioner.kube.api_error import ApiError
from provisioner.kube.client import KubeClients
from provisioner.kube.informer import Informer
from provisioner.kube.object_decoding import ObjectDecoding
from provisioner.process.predecessors import (
    OurPods,
    Pod,
    PredecessorPod,
    describe_pods,
    our_pods,
    parse_selector,
    pod_name,
    predecessor_pod,
)

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
"""Between attempts to read our own pod, and between checks of `stopping` while waiting."""


class PredecessorWatch:
    def __init__(
        self,
        clients: KubeClients,
        namespace: str,
        selector: str,
        own_pod: str,
        *,
        on_returned: Callable[[PredecessorPod], None],
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        """`on_returned` runs on the informer's thread, at most once."""
        self._clients = clients
        self._namespace = namespace
        self.selector = selector
        self._labels = parse_selector(selector)
        self._own_pod = own_pod
        self._on_returned = on_returned
        self._poll_seconds = poll_seconds
        self._ours = OurPods(own_pod)
        self._changed = threading.Condition()
        self._leading = False
        self._reported = False
        self._informer: Informer[PredecessorPod] = Informer(
            "predecessor-pods",
            clients.list_function(f"/api/v1/namespaces/{namespace}/pods"),
            objects=ObjectDecoding(Pod),
            to_record=lambda pod: predecessor_pod(pod, self._labels, self._ours),
            key=pod_name,
            label_selector=f"!{HELPER_POD_LABEL}",
        )
        self._informer.add_event_handler(
            on_add=self._seen, on_update=self._seen, on_delete=self._seen
        )

    @property
    def waiting_for(self) -> str:
        """The predecessor's pods the leader waits for ("" when none, or when leading)."""
        with self._changed:
            if self._leading:
                return ""
        return describe_pods(record for _, record in self._informer.items())

    def liveness(self) -> str | None:
        return self._informer.liveness()

    def wait_until_gone(self, stopping: threading.Event) -> bool:
        """True once no pod in the namespace is the predecessor's, from then on reporting any
        that appears; False when `stopping` is set first."""
        own_labels = self._own_pod_labels(stopping)
        if stopping.is_set():
            return False
        self._ours = our_pods(self._own_pod, own_labels)
        self._informer.start()
        while not self._informer.wait_for_sync(self._poll_seconds):
            if stopping.is_set():
                return False
        announced: set[str] = set()
        with self._changed:
            while not stopping.is_set():
                waiting = [record for _, record in self._informer.items()]
                if not waiting:
                    if announced:
                        log.info(
                            "the predecessor's pods (%s) are gone: provisioning", self.selector
                        )
                    self._leading = True
                    return True
                if {pod.name for pod in waiting} - announced:
                    log.info(
                        "not provisioning while the predecessor's pods (%s, and bare pods with a"
                        " hostPath) are in namespace %s: %s",
                        self.selector,
                        self._namespace,
                        "; ".join(f"{pod.name}: {pod.why}" for pod in waiting),
                    )
                    announced |= {pod.name for pod in waiting}
                self._changed.wait(self._poll_seconds)
        return False

    def stop(self) -> None:
        self._informer.stop()

    def _own_pod_labels(self, stopping: threading.Event) -> dict[str, str] | None:
        """Our own pod's labels (they tell our other replicas), None when we run in no pod. A
        failed read is retried: not knowing our pods could make us wait for ourselves."""
        if not self._own_pod:
            return None
        path = f"/api/v1/namespaces/{self._namespace}/pods/{self._own_pod}"
        while not stopping.is_set():
            try:
                pod: dict[str, Any] = self._clients.request_json("GET", path)
            except ApiError as error:
                if error.status == HTTPStatus.NOT_FOUND:
                    log.debug("no pod %s: telling our pods by their helper label only", path)
                    return None
                log.warning("reading our own pod %s failed, retrying: %s", path, error)
            except (HTTPError, OSError) as error:
                log.warning("reading our own pod %s failed, retrying: %s", path, error)
            else:
                return dict((pod.get("metadata") or {}).get("labels") or {})
            stopping.wait(self._poll_seconds)
        return None

    def _seen(self, key: str, old: PredecessorPod | None, new: PredecessorPod | None) -> None:
        with self._changed:
            self._changed.notify_all()
            if not self._leading or new is None or self._reported:
                return
            self._reported = True
        self._on_returned(new)
