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

from provisioner.configuration.class_parameters import CSI_VOLUME_TYPE
from provisioner.objects.node_handoff import (
    NODE_LABEL,
    SETUP_ANNOTATION,
    VOLUME_PATH_KEY,
    NodeCloneSource,
    NodeRemoval,
    NodeRestoreSource,
    VolumeSetup,
    node_label_value,
)
from provisioner.provisioning.annotations import NODE_ANNOTATION, PROVISIONED_BY, VOLUME_FINALIZER
from provisioner.provisioning.claims import ProvisionPlan
from provisioner.provisioning.removal_gate import RemovalPermit


def build_persistent_volume(
    plan: ProvisionPlan, driver: str, clean_up: RemovalPermit | None = None
) -> dict[str, Any]:
    """`driver`: the CSI driver a CSI class's volume names (csi.driver_name); `clean_up`: the
    gate's permit for the clean-up after its setup's failure, which the node plugin gets with
    the setup (a helper pod gets it in its `finish` step)."""
    claim, storage_class = plan.claim, plan.storage_class
    annotations = {PROVISIONED_BY: plan.provisioner_name}
    if plan.node_affinity is not None and plan.node_name is not None:
        annotations[NODE_ANNOTATION] = plan.node_name
    metadata: dict[str, Any] = {"name": plan.volume_name, "annotations": annotations}
    if storage_class.reclaim_policy == "Delete":
        metadata["finalizers"] = [VOLUME_FINALIZER]
    if plan.volume_type == CSI_VOLUME_TYPE and plan.node_name is not None:
        # No helper made the directory: the node plugin that watches its node's PVs (the
        # label) makes it from the setup annotation, before it publishes the volume to a pod.
        annotations[SETUP_ANNOTATION] = volume_setup(plan, clean_up).to_json()
        metadata["labels"] = {NODE_LABEL: node_label_value(plan.node_name)}
        source: dict[str, Any] = {
            "csi": {
                "driver": driver,
                "volumeHandle": plan.volume_name,
                "volumeAttributes": {VOLUME_PATH_KEY: plan.path},
            }
        }
    elif plan.volume_type == "local":
        source = {"local": {"path": plan.path}}
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


def node_removal(permit: RemovalPermit, claim_uid: str) -> NodeRemoval:
    """The gate's permit as the node plugin gets it on the PV (RemovalPermit never leaves this
    process: only the gate makes one)."""
    check = permit.check
    if check is None:
        raise ValueError(f"the permit for {permit.path} is not a volume's")
    return NodeRemoval(
        volume_name=permit.volume_name,
        path=permit.path,
        owner=check.owner,
        made_only=check.made_only,
        absent_ok=check.absent_ok,
        claim_uid=claim_uid,
    )


def volume_setup(plan: ProvisionPlan, clean_up: RemovalPermit | None = None) -> VolumeSetup:
    """What the node plugin makes a CSI volume's directory from (and, for a clone or a
    restore, copies into it)."""
    covers = clean_up is not None and clean_up.covers(plan.volume_name, plan.path)
    source = plan.clone_source
    restore = plan.restore_source
    return VolumeSetup(
        base_path=plan.base_path,
        path=plan.path,
        volume_mode=plan.volume_mode,
        size_bytes=plan.size_bytes,
        vol_user=plan.vol_user,
        vol_group=plan.vol_group,
        vol_perm=plan.vol_perm,
        reuse_existing_data=plan.reuse_existing_data,
        clean_up=node_removal(clean_up, plan.claim.uid) if clean_up and covers else None,
        clone_source=None
        if source is None
        else NodeCloneSource(
            volume_name=source.volume_name,
            path=source.path,
            base_path=source.base_path,
            claim_uid=source.claim_uid,
        ),
        restore_source=None
        if restore is None
        else NodeRestoreSource(
            snapshot_id=restore.snapshot_id,
            snapshot_path=restore.snapshot_path,
            base_path=restore.base_path,
            content_name=restore.content_name,
        ),
    )


def foreign_volume_problem(
    existing: Mapping[str, Any], plan: ProvisionPlan, driver: str
) -> str | None:
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
    wanted_spec = build_persistent_volume(plan, driver)["spec"]
    source = spec.get("hostPath") or spec.get("local") or {}
    csi = spec.get("csi") or {}
    path = source.get("path") or (csi.get("volumeAttributes") or {}).get(VOLUME_PATH_KEY)
    if path != plan.path:
        return f"PV {plan.volume_name} exists at {path}, not at {plan.path}"
    if csi.get("driver") != (wanted_spec.get("csi") or {}).get("driver"):
        return f"PV {plan.volume_name} exists for CSI driver {csi.get('driver') or 'none'}"
    wanted = wanted_spec.get("nodeAffinity")
    if spec.get("nodeAffinity") != wanted:
        return f"PV {plan.volume_name} exists with another node affinity"
    return None
