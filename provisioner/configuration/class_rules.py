"""A StorageClass and its config.json entry, read once into the one value every decision on
its claims and volumes reads: `ClassRules`.

Why one value: each rule of a class (its base paths on a node, the pattern, the sizes, reuse,
node loss, the volume type, the affinity key) used to be looked up where it was used, so a
claim's decision went back and forth between the parameters' reader, the config model and the
path rules. rancher reads its StorageClassConfig once; sig-storage-lib hands `Provision` one
`ProvisionOptions`. Here a class is read once per version of it and of the config
(`ClassRulesCache`), and the decisions take the value.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from provisioner.configuration.class_parameters import (
    CSI_VOLUME_TYPE,
    VOLUME_TYPES,
    allow_unsafe_path_pattern,
    is_csi_class,
    node_loss_grace_seconds,
    reuse_existing_data,
    size_range,
    validate_storage_class_parameters,
    volume_type_of,
)
from provisioner.configuration.config import (
    DEFAULT_NODE,
    DEFAULT_NODE_AFFINITY_KEY,
    ConfigError,
    ProvisionerConfig,
)
from provisioner.objects.quantities import format_bytes
from provisioner.objects.records import (
    ClaimRecord,
    NodeRecord,
    StorageClassRecord,
)
from provisioner.provisioning.paths import EVERY_NODE


@dataclass(frozen=True, slots=True)
class ClassRules:
    """Every rule of one class the decisions need, read from the StorageClass (None: it is
    gone, as for a PV that outlived it) and its config.json entry."""

    name: str
    storage_class: StorageClassRecord | None
    configured: bool
    """config.json serves the class (storageClassConfigs has its entry, or is not used)."""
    problem: str | None = None
    """Why no claim of the class can be provisioned as its parameters stand; None: none."""
    size_problem: str | None = None
    """Why its minSize/maxSize cannot be read; None: they can (see `min_size`, `max_size`)."""
    min_size: int | None = None
    max_size: int | None = None
    shared_path: str | None = None
    """The class's sharedFileSystemPath: every node sees its one base path."""
    node_base_paths: Mapping[str, Mapping[str, int | None]] = field(default_factory=dict)
    """By node (DEFAULT_NODE for the rest): its base paths, in order, and each one's budget in
    bytes (None: no budget)."""
    node_path: str | None = None
    """The class's nodePath parameter: the one base path its volumes use."""
    path_pattern: str | None = None
    allow_unsafe_path_pattern: bool = False
    owner_patterns: Mapping[str, str] = field(default_factory=dict)
    """userPattern, groupPattern and permPattern, by "user", "group" and "perm"."""
    reuse_existing_data: bool = False
    node_loss_grace_seconds: int | None = None
    default_volume_type: str = "hostPath"
    affinity_key: str = DEFAULT_NODE_AFFINITY_KEY

    @property
    def binding_mode(self) -> str:
        return self.storage_class.binding_mode if self.storage_class else "Immediate"

    def base_paths_on(self, node: str) -> list[str]:
        """The base paths a volume of the class may use on the node ([]: none)."""
        if self.shared_path is not None:
            return [self.shared_path]
        return list(self._entry(node))

    def capacities_on(self, node: str) -> dict[str, int | None]:
        """Each base path's budget on the node in bytes (None: no budget); {} on a shared
        filesystem, which has none."""
        return dict(self._entry(node))

    def _entry(self, node: str) -> Mapping[str, int | None]:
        return self.node_base_paths.get(node, self.node_base_paths.get(DEFAULT_NODE, {}))

    def claim_size(self, claim: ClaimRecord) -> int | str:
        """The claim's request in bytes (read when its record was), or why it is not a size
        we accept or is outside the class's minSize/maxSize."""
        if self.size_problem is not None:
            return f"StorageClass {self.name}: {self.size_problem}"
        size = claim.requested_bytes
        if size is None:
            return claim.request_problem or "spec.resources.requests.storage is required"
        low, high = self.min_size, self.max_size
        if (low is not None and size < low) or (high is not None and size > high):
            shown = f"{format_bytes(low) if low is not None else '0'} .. " + (
                format_bytes(high) if high is not None else "unlimited"
            )
            return (
                f"requested {claim.requested_storage} is outside the size range of StorageClass"
                f" {self.name} (minSize .. maxSize: {shown}): request a size in that range"
            )
        return size

    def place(self, claim: ClaimRecord, node: NodeRecord | None) -> Placement:
        """What the class gives a claim on `node` (None: a shared filesystem's claim with no
        node selected): its volume type, affinity and candidate base paths. ValueError (or
        ConfigError) with the reason to refuse the claim."""
        node_name = node.name if node else ""
        candidates = self.base_paths_on(node_name)
        capacities = self.capacities_on(node_name)
        if self.problem is not None:
            raise ValueError(self.problem)
        annotation = claim.annotations.get("volumeType")
        volume_type = self.default_volume_type
        if annotation is not None and volume_type == CSI_VOLUME_TYPE:
            if annotation.lower() != CSI_VOLUME_TYPE:
                raise ValueError(
                    f"StorageClass {self.name} gives CSI volumes (its parameter volumeType:"
                    f" csi), not {annotation}: drop the claim's volumeType annotation, or use a"
                    " class of that type"
                )
        elif annotation is not None:
            # The claim's own choice, read here with the class's (rancher's names,
            # case-insensitive as its ToLower compare).
            canonical = VOLUME_TYPES.get(annotation.lower())
            if canonical is None:
                raise ConfigError(
                    "volumeType annotation",
                    f"{json.dumps(annotation)} is not a volume type: use hostPath or local",
                )
            volume_type = canonical
        shared = self.shared_path is not None
        if shared and volume_type == "local":
            raise ValueError("volumeType local needs node affinity, which a shared path has not")
        affinity: tuple[str, str] | None = None
        if not shared:
            assert node is not None  # decide_claim_action waits for a selected node
            key = self.affinity_key
            value = node.labels.get(key, node.name if key == DEFAULT_NODE_AFFINITY_KEY else None)
            if value is None:
                raise ValueError(
                    f"node {node.name} has no label {key} (the class's nodeAffinityKey)"
                )
            affinity = (key, value)
        if not candidates:
            raise ValueError(
                f"config.json serves no path on node {node_name or '?'} for class {self.name}"
            )
        if self.node_path is not None:
            if self.node_path not in candidates:
                raise ValueError(
                    f"nodePath {self.node_path} is not configured for node {node_name or '?'}"
                )
            candidates = [self.node_path]
        return Placement(
            volume_type,
            affinity,
            EVERY_NODE if shared else node_name,
            candidates,
            {} if shared else capacities,
        )


@dataclass(frozen=True, slots=True)
class Placement:
    """What a class gives one claim on one node (`ClassRules.place`)."""

    volume_type: str
    affinity: tuple[str, str] | None
    """(label key, value) the PV is pinned to; None for a shared filesystem."""
    disk_node: str
    """The node whose disk holds the path; EVERY_NODE for a shared filesystem."""
    candidates: list[str]
    """The base paths the volume may use there, before budgets are looked at."""
    capacities: dict[str, int | None]
    """Each node-local base path's budget in bytes (None: no budget)."""


def read_class_rules(
    name: str, storage_class: StorageClassRecord | None, config: ProvisionerConfig
) -> ClassRules:
    """The class read once: every parameter checked and parsed, its config entry laid out."""
    parameters = storage_class.parameters if storage_class else {}
    annotations = storage_class.annotations if storage_class else {}
    try:
        min_size, max_size = size_range(parameters)
        size_problem = None
    except ConfigError as error:
        min_size, max_size, size_problem = None, None, str(error)
    unconfigured = ClassRules(
        name,
        storage_class,
        configured=False,
        size_problem=size_problem,
        min_size=min_size,
        max_size=max_size,
        node_loss_grace_seconds=_grace_or_none(parameters),
    )
    storage = config.storage_for(name)
    if storage is None:
        return unconfigured
    rules = replace(
        unconfigured,
        configured=True,
        shared_path=storage.shared_filesystem_path,
        node_base_paths={entry.node: entry.capacities() for entry in storage.node_path_map},
        node_path=parameters.get("nodePath"),
        path_pattern=parameters.get("pathPattern"),
        owner_patterns={k: parameters.get(f"{k}Pattern", "") for k in ("user", "group", "perm")},
        affinity_key=parameters.get("nodeAffinityKey", DEFAULT_NODE_AFFINITY_KEY),
    )
    try:
        validate_storage_class_parameters(name, parameters, annotations, config)
    except ConfigError as error:
        # No claim of the class is provisioned until it is mended; its volumes' node loss
        # still follows its own parameter, when that one can be read.
        return replace(rules, problem=str(error))
    return replace(
        rules,
        allow_unsafe_path_pattern=allow_unsafe_path_pattern(parameters, annotations),
        reuse_existing_data=reuse_existing_data(parameters),
        default_volume_type=CSI_VOLUME_TYPE
        if is_csi_class(parameters)
        else volume_type_of(
            annotations.get("defaultVolumeType", "hostPath"), "annotations.defaultVolumeType"
        ),
    )


def _grace_or_none(parameters: Mapping[str, str]) -> int | None:
    """Never release a claim on a nodeLossGracePeriod that cannot be read."""
    try:
        return node_loss_grace_seconds(parameters)
    except ConfigError:
        return None


class ClassRulesCache:
    """The rules of each class, read again only when its StorageClass or the config changed.

    A new version of either is a new object (the informer replaces a record at each update, a
    valid config.json is a new model), so the last one read is kept by class name with the
    objects it was read from."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: dict[str, tuple[StorageClassRecord | None, ProvisionerConfig, ClassRules]] = {}

    def rules(
        self, name: str, storage_class: StorageClassRecord | None, config: ProvisionerConfig
    ) -> ClassRules:
        with self._lock:
            kept = self._read.get(name)
        if kept is not None and kept[0] is storage_class and kept[1] is config:
            return kept[2]
        rules = read_class_rules(name, storage_class, config)
        with self._lock:
            self._read[name] = (storage_class, config, rules)
        return rules
