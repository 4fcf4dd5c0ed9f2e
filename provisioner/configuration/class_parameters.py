"""A StorageClass's parameters, as this provisioner reads them: rancher's (`nodePath`,
`pathPattern`, `nodeAffinityKey`, `allowUnsafePathPattern`, the user/group/perm patterns) and
ours (`minSize`, `maxSize`, `reuseExistingData`, `nodeLossGracePeriod`), each with its check.
One reader for the stack's preview, the policy pack and the runtime, as config.py is for
config.json."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping

# ConfigError is part of this module's interface (docs/CONTRACTS.md): re-exported.
from provisioner.configuration.config import ConfigError, ProvisionerConfig, check_base_path
from provisioner.objects.quantities import parse_size
from provisioner.provisioning.paths import (
    PathPatternError,
    PatternFields,
    check_pattern,
    check_perm,
    check_volume_path,
    render_pattern,
)

STORAGE_CLASS_PARAMETERS = (
    "nodePath",
    "pathPattern",
    "nodeAffinityKey",
    "allowUnsafePathPattern",
    "userPattern",
    "groupPattern",
    "permPattern",
    "minSize",
    "maxSize",
    "reuseExistingData",
    "nodeLossGracePeriod",
    "volumeType",
)


MIN_NODE_LOSS_GRACE_SECONDS = 5
"""A node that restarts or is re-registered must not cost its volumes' claims: below this, a
`nodeLossGracePeriod` is refused."""


SIZE_PARAMETERS = ("minSize", "maxSize")


VOLUME_TYPES = {"hostpath": "hostPath", "local": "local"}

CSI_VOLUME_TYPE = "csi"
"""The one value of the class parameter `volumeType`: the class's PVs are CSI volumes served
by the node plugin. hostPath and local stay annotations (`defaultVolumeType`), as in rancher;
a parameter, unlike an annotation, cannot change once the class exists, so a class's type is
fixed."""


def is_csi_class(parameters: Mapping[str, str]) -> bool:
    """Whether a class's parameters make it a CSI class (checked by
    validate_storage_class_parameters)."""
    return parameters.get("volumeType") == CSI_VOLUME_TYPE


_GO_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True}
_GO_BOOLS |= {"0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def parse_go_bool(value: str, key: str) -> bool:
    """strconv.ParseBool, which rancher uses for allowUnsafePathPattern; errors are ours."""
    if value not in _GO_BOOLS:
        raise ConfigError(key, f"{json.dumps(value)} is not a boolean: write true or false")
    return _GO_BOOLS[value]


def allow_unsafe_path_pattern(
    parameters: Mapping[str, str], annotations: Mapping[str, str]
) -> bool:
    """The parameter wins over the older class annotation, as in rancher."""
    if "allowUnsafePathPattern" in parameters:
        return parse_go_bool(
            parameters["allowUnsafePathPattern"], "parameters.allowUnsafePathPattern"
        )
    if "allowUnsafePathPattern" in annotations:
        return parse_go_bool(
            annotations["allowUnsafePathPattern"], "annotations.allowUnsafePathPattern"
        )
    return False


def reuse_existing_data(parameters: Mapping[str, str]) -> bool:
    """The class's `reuseExistingData` (default false): whether a new claim may be handed an
    existing directory with its data (see fresh_directory)."""
    value = parameters.get("reuseExistingData")
    return value is not None and parse_go_bool(value, "parameters.reuseExistingData")


_DURATION = re.compile(r"(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")


def parse_duration(text: str) -> int:
    """ "24h", "90m", "1d12h", "3600s" in seconds; raises ValueError naming the accepted forms."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise ValueError(f"{text!r} is not a duration: write it as 24h, 90m, 1d12h or 3600s")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def node_loss_grace_seconds(parameters: Mapping[str, str]) -> int | None:
    """The class's `nodeLossGracePeriod` in seconds: how long a node holding a volume of the
    class may be gone before the volume's claim is released so that its workload gets a new
    volume elsewhere; None (the default) when the class never releases a claim for that."""
    value = parameters.get("nodeLossGracePeriod")
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as error:
        raise ConfigError("parameters.nodeLossGracePeriod", str(error)) from None
    if seconds < MIN_NODE_LOSS_GRACE_SECONDS:
        raise ConfigError(
            "parameters.nodeLossGracePeriod",
            f"{json.dumps(value)} is shorter than {MIN_NODE_LOSS_GRACE_SECONDS}s: a node that"
            " restarts must not lose its volumes' claims; write a longer period such as 10m",
        )
    return seconds


def is_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if "/" in prefix or (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix))):
        return False
    return bool(_LABEL_NAME.fullmatch(name)) and len(name) <= 63


class _AnyKey(Mapping[str, str]):
    """Labels/annotations of the sample claim: every key has a plausible value."""

    def __getitem__(self, key: str) -> str:
        return "sample-value"

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


SAMPLE_FIELDS = PatternFields(
    "pvc-00000000-0000-0000-0000-000000000000",
    "sample-namespace",
    "sample-claim",
    _AnyKey(),
    _AnyKey(),
)


def validate_storage_class_parameters(
    class_name: str,
    parameters: Mapping[str, str],
    annotations: Mapping[str, str],
    config: ProvisionerConfig,
) -> None:
    """Refuses a StorageClass whose parameters could never provision under this config."""
    storage = config.storage_for(class_name)
    if storage is None:
        raise ConfigError(
            "storageClassConfigs",
            f"has no entry for class {json.dumps(class_name)}:"
            " add one, or claims of this class cannot be provisioned",
        )
    for key in parameters:
        if key not in STORAGE_CLASS_PARAMETERS:
            raise ConfigError(
                f"parameters.{key}",
                f"unknown parameter (known: {', '.join(STORAGE_CLASS_PARAMETERS)})",
            )
    unsafe = allow_unsafe_path_pattern(parameters, annotations)
    reuse_existing_data(parameters)
    if (node_path := parameters.get("nodePath")) is not None:
        check_base_path(node_path, "parameters.nodePath")
        configured = {p for e in storage.node_path_map for p in e.path_names}
        configured |= {storage.shared_filesystem_path} if storage.shared_filesystem_path else set()
        if node_path not in configured:
            raise ConfigError(
                "parameters.nodePath",
                f"{json.dumps(node_path)} is not configured for"
                f" any node of class {json.dumps(class_name)}: add it to nodePathMap"
                " or drop the parameter",
            )
    for key in ("pathPattern", "userPattern", "groupPattern", "permPattern"):
        if key in parameters:
            try:
                check_pattern(parameters[key])
                rendered = render_pattern(parameters[key], SAMPLE_FIELDS)
                if key == "pathPattern":
                    scope = None if unsafe else (SAMPLE_FIELDS.namespace, SAMPLE_FIELDS.name)
                    check_volume_path("/base", rendered, scope)
            except PathPatternError as error:
                raise ConfigError(f"parameters.{key}", str(error)) from None
            if key == "permPattern" and "{{" not in parameters[key]:
                check_perm(parameters[key], "parameters.permPattern")
    size_range(parameters)
    if node_loss_grace_seconds(parameters) is not None and storage.shared_filesystem_path:
        raise ConfigError(
            "parameters.nodeLossGracePeriod",
            f"class {json.dumps(class_name)} serves a sharedFileSystemPath, whose volumes no"
            " node holds alone: drop the parameter",
        )
    _check_csi(class_name, parameters, annotations, storage.shared_filesystem_path)
    key_name = parameters.get("nodeAffinityKey")
    if key_name is not None and not is_label_key(key_name):
        raise ConfigError(
            "parameters.nodeAffinityKey",
            f"{json.dumps(key_name)} is not a valid label key such as kubernetes.io/hostname",
        )
    if (default_type := annotations.get("defaultVolumeType")) is not None:
        volume_type = volume_type_of(default_type, "annotations.defaultVolumeType")
        if volume_type == "local" and storage.shared_filesystem_path is not None:
            raise ConfigError(
                "annotations.defaultVolumeType",
                "local volumes need node affinity,"
                " which a sharedFileSystemPath class does not give: use hostPath",
            )


def _check_csi(
    class_name: str,
    parameters: Mapping[str, str],
    annotations: Mapping[str, str],
    shared_path: str | None,
) -> None:
    value = parameters.get("volumeType")
    if value is None:
        return
    if value != CSI_VOLUME_TYPE:
        raise ConfigError(
            "parameters.volumeType",
            f"{json.dumps(value)} is not a volume type parameter: only {CSI_VOLUME_TYPE!r} is"
            " one (hostPath and local are the defaultVolumeType annotation's)",
        )
    if shared_path is not None:
        raise ConfigError(
            "parameters.volumeType",
            f"class {json.dumps(class_name)} serves a sharedFileSystemPath, which a node plugin"
            " does not serve: drop volumeType csi, or give the class a nodePathMap",
        )
    if "defaultVolumeType" in annotations:
        raise ConfigError(
            "annotations.defaultVolumeType",
            f"class {json.dumps(class_name)} is a csi class, whose volumes are always CSI:"
            " drop the defaultVolumeType annotation",
        )


def size_range(parameters: Mapping[str, str]) -> tuple[int | None, int | None]:
    """The class's (minSize, maxSize) in bytes, None where unset; ConfigError naming the
    parameter when one is not a quantity or the range is empty."""
    bounds: list[int | None] = []
    for key in SIZE_PARAMETERS:
        if key not in parameters:
            bounds.append(None)
            continue
        try:
            bounds.append(parse_size(parameters[key], f"parameters.{key}"))
        except ValueError as error:
            raise ConfigError(f"parameters.{key}", str(error).split(": ", 1)[1]) from None
    low, high = bounds
    if low is not None and high is not None and low > high:
        raise ConfigError(
            "parameters.minSize",
            f"{parameters['minSize']} is larger than maxSize {parameters['maxSize']}:"
            " swap or correct them",
        )
    return low, high


def volume_type_of(value: str, key: str) -> str:
    """rancher's volume type names, case-insensitive as its ToLower compare."""
    canonical = VOLUME_TYPES.get(value.lower())
    if canonical is None:
        raise ConfigError(key, f"{json.dumps(value)} is not a volume type: use hostPath or local")
    return canonical
