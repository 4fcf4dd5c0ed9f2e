"""Deleting a helper pod until the API server has taken the deletion.

A run deletes its pod when it ended (`PodRunner`), and nothing else looks at a finished pod a
run still follows: a DELETE that failed (a 5xx, a timeout, an API server restarting) left the
pod behind for good, for the next leader, or another version of this provisioner, to meet
under the volume's own name. So a deletion that failed is tried again on a timer, with a
backoff, until the server accepts it or says the pod is not there (404), or that the name is
another pod's now (409 on the UID precondition): the thread that asked moves on at once.
"""

from __future__ import annotations

import logging
import threading
from http import HTTPStatus
from typing import Any

from urllib3.exceptions import HTTPError

from provisioner.kube.api_error import ApiError, describe_api_error
from provisioner.kube.client import KubeClients
from provisioner.kube.rate_limit import ItemExponentialBackoff

__all__ = ["FIRST_RETRY_SECONDS", "LAST_RETRY_SECONDS", "PodDeletions", "deletion_backoff"]

log = logging.getLogger(__name__)

FIRST_RETRY_SECONDS = 1.0
LAST_RETRY_SECONDS = 60.0
"""The longest wait between two tries: an API server back from a restart is heard within it."""
DONE_STATUSES = frozenset({HTTPStatus.NOT_FOUND, HTTPStatus.CONFLICT})
"""Answers that end the tries: the pod is gone, or the name is another pod's now."""


def deletion_backoff() -> ItemExponentialBackoff:
    """How long after each failed try a deletion is tried again: one second, doubling, at most
    `LAST_RETRY_SECONDS` (counted per pod)."""
    return ItemExponentialBackoff(FIRST_RETRY_SECONDS, LAST_RETRY_SECONDS)


class PodDeletions:
    """The helper pods being deleted, each tried until the server took its deletion."""

    def __init__(self, clients: KubeClients) -> None:
        self._clients = clients
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], threading.Timer] = {}
        self._backoff = deletion_backoff()
        self._closed = False

    def delete(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """Delete the pod now; if that fails, again and again in the background. Whether the
        server has taken the deletion (or has no such pod) already. `uid`: only that pod of
        the name."""
        key = (namespace, name)
        with self._lock:
            pending = self._pending.pop(key, None)
        if pending is not None:
            pending.cancel()
        self._backoff.forget(key)
        return self._try(key, uid)

    def pending(self) -> set[tuple[str, str]]:
        """The pods (namespace, name) whose deletion is still to be tried again."""
        with self._lock:
            return set(self._pending)

    def close(self) -> None:
        """At a stop: try nothing more (the stop deletes every helper pod itself)."""
        with self._lock:
            self._closed = True
            timers, self._pending = list(self._pending.values()), {}
        for timer in timers:
            timer.cancel()

    def _try(self, key: tuple[str, str], uid: str | None) -> bool:
        namespace, name = key
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._clients.request_json("DELETE", _pod_path(namespace, name), body=body)
            problem = ""
        except ApiError as error:
            problem = "" if error.status in DONE_STATUSES else describe_api_error(error)
        except (HTTPError, OSError) as error:
            problem = str(error) or type(error).__name__
        if not problem:
            failures = self._backoff.num_requeues(key)
            self._backoff.forget(key)
            if failures:
                log.info(
                    "deleted helper pod %s/%s after %d failed tries", namespace, name, failures
                )
            return True
        delay = self._backoff.when(key)
        log.warning(
            "deleting helper pod %s/%s failed (%s): trying again in %gs",
            namespace,
            name,
            problem,
            delay,
        )
        timer = threading.Timer(delay, self._retry, args=(key, uid))
        timer.daemon = True
        timer.name = f"delete-{name}"
        with self._lock:
            if self._closed or key in self._pending:
                return False  # stopping, or a newer deletion of the name took over
            self._pending[key] = timer
        timer.start()
        return False

    def _retry(self, key: tuple[str, str], uid: str | None) -> None:
        with self._lock:
            if self._pending.get(key) is not threading.current_thread():
                return  # cancelled, or replaced by a newer deletion of the name
            del self._pending[key]
        self._try(key, uid)


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"
