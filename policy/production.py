"""What a production installation should have: a stand-by replica, a memory limit, leader
election, and at least one class that keeps data when its claim goes (Retain). Advisory in
every stack, mandatory in a stack that declares itself production
(`local-path-storage-policy:production: true`)."""

from __future__ import annotations

from collections.abc import Sequence

from policy.provisioner_runs import provisioner_runs
from policy.resources import DEPLOYMENT, STORAGE_CLASS, KubeObject, Resource, kube_objects

NAME = "production-readiness"


def _deployment_problems(deployment: KubeObject) -> list[str]:
    """What a Deployment (or a DeploymentPatch: what it sets; memory limits merge key by key
    into the cluster's, so one it leaves out is kept) gets wrong for production."""
    problems = []
    spec = deployment.props.get("spec") or {}
    replicas = spec.get("replicas", None if deployment.partial else 1)
    for run in provisioner_runs(deployment):
        container = run.container
        # The engine passes numbers as floats (a protobuf Struct): 1.0 is one replica.
        if isinstance(replicas, int | float) and not isinstance(replicas, bool) and replicas < 2:
            problems.append(
                f"{deployment.label}: {int(replicas)} replica, so a node loss stops all "
                "provisioning and deletion: set replicas to 2 (one leader, one stand-by)"
            )
        limits = (container.get("resources") or {}).get("limits") or {}
        if not deployment.partial and not limits.get("memory"):
            problems.append(
                f"{deployment.label} container {container.get('name')}: no memory "
                "limit, so a leak can starve the node: set memoryLimit (for example 192Mi)"
            )
        if run.options is not None and not run.options.leader_election:
            problems.append(
                f"{deployment.label} container {container.get('name')}: leader "
                "election is off, so two replicas (or a rollout) provision the same claim "
                "twice: set leaderElection to true"
            )
    return problems


def check_stack(resources: Sequence[Resource]) -> list[tuple[str, str]]:
    """(message, urn) per problem."""
    objects = [found for resource in resources for found in kube_objects(resource)]
    found = [
        (problem, deployment.urn)
        for deployment in objects
        if deployment.kind == DEPLOYMENT
        for problem in _deployment_problems(deployment)
    ]
    reclaim_policies: dict[str, str | None] = {}
    for storage_class in (each for each in objects if each.kind == STORAGE_CLASS):
        # A Patch that leaves reclaimPolicy out keeps the cluster's: unknown (None) here,
        # unless another object of the stack writes that class whole.
        policy = storage_class.props.get(
            "reclaimPolicy", None if storage_class.partial else "Delete"
        )
        if reclaim_policies.get(storage_class.name) is None:
            reclaim_policies[storage_class.name] = policy
    if reclaim_policies and all(policy == "Delete" for policy in reclaim_policies.values()):
        names = ", ".join(reclaim_policies)
        found.append(
            (
                f"every StorageClass ({names}) has reclaimPolicy Delete, so deleting a claim "
                "deletes its data: add a class with reclaimPolicy: Retain for data that must "
                "outlive its claim",
                "",
            )
        )
    return found
