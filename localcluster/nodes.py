"""Fake nodes: their Node objects (kwok makes them Ready) and their directories on disk.

Why: the provisioner decides per node, so tests need several named, labelled nodes that behave
like real ones for the control plane (Ready, schedulable, leases renewed), plus a directory per
node that stands for its disk, where helper pods' hostPath volumes land.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.raw_api import call_json

DEFAULT_NODE_COUNT = 3
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


@dataclass(frozen=True)
class NodeSpec:
    """A fake node to create: its name and extra labels."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def default_node_specs(count: int = DEFAULT_NODE_COUNT) -> tuple[NodeSpec, ...]:
    """node-1 ... node-N with no extra labels."""
    return tuple(NodeSpec(f"node-{index}") for index in range(1, count + 1))


def node_manifest(spec: NodeSpec) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        **spec.labels,
    }
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "1000", "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": labels,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def is_node_usable(node: Mapping[str, Any]) -> bool:
    """Ready, and without the taints the node lifecycle controller puts on unready nodes."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    taints = (node.get("spec") or {}).get("taints") or []
    return ready and not any(taint["key"] in NOT_READY_TAINTS for taint in taints)


def unusable_nodes(core: client.CoreV1Api, names: Iterable[str]) -> list[str]:
    """The nodes among `names` that are not (yet) usable, missing ones included."""
    wanted = set(names)
    nodes = call_json(core.list_node)["items"]
    usable = {node["metadata"]["name"] for node in nodes if is_node_usable(node)}
    return sorted(wanted - usable)


def wait_until_usable(
    core: client.CoreV1Api,
    names: Iterable[str],
    deadline: float,
    on_each_poll: Callable[[], None],
) -> list[str]:
    """Polls until every named node is usable; returns the ones that are not by `deadline`.
    `on_each_poll` runs every round (it raises when a component has died)."""
    pending = list(names)
    while True:
        on_each_poll()
        pending = unusable_nodes(core, pending)
        if not pending or time.monotonic() >= deadline:
            return pending
        time.sleep(0.2)


def create_node(core: client.CoreV1Api, spec: NodeSpec) -> None:
    body: Any = node_manifest(spec)  # the client sends plain dicts as they are
    core.create_node(body)


def delete_node(core: client.CoreV1Api, name: str) -> None:
    try:
        core.delete_node(name)
    except ApiException as error:
        if error.status != HTTPStatus.NOT_FOUND:
            raise
