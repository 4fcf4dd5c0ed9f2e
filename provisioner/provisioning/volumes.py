"""The PersistentVolume for a provisioned claim, as a plain manifest.

The PV is the only record of where the data lives, so it carries everything the teardown
needs later without trusting anything else: the path in hostPath/local, the node both in the
required node affinity (what the scheduler obeys) and in an annotation (what we check the
affinity against on delete), and the library's finalizer so that a PV deleted directly by a
user still gets its directory removed.

Its name is `pvc-<claim uid>`, deterministic, so a retried provisioning finds (AlreadyExists)
the PV it created before instead of creating a second one; claimRef pre-binds it to the claim.
A PV found under that name counts as ours only if it is this claim's, by us, at this path
(`foreign_volume_problem`): anyone may create a PV of any name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provisioner.provisioning.annotations import NODE_ANNOTATION, PROVISIONED_BY, VOLUME_FINALIZER
from provisioner.provisioning.claims import ProvisionPlan


def build_persistent_volume(plan: ProvisionPlan) -> dict[str, Any]:
    claim, storage_class = plan.claim, plan.storage_class
    annotations = {PROVISIONED_BY: plan.provisioner_name}
    if plan.node_affinity is not None and plan.node_name is not None:
        annotations[NODE_ANNOTATION] = plan.node_name
    metadata: dict[str, Any] = {"name": plan.volume_name, "annotations": annotations}
    if storage_class.reclaim_policy == "Delete":
        metadata["finalizers"] = [VOLUME_FINALIZER]
    if plan.volume_type == "local":
        source: dict[str, Any] = {"local": {"path": plan.path}}
    else:
        # Directory, not DirectoryOrCreate: the setup helper made it, so a missing directory
        # means the disk or share is not mounted, and the pod must fail to start rather than
        # write into the root filesystem underneath the mount point.
        source = {"hostPath": {"path": plan.path, "type": "Directory"}}
    spec: dict[str, Any] = {
        "claimRef": {
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "namespace": claim.namespace,
            "name": claim.name,
            "uid": claim.uid,
            "resourceVersion": claim.resource_version,
        },
        "storageClassName": storage_class.name,
        "capacity": {"storage": claim.requested_storage},
        "accessModes": list(claim.access_modes),
        "persistentVolumeReclaimPolicy": storage_class.reclaim_policy,
        "volumeMode": "Filesystem",
        **source,
    }
    if storage_class.mount_options:
        spec["mountOptions"] = list(storage_class.mount_options)
    if plan.node_affinity is not None:
        key, value = plan.node_affinity
        term = {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": metadata, "spec": spec}


def foreign_volume_problem(existing: Mapping[str, Any], plan: ProvisionPlan) -> str | None:
    """None when `existing` (a PV's API JSON) is the volume this plan saves, as an earlier
    attempt would have saved it; otherwise what differs."""
    metadata = existing.get("metadata") or {}
    spec = existing.get("spec") or {}
    provisioned_by = (metadata.get("annotations") or {}).get(PROVISIONED_BY)
    if provisioned_by != plan.provisioner_name:
        return f"PV {plan.volume_name} exists, provisioned by {provisioned_by or 'nobody'}"
    claim_uid = (spec.get("claimRef") or {}).get("uid")
    if claim_uid != plan.claim.uid:
        return f"PV {plan.volume_name} exists for claim uid {claim_uid}, not {plan.claim.uid}"
    source = spec.get("hostPath") or spec.get("local") or {}
    if source.get("path") != plan.path:
        return f"PV {plan.volume_name} exists at {source.get('path')}, not at {plan.path}"
    wanted = build_persistent_volume(plan)["spec"].get("nodeAffinity")
    if spec.get("nodeAffinity") != wanted:
        return f"PV {plan.volume_name} exists with another node affinity"
    return None
