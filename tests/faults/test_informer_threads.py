"""No API call on an informer's thread: its event handlers only enqueue keys, so a slow or
failing API call can never stall the delivery of events (client-go's rule).

A real provisioner runs in this process against the local cluster, with every request it
makes recorded with the name of the thread that made it. It binds and releases a claim (a
finalizer added and removed, helper pods followed through the helper-pod informer, the PV
deleted) and collects a finished helper pod left over by a crashed run: informer threads may
only list and watch."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from localcluster import LocalCluster, wait_for
from localcluster.raw_api import manifest
from provisioner.configuration.config import DEFAULT_NODE
from provisioner.helper_pods.pod_shapes import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE
from tests.faults.support import in_process_provisioner, unique_base_path
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    creatable,
    wait_gone,
)

pytestmark = pytest.mark.cluster

HOSTNAME = "kubernetes.io/hostname"


def test_informer_threads_only_list_and_watch(
    make_setup: Callable[..., ProvisionerSetup], cluster: LocalCluster
) -> None:
    base = unique_base_path("threads")
    setup = make_setup(
        ConfigFiles(config={"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]})
    )
    provisioner = in_process_provisioner(setup, cluster)
    calls: list[tuple[str, str, str]] = []
    api_client: Any = provisioner.clients.api_client
    original = api_client.call_api

    def recorded(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        calls.append((threading.current_thread().name, method, url))
        return original(method, url, *args, **kwargs)

    api_client.call_api = recorded
    runner = threading.Thread(target=provisioner.run, name="provisioner-main", daemon=True)
    runner.start()
    try:
        wait_for(lambda: provisioner.controller.has_synced() or None, 60, "informers to sync")
        storage_class = setup.create_class("threads")
        setup.create_claim("data", storage_class)
        setup.create_consumer("app", "data", {HOSTNAME: "node-1"})
        volume_name = setup.wait_bound("data")["metadata"]["name"]
        # A finished helper pod nobody waits for, as a crashed run leaves: the provisioner
        # deletes it (before the fix, from the informer's event handler).
        leftover = f"helper-create-leftover-{setup.suffix}"
        setup.core.create_namespaced_pod(
            setup.namespace,
            manifest(
                {
                    "metadata": {
                        "name": leftover,
                        "labels": {HELPER_POD_LABEL: HELPER_POD_LABEL_VALUE},
                    },
                    "spec": {
                        "nodeName": "node-1",
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
                    },
                }
            ),
        )
        setup.core.delete_namespaced_pod("app", setup.namespace, grace_period_seconds=0)
        setup.core.delete_namespaced_persistent_volume_claim("data", setup.namespace)
        wait_gone(lambda: setup.volume(volume_name), 60, f"volume {volume_name} to be deleted")

        def leftover_gone() -> bool | None:
            pods = setup.core.list_namespaced_pod(setup.namespace).items
            names = [pod.metadata.name for pod in pods if pod.metadata is not None]
            return True if leftover not in names else None

        wait_for(leftover_gone, 60, f"the leftover helper pod {leftover} to be deleted")
    finally:
        provisioner.stop()
        runner.join(60)

    on_informers = [call for call in calls if call[0].startswith("informer-")]
    assert on_informers, "the recorder saw no informer request: it records nothing"
    not_reads = [call for call in on_informers if call[1] != "GET"]
    assert not not_reads, f"API writes on informer threads: {not_reads[:10]}"
    # The writes were made, by workers: the recorder sees them.
    deletes = {url.rsplit("/", 1)[-1] for name, method, url in calls if method == "DELETE"}
    assert {leftover, volume_name} <= deletes, sorted(deletes)
    patches = [call for call in calls if call[1] == "PATCH" and volume_name in call[2]]
    assert patches and all(name.startswith("worker-") for name, _, _ in patches), patches
