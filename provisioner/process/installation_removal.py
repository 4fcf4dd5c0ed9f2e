"""Letting go of our volumes' finalizer when the installation itself is removed.

Bound Delete-policy PVs carry `external-provisioner.volume.kubernetes.io/finalizer`, so that a
PV deleted directly still has its directory removed; only a running provisioner removes it. Once
`pulumi destroy` (or `kubectl delete namespace`) has removed the provisioner, such a PV, when
deleted, would stay Terminating with nothing left to let it go. So on SIGTERM, if the
installation is going away, the provisioner takes its finalizer off the PVs it provisioned
(their provisioned-by annotation is its name) and touches nothing else: the PVs stay, bound, and
so do their directories and data.

"Going away" is read from the cluster, not guessed: the pod's owning ReplicaSet is being
deleted or gone (its Deployment was deleted: `pulumi destroy` deletes it, in the foreground,
before the namespace), or the pod's namespace is terminating. A rolling update, a scale to zero
or a deleted pod leaves the ReplicaSet and namespace in place, and the finalizers with them. A
provisioner deployed again re-adds the finalizer to every Bound Delete-policy volume it finds.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from urllib3.exceptions import HTTPError

from provisioner.kube.api_error import ApiError
from provisioner.kube.client import KubeClients
from provisioner.provisioning.annotations import PROVISIONED_BY, VOLUME_FINALIZER

log = logging.getLogger(__name__)

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
REQUEST_TIMEOUT = 3.0


def removal_reason(clients: KubeClients, namespace: str, pod_name: str) -> str | None:
    """Why this installation is being removed, or None when it is not (or nothing says so:
    outside a pod, or the API does not answer)."""
    try:
        found = clients.request_json(
            "GET", f"/api/v1/namespaces/{namespace}", timeout=REQUEST_TIMEOUT
        )
        if found.get("metadata", {}).get("deletionTimestamp"):
            return f"namespace {namespace} is being deleted"
        pod = clients.request_json(
            "GET", f"/api/v1/namespaces/{namespace}/pods/{pod_name}", timeout=REQUEST_TIMEOUT
        )
    except (ApiError, HTTPError, OSError) as error:
        log.info("cannot tell whether the installation is being removed: %s", _describe(error))
        return None
    owners = pod.get("metadata", {}).get("ownerReferences") or []
    owner = next((o for o in owners if o.get("controller")), None)
    if owner is None or owner.get("kind") != "ReplicaSet":
        return None
    path = f"/apis/apps/v1/namespaces/{namespace}/replicasets/{owner['name']}"
    try:
        replica_set = clients.request_json("GET", path, timeout=REQUEST_TIMEOUT)
    except ApiError as error:
        if error.status == HTTPStatus.NOT_FOUND:
            return f"this pod's ReplicaSet {owner['name']} is gone"
        log.info("cannot read this pod's ReplicaSet: %s", _describe(error))
        return None
    except (HTTPError, OSError) as error:
        log.info("cannot read this pod's ReplicaSet: %s", _describe(error))
        return None
    metadata = replica_set.get("metadata", {})
    if metadata.get("uid") != owner.get("uid"):
        return f"this pod's ReplicaSet {owner['name']} is gone"
    if metadata.get("deletionTimestamp"):
        return f"this pod's ReplicaSet {owner['name']} is being deleted"
    return None


@dataclass(frozen=True)
class Released:
    released: list[str]
    left: list[str]


def holds_our_finalizer(volume: dict[str, Any], provisioner_name: str) -> bool:
    metadata = volume.get("metadata") or {}
    return (metadata.get("annotations") or {}).get(
        PROVISIONED_BY
    ) == provisioner_name and VOLUME_FINALIZER in (metadata.get("finalizers") or [])


def release_finalizers(clients: KubeClients, provisioner_name: str, budget: float) -> Released:
    """Removes our finalizer from every PV we provisioned, within `budget` seconds; returns the
    PV names done and those left (out of time or refused)."""
    deadline = time.monotonic() + budget
    try:
        listed = clients.request_json(
            "GET", "/api/v1/persistentvolumes", timeout=max(1.0, budget / 2)
        )
    except (ApiError, HTTPError, OSError) as error:
        log.error("cannot list PersistentVolumes to release their finalizer: %s", _describe(error))
        return Released([], ["(all: the list failed)"])
    names = sorted(
        str(volume["metadata"]["name"])
        for volume in listed.get("items") or []
        if holds_our_finalizer(volume, provisioner_name)
    )
    released: list[str] = []
    left: list[str] = []
    for name in names:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            left.append(name)
            continue
        try:
            clients.request_json(
                "PATCH",
                f"/api/v1/persistentvolumes/{name}",
                body={"metadata": {"$deleteFromPrimitiveList/finalizers": [VOLUME_FINALIZER]}},
                content_type=STRATEGIC_MERGE,
                timeout=min(REQUEST_TIMEOUT, remaining),
            )
            released.append(name)
        except ApiError as error:
            if error.status == HTTPStatus.NOT_FOUND:
                continue
            log.warning("releasing the finalizer of PV %s: %s", name, _describe(error))
            left.append(name)
        except (HTTPError, OSError) as error:
            log.warning("releasing the finalizer of PV %s: %s", name, _describe(error))
            left.append(name)
    return Released(released, left)


def _describe(error: Exception) -> str:
    if isinstance(error, ApiError):
        return f"HTTP {error.status} {error.reason}"
    return f"{type(error).__name__}: {error}"
