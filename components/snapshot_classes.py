"""A CSI class's VolumeSnapshotClass (stack config `storageClasses[].snapshotClass`) as plain
data: the key's reader, the checks across classes, and the object the stack deploys.

Pure (no Pulumi), so preview's checks run without the engine; storage_classes.py registers the
objects. Snapshots are served by the node plugin's driver (provisioner/objects/
snapshot_handoff.py): the class names that driver and takes no parameters, since where a
snapshot lives follows from its source volume, not from the class.

The class needs the snapshot API in the cluster: the snapshot CRDs and the common snapshot
controller (external-snapshotter v8). The stack reads the VolumeSnapshotClass CRD at preview
(when it applies to a cluster), so a cluster without the CRDs fails preview on that read,
naming the CRD; the controller is a running process the stack cannot see.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BeforeValidator

from components.args import SnapshotClassArgs, StorageClassArgs
from components.stack_values import (
    InvalidValueError,
    SettingsError,
    check_object_name,
    show,
    unknown_key,
)

API_VERSION = "snapshot.storage.k8s.io/v1"
KIND = "VolumeSnapshotClass"
CRD_NAME = "volumesnapshotclasses.snapshot.storage.k8s.io"
"""The CRD the stack reads at preview before it deploys a snapshot class."""
DEFAULT_CLASS_ANNOTATION = "snapshot.storage.kubernetes.io/is-default-class"
"""The common snapshot controller's: a VolumeSnapshot without a class takes the default class
of its source volume's driver (and none, if that driver has two)."""
DELETION_POLICIES = ("Delete", "Retain")
KEYS = ("name", "deletionPolicy", "default")
"""The keys of a snapshotClass object, in the order an unknown key's message lists them."""


@dataclass(frozen=True)
class SnapshotClassKeys:
    """A snapshotClass object as read, before its StorageClass gives the name a default."""

    name: str | None = None
    deletion_policy: str = "Delete"
    default: bool = False

    def to_args(self, storage_class_name: str) -> SnapshotClassArgs:
        """The class named as given, or as its StorageClass (another kind: no clash)."""
        return SnapshotClassArgs(
            name=self.name if self.name is not None else storage_class_name,
            deletion_policy=self.deletion_policy,
            default=self.default,
        )


def snapshot_class_key() -> BeforeValidator:
    """`{name?, deletionPolicy: Delete|Retain, default: bool}`, or null for "none"."""

    def read(value: object) -> SnapshotClassKeys | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise InvalidValueError(
                f"must be an object {{name, deletionPolicy, default}}, got {show(value)}"
            )
        for key in value:
            if key not in KEYS:
                raise InvalidValueError(unknown_key(str(key), KEYS), f".{key}")
        return SnapshotClassKeys(
            name=_name(value.get("name")),
            deletion_policy=_deletion_policy(value.get("deletionPolicy", "Delete")),
            default=_flag(value.get("default", False)),
        )

    return BeforeValidator(read)


def _name(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidValueError(f"must be a string, got {show(value)}", ".name")
    problem = check_object_name(value)
    if problem is not None:
        raise InvalidValueError(problem, ".name")
    return value


def _deletion_policy(value: object) -> str:
    if value not in DELETION_POLICIES:
        raise InvalidValueError(
            f"must be Delete (deleting a VolumeSnapshot removes its data) or Retain (the data"
            f" stays), got {show(value)}",
            ".deletionPolicy",
        )
    return str(value)


def _flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise InvalidValueError(f"must be true or false, got {show(value)}", ".default")


def check_snapshot_class(
    key: str, storage_class: StorageClassArgs, earlier: Sequence[StorageClassArgs]
) -> None:
    """A snapshot class only on a CSI class (the node plugin's driver takes the snapshots; a
    hostPath or local PV is not a CSI volume, and the common controller refuses it), named
    apart from the earlier classes' snapshot classes, and at most one default: every class of
    the stack has the one driver, and with two defaults the common controller takes neither."""
    wanted = storage_class.snapshot_class
    if wanted is None:
        return
    if not storage_class.is_csi:
        raise SettingsError(
            f"{key}.snapshotClass",
            "only a csi class's volumes can be snapshotted (the node plugin takes the"
            " snapshots): add volumeType: csi to the class, or drop snapshotClass",
        )
    for index, other in enumerate(earlier):
        theirs = other.snapshot_class
        if theirs is None:
            continue
        if theirs.name == wanted.name:
            raise SettingsError(
                f"{key}.snapshotClass.name",
                f"{show(wanted.name)} is already the snapshot class of storageClasses[{index}]"
                f" ({show(other.name)}); give this one another name",
            )
        if theirs.default and wanted.default:
            raise SettingsError(
                f"{key}.snapshotClass.default",
                f"only one snapshot class of the driver can be the default; storageClasses"
                f"[{index}] ({show(other.name)}) already is",
            )


def volume_snapshot_class(
    snapshot_class: SnapshotClassArgs,
    driver: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
) -> dict[str, Any]:
    """The VolumeSnapshotClass object (its fields are top-level, not under a spec), with no
    parameters."""
    all_annotations = dict(annotations)
    if snapshot_class.default:
        all_annotations[DEFAULT_CLASS_ANNOTATION] = "true"
    metadata = {"name": snapshot_class.name, "labels": dict(labels), "annotations": all_annotations}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "driver": driver,
        "deletionPolicy": snapshot_class.deletion_policy,
    }
