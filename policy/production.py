"""What a production installation should have: a stand-by replica, a memory limit, leader
election, and at least one class that keeps data when its claim goes (Retain). Advisory in
every stack, mandatory in a stack that declares itself production
(`local-path-storage-policy:production: true`)."""

from __future__ import annotations

from collections.abc import Sequence

from policy.provisioner_runs import provisioner_runs
from policy.resources import DEPLOYMENT, STORAGE_CLASS, Resource

NAME = "production-readiness"


def _deployment_problems(deployment: Resource) -> list[str]:
    problems = []
    replicas = (deployment.props.get("spec") or {}).get("replicas", 1)
    for run in provisioner_runs(deployment):
        container = run.container
        # The engine passes numbers as floats (a protobuf Struct): 1.0 is one replica.
        if isinstance(replicas, int | float) and not isinstance(replicas, bool) and replicas < 2:
            problems.append(
                f"Deployment {deployment.name}: {int(replicas)} replica, so a node loss stops all "
                "provisioning and deletion: set replicas to 2 (one leader, one stand-by)"
            )
        limits = (container.get("resources") or {}).get("limits") or {}
        if not limits.get("memory"):
            problems.append(
                f"Deployment {deployment.name} container {container.get('name')}: no memory "
                "limit, so a leak can starve the node: set memoryLimit (for example 192Mi)"
            )
        if run.options is not None and not run.options.leader_election:
            problems.append(
                f"Deployment {deployment.name} container {container.get('name')}: leader "
                "election is off, so two replicas (or a rollout) provision the same claim "
                "twice: set leaderElection to true"
            )
    return problems


def check_stack(resources: Sequence[Resource]) -> list[tuple[str, str]]:
    """(message, urn) per problem."""
    found = [
        (problem, resource.urn)
        for resource in resources
        if resource.type == DEPLOYMENT
        for problem in _deployment_problems(resource)
    ]
    classes = [resource for resource in resources if resource.type == STORAGE_CLASS]
    if classes and all(
        resource.props.get("reclaimPolicy", "Delete") == "Delete" for resource in classes
    ):
        names = ", ".join(resource.name for resource in classes)
        found.append(
            (
                f"every StorageClass ({names}) has reclaimPolicy Delete, so deleting a claim "
                "deletes its data: add a class with reclaimPolicy: Retain for data that must "
                "outlive its claim",
                "",
            )
        )
    return found
