"""The PersistentVolume for a provisioned claim, as a plain manifest.

The PV is the only record of where the data lives, so it carries everything the teardown
needs later without trusting anything else: the path in hostPath/local, the node both in the
required node affinity (what the scheduler obeys) and in an annotation (what we check the
affinity against on delete), and the library's finalizer so that a PV deleted directly by a
user still gets its directory removed.

Its name is `pvc-<claim uid>`, deterministic, so a retried provisioning finds (AlreadyExists)
the PV it created before instead of creating a second one; claimRef pre-binds it to the claim.
"""

from __future__ import annotations

from typing import Any

from provisioner.claims import NODE_ANNOTATION, PROVISIONED_BY, VOLUME_FINALIZER, ProvisionPlan


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
        source = {"hostPath": {"path": plan.path, "type": "DirectoryOrCreate"}}
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
