"""The few pod writes a kubelet makes, retried through API server restarts, and the parts
both runners share.

Why: both runners (helper pods, image-table pods) report status and confirm deletions, and a
test may restart kube-apiserver at any moment; a write must then be retried for a while rather
than lost, while a pod that is already gone (404) or was replaced (409 on the uid
precondition) needs nothing more.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.event_log import EventLog
from localcluster.raw_api import call_json
from localcluster.real_node_config import REAL_NODE_LABEL

API_RETRY_SECONDS = 30.0
API_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)


class PodApi:
    """Status patches and confirmed deletions for the pods a runner owns."""

    def __init__(self, core: client.CoreV1Api, log: EventLog, stopping: threading.Event) -> None:
        self.core = core
        self.log = log
        self.stopping = stopping

    def patch_status(self, pod: Mapping[str, Any], pod_status: dict[str, Any]) -> None:
        """A JSON merge patch of pods/status: lists (conditions, containerStatuses) are
        replaced whole, so a container's state never keeps a stale key beside the new one."""
        metadata = pod["metadata"]
        body = {"metadata": {"uid": metadata["uid"]}, "status": pod_status}
        # The response is read as JSON, not built into the client's models: a kubelet does not
        # pay for decoding the pod back, and a pod of many containers made that the runner's
        # main cost per container.
        self.with_retries(
            lambda: call_json(
                self.core.patch_namespaced_pod_status,
                metadata["name"],
                metadata["namespace"],
                body,
                _content_type="application/merge-patch+json",
            )
        )

    def force_delete(self, namespace: str, name: str, uid: str) -> None:
        """Deletes with grace 0, as a kubelet confirms a deletion once its containers are gone
        (helper pods have no kubelet to confirm a graceful one)."""
        options = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)
        )
        self.with_retries(
            lambda: self.core.delete_namespaced_pod(
                name, namespace, body=options, grace_period_seconds=0
            )
        )

    def with_retries(self, call: Callable[[], object]) -> None:
        deadline = time.monotonic() + API_RETRY_SECONDS
        while True:
            try:
                call()
                return
            except ApiException as error:
                if error.status in (HTTPStatus.NOT_FOUND, HTTPStatus.CONFLICT):
                    return
                if time.monotonic() >= deadline or self.stopping.is_set():
                    self.log.write(f"API call failed: {error.status} {error.reason}")
                    return
            except (urllib3.exceptions.HTTPError, OSError) as error:
                if time.monotonic() >= deadline or self.stopping.is_set():
                    self.log.write(f"API call failed: {error!r}")
                    return
            time.sleep(0.5)


class PodRunnerBase:
    """What both runners share: the API, the cluster's directories, their log, a stop flag,
    and the PIDs of every process they start (for `LocalCluster.pids()`)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        cluster_dir: Path,
        node_dir: Callable[[str], Path],
        log: EventLog,
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        self.cluster_dir = cluster_dir
        self.node_dir = node_dir
        self.log = log
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.api = PodApi(self.core, log, self._stopping)
        self.started_pids: list[int] = []

    def read_node(self, name: str) -> dict[str, Any] | None:
        """The Node, None when it does not exist: without a node, nothing runs a pod. A real
        node's kubelet runs its own pods, so for the emulation it is None too."""
        try:
            node = call_json(self.core.read_node, name)
        except ApiException as error:
            if error.status == HTTPStatus.NOT_FOUND:
                return None
            raise
        labels = node["metadata"].get("labels") or {}
        return None if REAL_NODE_LABEL in labels else node
