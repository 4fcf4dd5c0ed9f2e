"""What the controller hands a node plugin through a CSI volume's PV, and how each side reads
it: pure, shared by the controller (which writes) and the node plugin (which reads and acts).

A CSI class's volume needs no helper pod: the controller saves the PV at once, carrying
- the label NODE_LABEL=`node_label_value(node)`, so a node plugin watches only its own node's
  PVs (a label-selected watch: the API server's load stays flat in the number of nodes);
- the volume attribute VOLUME_PATH_KEY (the directory) and the annotation SETUP_ANNOTATION
  (`VolumeSetup`, what the setup needs), which the node plugin reads to make the directory (the
  same fixed scripts and config scripts a helper pod runs), when it first sees the PV and, at the
  latest, before it publishes the volume to a pod.

Its removal stays the controller's decision, by the one gate (`decide_removal`): the permit it
gives travels as REMOVAL_PERMIT_ANNOTATION (`NodeRemoval`, the gate's owner check with the
volume and path it covers and the claim whose release it follows). The node plugin acts on it
only while the PV is Released from that very claim and the permit names the PV's own directory,
runs the owner check on the node just before anything goes, and then marks the PV
DIRECTORY_REMOVED_ANNOTATION; the controller deletes the PV as after any teardown. Nobody else
writes these: tenants cannot write PVs, and a node plugin may patch only its own node's PVs.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

NODE_LABEL = "local-path-storage.io/node-key"
"""On a CSI volume's PV: its node, as `node_label_value` gives it (a label selector's key)."""

SETUP_ANNOTATION = "local-path-storage.io/setup"
"""On a CSI volume's PV: the `VolumeSetup` JSON the node plugin makes the directory from."""

REMOVAL_PERMIT_ANNOTATION = "local-path-storage.io/removal-permit"
"""On a Released CSI volume's PV: the `NodeRemoval` JSON, the gate's permit for its directory."""

NODE_SIZE_ANNOTATION = "local-path-storage.io/node-size"
"""On a CSI volume's PV, written by its node plugin: the size in bytes the node has applied to
the volume (a btrfs qgroup limit, a block file's length; a plain directory has none to apply),
so the controller finishes an expansion only once the node holds the new size."""

VOLUME_PATH_KEY = "local-path-storage.io/path"
"""The volume context key (a PV's `spec.csi.volumeAttributes`) holding the volume's directory."""

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


def node_label_value(node_name: str) -> str:
    """A label value that names `node_name`: the name itself when it is a valid label value (63
    characters at most), else `h-` and a hash of it (a node's name may be 253 characters)."""
    if _LABEL_VALUE.match(node_name):
        return node_name
    return "h-" + hashlib.sha256(node_name.encode()).hexdigest()[:40]


def node_selector(node_name: str) -> str:
    """The label selector of `node_name`'s CSI volumes."""
    return f"{NODE_LABEL}={node_label_value(node_name)}"


class HandoffError(ValueError):
    """An annotation that does not read as what it must be: the node plugin does nothing."""


@dataclass(frozen=True)
class VolumeSetup:
    """What the node plugin needs to make a volume's directory: the fields a helper pod's
    setup gets (helper_pods.pod_shapes.HelperTarget) beyond the PV's name and node."""

    base_path: str
    path: str
    volume_mode: str
    size_bytes: int
    vol_user: str = ""
    vol_group: str = ""
    vol_perm: str = ""
    reuse_existing_data: bool = False
    clean_up: NodeRemoval | None = None
    """The gate's permit for the clean-up after this setup's own failure (a directory this
    volume made, and empty); None: a failed setup leaves its directory (a retry uses it)."""
    clone_source: NodeCloneSource | None = None
    """A clone's: the volume whose data the new directory gets, copied after the setup."""
    restore_source: NodeRestoreSource | None = None
    """A restore's: the snapshot whose data the new directory gets (never with clone_source)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> VolumeSetup:
        fields = read_object(text, SETUP_ANNOTATION)
        clean_up = fields.get("clean_up")
        if clean_up is not None and not isinstance(clean_up, dict):
            raise HandoffError(f"{SETUP_ANNOTATION}'s clean_up is not a JSON object")
        clone_source = fields.get("clone_source")
        if clone_source is not None and not isinstance(clone_source, dict):
            raise HandoffError(f"{SETUP_ANNOTATION}'s clone_source is not a JSON object")
        restore_source = fields.get("restore_source")
        if restore_source is not None and not isinstance(restore_source, dict):
            raise HandoffError(f"{SETUP_ANNOTATION}'s restore_source is not a JSON object")
        if clone_source is not None and restore_source is not None:
            raise HandoffError(f"{SETUP_ANNOTATION} has both a clone_source and a restore_source")
        try:
            setup = VolumeSetup(
                base_path=text_field(fields, "base_path"),
                path=text_field(fields, "path"),
                volume_mode=text_field(fields, "volume_mode"),
                size_bytes=count_field(fields, "size_bytes"),
                vol_user=text_field(fields, "vol_user", ""),
                vol_group=text_field(fields, "vol_group", ""),
                vol_perm=text_field(fields, "vol_perm", ""),
                reuse_existing_data=flag_field(fields, "reuse_existing_data"),
                clean_up=None if clean_up is None else NodeRemoval.of_fields(clean_up),
                clone_source=(
                    None if clone_source is None else NodeCloneSource.of_fields(clone_source)
                ),
                restore_source=(
                    None if restore_source is None else NodeRestoreSource.of_fields(restore_source)
                ),
            )
        except KeyError as missing:
            raise HandoffError(f"{SETUP_ANNOTATION} has no {missing.args[0]}") from None
        return setup


@dataclass(frozen=True)
class NodeCloneSource:
    """A clone's source as the node plugin receives it in the clone's `VolumeSetup`: the
    source's PV, its directory, the base path holding it and the UID of the claim it was
    Bound to when the controller placed the clone (clones.CloneSource, checked there against
    the PV, the class and the config). Only the controller writes it, as all of the setup:
    tenants cannot write PVs. The node copies only a directory that it set up itself for
    that very volume at that very path (its record says so)."""

    volume_name: str
    path: str
    base_path: str
    claim_uid: str

    @staticmethod
    def of_fields(fields: Mapping[str, Any]) -> NodeCloneSource:
        try:
            return NodeCloneSource(
                volume_name=text_field(fields, "volume_name"),
                path=text_field(fields, "path"),
                base_path=text_field(fields, "base_path"),
                claim_uid=text_field(fields, "claim_uid"),
            )
        except KeyError as missing:
            raise HandoffError(
                f"{SETUP_ANNOTATION}'s clone_source has no {missing.args[0]}"
            ) from None


@dataclass(frozen=True)
class NodeRestoreSource:
    """A restore's source as the node plugin receives it in the new volume's `VolumeSetup`: the
    snapshot's id, its directory in the snapshot area of `base_path`, and the
    VolumeSnapshotContent it was taken for (objects.snapshot_handoff). Only the controller
    writes it; the node restores only from a snapshot that its own record says it made, ready,
    at that very path (a handle or a path is never trusted on its own)."""

    snapshot_id: str
    snapshot_path: str
    base_path: str
    content_name: str

    @staticmethod
    def of_fields(fields: Mapping[str, Any]) -> NodeRestoreSource:
        try:
            return NodeRestoreSource(
                snapshot_id=text_field(fields, "snapshot_id"),
                snapshot_path=text_field(fields, "snapshot_path"),
                base_path=text_field(fields, "base_path"),
                content_name=text_field(fields, "content_name"),
            )
        except KeyError as missing:
            raise HandoffError(
                f"{SETUP_ANNOTATION}'s restore_source has no {missing.args[0]}"
            ) from None


@dataclass(frozen=True)
class NodeRemoval:
    """The gate's permit for a CSI volume's directory, as the node plugin receives it: the
    volume and path it covers, the owner check (removal_gate.OwnerCheck) the node runs before
    anything goes, and the UID of the claim whose release it follows."""

    volume_name: str
    path: str
    owner: str
    made_only: bool
    absent_ok: bool
    claim_uid: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> NodeRemoval:
        return NodeRemoval.of_fields(read_object(text, REMOVAL_PERMIT_ANNOTATION))

    @staticmethod
    def of_fields(fields: Mapping[str, Any]) -> NodeRemoval:
        try:
            return NodeRemoval(
                volume_name=text_field(fields, "volume_name"),
                path=text_field(fields, "path"),
                owner=text_field(fields, "owner"),
                made_only=flag_field(fields, "made_only"),
                absent_ok=flag_field(fields, "absent_ok"),
                claim_uid=text_field(fields, "claim_uid"),
            )
        except KeyError as missing:
            raise HandoffError(f"{REMOVAL_PERMIT_ANNOTATION} has no {missing.args[0]}") from None


def removal_refusal(
    removal: NodeRemoval, *, volume_name: str, path: str, phase: str, claim_uid: str
) -> str | None:
    """None when the node may act on `removal` for the PV it was found on (its name, its
    directory, its status phase, its claimRef's UID); else why not. A permit found on another
    PV, for another path, or on a PV no longer Released from the claim it followed (an admin
    re-bound it) is stale: nothing goes."""
    if removal.volume_name != volume_name or removal.owner != volume_name:
        return f"the permit names volume {removal.volume_name}, not {volume_name}"
    if removal.path != path:
        return f"the permit covers {removal.path}, not the volume's directory {path}"
    if phase != "Released":
        return f"the volume is {phase or 'of no phase'}, not Released"
    if removal.claim_uid != claim_uid:
        return f"the volume's claim is {claim_uid or 'none'}, not {removal.claim_uid}"
    return None


def read_object(text: str, what: str) -> Mapping[str, Any]:
    """The JSON object an annotation (`what`) holds; HandoffError when it holds anything else."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise HandoffError(f"{what} is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise HandoffError(f"{what} is not a JSON object")
    return value


def text_field(fields: Mapping[str, Any], key: str, default: str | None = None) -> str:
    """A string field; KeyError when missing without a default, HandoffError when not a string."""
    value = fields.get(key, default)
    if value is None:
        raise KeyError(key)
    if not isinstance(value, str):
        raise HandoffError(f"{key} must be a string")
    return value


def count_field(fields: Mapping[str, Any], key: str) -> int:
    """A whole number of bytes (not a bool, not negative); KeyError when missing."""
    value = fields[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise HandoffError(f"{key} must be a whole number of bytes")
    return value


def flag_field(fields: Mapping[str, Any], key: str) -> bool:
    """A true/false field, false when missing."""
    value = fields.get(key, False)
    if not isinstance(value, bool):
        raise HandoffError(f"{key} must be true or false")
    return value
