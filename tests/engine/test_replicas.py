"""`replicas: 2`: two pods run, one holds the Lease and works, the other stands by (Ready, so a
rolling update can proceed); deleting the leader's pod hands over (the leader releases the
Lease on SIGTERM) and the next claim binds through the new leader."""

from __future__ import annotations

from typing import Any

from localcluster import LocalCluster, wait_for
from provisioner.kube.leader_election import lease_name_for
from tests.engine.support import (
    StackFactory,
    Tenant,
    api_get,
    api_request,
    provisioner_pods,
    volume_location,
    wait_provisioner_ready,
)


def lease_holder(cluster: LocalCluster, namespace: str, provisioner_name: str) -> str:
    lease = api_get(
        cluster,
        f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/"
        f"{lease_name_for(provisioner_name)}",
    )
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def holder_pod(pods: list[dict[str, Any]], holder: str) -> dict[str, Any] | None:
    """The pod whose identity holds the Lease (identities start with the pod's hostname)."""
    for pod in pods:
        if holder.startswith(f"{pod['metadata']['name']}_"):
            return pod
    return None


def test_two_replicas_one_leader_and_a_handover_when_its_pod_goes(
    stacks: StackFactory, cluster: LocalCluster
) -> None:
    stack = stacks.create()
    names = stack.names
    stack.set_config("replicas", 2)
    stack.up()
    pods = wait_provisioner_ready(cluster, names.namespace, replicas=2)

    def leader() -> dict[str, Any] | None:
        holder = lease_holder(cluster, names.namespace, names.provisioner_name)
        return holder_pod(pods, holder) if holder else None

    first_leader = wait_for(leader, 60, "one of the two pods to hold the Lease")
    tenant = Tenant(cluster, names.class_name)
    tenant.claim_with_consumer("before")
    tenant.wait_bound("before")

    leader_name = first_leader["metadata"]["name"]
    status, answer = api_request(
        cluster, "DELETE", f"/api/v1/namespaces/{names.namespace}/pods/{leader_name}"
    )
    assert status == 200, answer

    def new_leader() -> dict[str, Any] | None:
        # The standby or the ReplicaSet's replacement pod: whichever asks first after the
        # release gets the Lease.
        holder = lease_holder(cluster, names.namespace, names.provisioner_name)
        current = provisioner_pods(cluster, names.namespace)
        survivors = [pod for pod in current if pod["metadata"]["name"] != leader_name]
        return holder_pod(survivors, holder) if holder else None

    # Well within one lease duration (15 s): the leader released the Lease on SIGTERM.
    wait_for(new_leader, 10, "another pod to take the Lease over")
    tenant.claim_with_consumer("after")
    _, _, on_disk = volume_location(cluster, tenant.wait_bound("after"))
    assert on_disk.is_dir()
    # The ReplicaSet replaces the deleted pod: two Ready pods again.
    wait_provisioner_ready(cluster, names.namespace, replicas=2)
