"""A standby's watch on its Lease: each renewal is heard as it is written, so the standby times
the lease's expiry from the renewal itself and not from its next look at the Lease (up to
`leader_election.STANDBY_LOOK_SECONDS` later, which every failover paid after the expiry).

The watch only tells the elector what it hears (`LeaderElector.heard`); the elector still reads
the Lease before it writes, and a watch that fails leaves it to its looks. One object, found by
name (a field selector), on the provisioner's ordinary clients: the lease's own clients keep
their connections for renewals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from provisioner.kube.client import KubeClients
from provisioner.kube.informer import Informer, name_key
from provisioner.kube.object_decoding import DictObjects

RETRY_BACKOFF = (5.0, 300.0)
"""A refused watch (a role without `watch` on leases, from an older stack) is retried, and
warned of, after 5 s, then twice as long each time up to five minutes: the looks serve
meanwhile."""


def lease_watch(
    clients: KubeClients, namespace: str, lease_name: str, heard: Callable[[dict[str, Any]], None]
) -> Informer[dict[str, Any]]:
    """An informer on the one Lease, not started, that hands each version's spec to `heard`."""
    watch: Informer[dict[str, Any]] = Informer(
        "lease",
        clients.list_function(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"),
        objects=DictObjects(),
        to_record=lambda lease: dict(lease.get("spec") or {}),
        key=name_key,
        field_selector=f"metadata.name={lease_name}",
        resync_period=0,
        backoff=RETRY_BACKOFF,
    )

    def changed(key: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is not None:
            heard(new)

    watch.add_event_handler(changed, changed, None)
    return watch
