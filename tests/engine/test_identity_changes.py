"""Changing what identifies an installation on a deployed stack.

`namespace`: the Deployment, its Lease and everything namespaced move. The old provisioner
must be gone before the new one starts, or two leaders (one Lease per namespace) work the same
claims at once; a poll every 0.2 s during `up` sees at most one provisioner pod running, and
claims bind afterwards.

`provisionerName`: volumes made under the old name are not the new provisioner's; preview
says so, naming the old name and what to do, instead of orphaning them silently.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from localcluster import LocalCluster
from tests.engine.support import (
    StackFactory,
    error_lines,
    provisioner_pods,
    unique_suffix,
    up_with_a_bound_claim,
    volume_location,
    wait_provisioner_ready,
)


def running(pods: list[dict[str, Any]]) -> list[str]:
    """Pods whose container runs, terminating or not: each may hold its namespace's Lease."""
    return [
        f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        for pod in pods
        if pod.get("status", {}).get("phase") == "Running"
    ]


class PodWatch:
    """Polls the provisioner pods of some namespaces every 0.2 s, in a thread, until stopped."""

    def __init__(self, cluster: LocalCluster, namespaces: list[str]) -> None:
        self.cluster = cluster
        self.namespaces = namespaces
        self.most: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            seen: list[str] = []
            for namespace in self.namespaces:
                seen += running(provisioner_pods(self.cluster, namespace))
            self.samples += 1
            if len(seen) > len(self.most):
                self.most = seen
            time.sleep(0.2)

    def __enter__(self) -> PodWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def test_namespace_change_never_runs_two_provisioners_and_claims_bind_after(
    stacks: StackFactory, cluster: LocalCluster
) -> None:
    stack, tenant, _ = up_with_a_bound_claim(stacks, "before")
    names = stack.names

    new_namespace = f"lps-moved-{unique_suffix()}"
    stack.set_config("namespace", new_namespace)
    with PodWatch(cluster, [names.namespace, new_namespace]) as watch:
        stack.up()
    assert watch.samples > 10
    assert len(watch.most) <= 1, f"running at once: {watch.most}"

    wait_provisioner_ready(cluster, new_namespace)
    assert provisioner_pods(cluster, names.namespace) == []
    tenant.claim_with_consumer("after")
    _, _, on_disk = volume_location(cluster, tenant.wait_bound("after"))
    assert on_disk.is_dir()


def test_provisioner_name_change_with_volumes_warns_in_preview(
    stacks: StackFactory, cluster: LocalCluster
) -> None:
    stack, _, _ = up_with_a_bound_claim(stacks, "old-name")
    names = stack.names

    renamed = f"renamed-{names.suffix}.local-path-storage.io/local-path"
    stack.set_config("provisionerName", renamed)
    preview = stack.preview()
    warnings = [line.strip() for line in preview.output.splitlines() if "warning:" in line]
    assert any(names.provisioner_name in line and renamed in line for line in warnings), (
        preview.output
    )
    assert error_lines(preview.output) == []
    # Unchanged, the same stack warns about nothing.
    stack.set_config("provisionerName", names.provisioner_name)
    assert names.provisioner_name not in stack.preview().output
