"""Runs the pods whose image is in the image table, standing in for the kubelet.

Why: kwok fakes every pod, but the provisioner deployed by `pulumi up` must really run and
bind claims. This watches bound pods (helper pods excepted: the helper runner owns those) and
gives each one whose image is in the table a worker (pod_worker.py) once its node exists; it
watches ConfigMaps too, so a changed one reaches the volumes of the pods that mount it within
a second, as the kubelet's watch-based ConfigMap manager does.

Why it stays beside the real nodes, which run the Deployment with a real kubelet in
tests/engine/test_real_node_stack.py and test_upgrade_rollback.py: every other `pulumi up` of
the tests (tests/engine, tests/localcluster/test_provisioner_deployment.py) deploys onto the
session cluster's kwok nodes (for the reasons in helper_runner.py), where only this runner
runs the provisioner's pods. So it emulates what that Deployment uses and no more: httpGet
probes (probes.py), `value` and `fieldRef` variables (pod_env.py), runAsUser, runAsGroup,
runAsNonRoot and a read-only root (image_pod_plan.py), ConfigMap, emptyDir and projected
token volumes (pod_volumes.py); tests/localcluster/test_image_pods.py checks each on the
`localcluster.invalid/host-python` image.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from localcluster.event_log import EventLog
from localcluster.helper_pods import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE
from localcluster.image_pod_plan import RestartBackoff
from localcluster.image_table import ImageTable
from localcluster.pod_api import PodRunnerBase
from localcluster.pod_network import pod_ip_for
from localcluster.pod_worker import PodWorker
from localcluster.resource_watch import ResourceWatch
from localcluster.running_pod import WorkerContext

POD_RESYNC_SECONDS = 10
CONFIG_MAP_RESYNC_SECONDS = 30
STOP_WAIT_SECONDS = 15.0
LOOPBACK = "127.0.0.1"


class ImagePodRunner(PodRunnerBase):
    """Watches bound, non-helper pods in all namespaces; runs those of the image table."""

    def __init__(
        self,
        api_client: client.ApiClient,
        cluster_dir: Path,
        node_dir: Callable[[str], Path],
        log: EventLog,
        *,
        table: ImageTable,
        api_port: int,
        backoff: RestartBackoff,
    ) -> None:
        super().__init__(api_client, cluster_dir, node_dir, log)
        self.table = table
        self.api_port = api_port
        self.backoff = backoff
        self._workers: dict[str, PodWorker] = {}
        self._config_map_versions: dict[tuple[str, str], str] = {}
        self._pods_started = 0
        self._watches = [
            ResourceWatch(
                "image-pod-runner",
                self.core.list_pod_for_all_namespaces,
                on_listed=self._pods_listed,
                on_changed=self._pod_changed,
                log=log,
                stopping=self._stopping,
                resync_seconds=POD_RESYNC_SECONDS,
                label_selector=f"{HELPER_POD_LABEL}!={HELPER_POD_LABEL_VALUE}",
                field_selector="spec.nodeName!=",
            ),
            ResourceWatch(
                "image-pod-config-maps",
                self.core.list_config_map_for_all_namespaces,
                on_listed=self._config_maps_listed,
                on_changed=lambda _, config_map: self._config_map_seen(config_map),
                log=log,
                stopping=self._stopping,
                resync_seconds=CONFIG_MAP_RESYNC_SECONDS,
            ),
        ]

    def start(self) -> None:
        for resource_watch in self._watches:
            resource_watch.start()

    def stop(self) -> None:
        """Kills every container and pause process at once (by PID) and waits for them."""
        self._stopping.set()
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            worker.cancel()
        for worker in workers:
            worker.finished.wait(timeout=STOP_WAIT_SECONDS)
        for resource_watch in self._watches:
            resource_watch.join()

    # Pods.
    def _pods_listed(self, pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            self._consider(pod)
        present = {pod["metadata"]["uid"] for pod in pods}
        with self._lock:
            for uid in [uid for uid in self._workers if uid not in present]:
                self._workers.pop(uid).cancel()

    def _pod_changed(self, kind: str, pod: dict[str, Any]) -> None:
        if kind != "DELETED":
            self._consider(pod)
            return
        with self._lock:
            worker = self._workers.pop(pod["metadata"]["uid"], None)
        if worker is not None:
            worker.cancel()

    def _consider(self, pod: dict[str, Any]) -> None:
        runtime = self.table.runtime_for(pod)
        metadata = pod["metadata"]
        if runtime is None or self._stopping.is_set():
            return
        with self._lock:
            worker = self._workers.get(metadata["uid"])
        if worker is not None:
            worker.update(pod)
            return
        phase = (pod.get("status") or {}).get("phase")
        node = self.read_node(pod["spec"]["nodeName"])
        if node is None:
            return  # no kubelet: it waits, and runs if the node appears
        if metadata.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
            if metadata.get("deletionTimestamp"):  # nothing of it runs: confirm at once
                self.api.force_delete(metadata["namespace"], metadata["name"], metadata["uid"])
            return
        self._start_worker(pod, node, runtime)

    def _start_worker(self, pod: dict[str, Any], node: dict[str, Any], runtime: Any) -> None:
        with self._lock:
            self._pods_started += 1
            index = self._pods_started
        addresses = (node.get("status") or {}).get("addresses") or []
        host_ip = next((a["address"] for a in addresses if a["type"] == "InternalIP"), LOOPBACK)
        context = WorkerContext(
            core=self.core,
            api=self.api,
            log=self.log,
            cluster_dir=self.cluster_dir,
            node_dir=self.node_dir(pod["spec"]["nodeName"]),
            runtime=runtime,
            backoff=self.backoff,
            api_port=self.api_port,
            pod_ip=pod_ip_for(index),
            host_ip=host_ip,
            on_process=self.started_pids.append,
        )
        worker = PodWorker(pod, context)
        with self._lock:
            self._workers[worker.uid] = worker
        worker.log(f"starting on {pod['spec']['nodeName']} as {context.pod_ip}")
        threading.Thread(target=worker.run, name=f"pod-{worker.name}", daemon=True).start()

    # ConfigMaps: a new resourceVersion rewrites the volumes of the pods that mount it.
    def _config_maps_listed(self, config_maps: list[dict[str, Any]]) -> None:
        for config_map in config_maps:
            self._config_map_seen(config_map)

    def _config_map_seen(self, config_map: dict[str, Any]) -> None:
        metadata = config_map["metadata"]
        key = (metadata["namespace"], metadata["name"])
        version = str(metadata.get("resourceVersion", ""))
        with self._lock:
            if self._config_map_versions.get(key) == version:
                return
            self._config_map_versions[key] = version
            workers = [
                worker
                for worker in self._workers.values()
                if worker.namespace == key[0] and key[1] in worker.config_maps
            ]
        for worker in workers:
            worker.volumes_changed.set()
