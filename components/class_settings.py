"""The stack config's storageClasses list -> StorageClassArgs, checked against config.json.

Which parameters exist and what their values may be is provisioner.core.config's rule
(validate_storage_class_parameters); this module checks what only a StorageClass object has:
its name, policies, annotations, topologies, and that no two classes clash.
"""

from __future__ import annotations

from components import naming
from components.args import LabelExpression, StorageClassArgs, TopologyTerm
from components.stack_values import (
    DNS_SUBDOMAIN,
    SettingsError,
    boolean,
    decode_structured,
    one_of,
    show,
    string,
    strings,
    unknown_key,
)
from provisioner.core.config import (
    ConfigError,
    ProvisionerConfig,
    validate_storage_class_parameters,
)

STORAGE_CLASS_KEYS = (
    "name",
    "isDefault",
    "reclaimPolicy",
    "volumeBindingMode",
    "parameters",
    "defaultVolumeType",
    "annotations",
    "allowedTopologies",
    "mountOptions",
)
RESERVED_ANNOTATIONS = {
    naming.DEFAULT_CLASS_ANNOTATION: "isDefault",
    naming.DEFAULT_VOLUME_TYPE_ANNOTATION: "defaultVolumeType",
}
"""Annotations the class's own keys set."""


def parse_storage_classes(
    text: str | None, config: ProvisionerConfig
) -> tuple[StorageClassArgs, ...]:
    """The storageClasses key (JSON text; None when unset) as validated classes."""
    if text is None:
        raise SettingsError(
            "storageClasses",
            "at least one StorageClass is required, e.g. [{name: local-path, isDefault: true}]",
        )
    items = decode_structured("storageClasses", text, list, "a list of StorageClass objects")
    if not items:
        raise SettingsError("storageClasses", "at least one StorageClass is required")
    classes: list[StorageClassArgs] = []
    for index, item in enumerate(items):
        key = f"storageClasses[{index}]"
        storage_class = _storage_class(key, item)
        for earlier_index, earlier in enumerate(classes):
            if earlier.name == storage_class.name:
                raise SettingsError(
                    f"{key}.name",
                    f"{show(storage_class.name)} is already used by "
                    f"storageClasses[{earlier_index}]",
                )
            if earlier.is_default and storage_class.is_default:
                raise SettingsError(
                    f"{key}.isDefault",
                    f"only one class can be the default; storageClasses[{earlier_index}] "
                    f"({show(earlier.name)}) already is",
                )
        _check_against_config(key, storage_class, config)
        classes.append(storage_class)
    return tuple(classes)


def _storage_class(key: str, item: object) -> StorageClassArgs:
    if not isinstance(item, dict):
        raise SettingsError(key, f"must be an object with at least a name, got {show(item)}")
    for field_name in item:
        if field_name not in STORAGE_CLASS_KEYS:
            raise SettingsError(f"{key}.{field_name}", unknown_key(field_name, STORAGE_CLASS_KEYS))
    if "name" not in item:
        raise SettingsError(f"{key}.name", "is required")
    name = string(f"{key}.name", item["name"])
    problem = _check_storage_class_name(name)
    if problem is not None:
        raise SettingsError(f"{key}.name", problem)
    reclaim_policy = one_of(
        f"{key}.reclaimPolicy", item.get("reclaimPolicy", "Delete"), ("Delete", "Retain")
    )
    binding_mode = one_of(
        f"{key}.volumeBindingMode",
        item.get("volumeBindingMode", "WaitForFirstConsumer"),
        ("WaitForFirstConsumer", "Immediate"),
    )
    volume_type = item.get("defaultVolumeType")
    return StorageClassArgs(
        name=name,
        is_default=boolean(f"{key}.isDefault", item.get("isDefault", False)),
        reclaim_policy=reclaim_policy,
        volume_binding_mode=binding_mode,
        parameters=_parameters(f"{key}.parameters", item.get("parameters", {})),
        default_volume_type=None
        if volume_type is None
        else string(f"{key}.defaultVolumeType", volume_type),
        annotations=_annotations(f"{key}.annotations", item.get("annotations", {})),
        allowed_topologies=_topologies(
            f"{key}.allowedTopologies", item.get("allowedTopologies", [])
        ),
        mount_options=tuple(strings(f"{key}.mountOptions", item.get("mountOptions", []))),
    )


def _parameters(key: str, value: object) -> dict[str, str]:
    """Parameter values must be strings; which names are allowed is the config model's rule
    (provisioner.core.config)."""
    if not isinstance(value, dict):
        raise SettingsError(key, f"must be a map of parameter names to strings, got {show(value)}")
    parameters = {}
    for name, given in value.items():
        parameter = ("true" if given else "false") if isinstance(given, bool) else given
        if not isinstance(parameter, str):
            # YAML reads 0770 as a number; StorageClass parameters are strings.
            raise SettingsError(
                f"{key}.{name}", f'must be a string (quote it, e.g. "0770"), got {show(parameter)}'
            )
        parameters[name] = parameter
    return parameters


def _annotations(key: str, value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SettingsError(key, f"must be a map of strings, got {show(value)}")
    annotations = {}
    for name, annotation in value.items():
        item_key = f"{key}[{show(name)}]"
        if name in RESERVED_ANNOTATIONS:
            raise SettingsError(item_key, f"set {RESERVED_ANNOTATIONS[name]} instead")
        annotations[name] = string(item_key, annotation)
    return annotations


def _topologies(key: str, value: object) -> tuple[TopologyTerm, ...]:
    """allowedTopologies in Kubernetes' shape: [{matchLabelExpressions: [{key, values}]}]."""
    if not isinstance(value, list):
        raise SettingsError(key, f"must be a list of {{matchLabelExpressions}}, got {show(value)}")
    terms = []
    for index, term in enumerate(value):
        term_key = f"{key}[{index}]"
        if not isinstance(term, dict) or set(term) != {"matchLabelExpressions"}:
            raise SettingsError(
                term_key, f"must be {{matchLabelExpressions: [...]}}, got {show(term)}"
            )
        expressions = term["matchLabelExpressions"]
        if not isinstance(expressions, list) or not expressions:
            raise SettingsError(
                f"{term_key}.matchLabelExpressions", "must be a non-empty list of {key, values}"
            )
        terms.append(
            tuple(
                _label_expression(f"{term_key}.matchLabelExpressions[{number}]", expression)
                for number, expression in enumerate(expressions)
            )
        )
    return tuple(terms)


def _label_expression(key: str, value: object) -> LabelExpression:
    if not isinstance(value, dict) or set(value) != {"key", "values"}:
        raise SettingsError(key, f"must be {{key, values}}, got {show(value)}")
    values = strings(f"{key}.values", value["values"])
    if not values:
        raise SettingsError(f"{key}.values", "must not be empty")
    return LabelExpression(key=string(f"{key}.key", value["key"]), values=tuple(values))


def _check_against_config(
    key: str, storage_class: StorageClassArgs, config: ProvisionerConfig
) -> None:
    """The class's parameters and binding mode against the paths config.json gives it."""
    try:
        validate_storage_class_parameters(
            storage_class.name, storage_class.parameters, storage_class.all_annotations(), config
        )
    except ConfigError as error:
        raise SettingsError(_class_key_of(key, error.key_path), error.message) from error
    if (
        storage_class.volume_binding_mode == "Immediate"
        and config.shared_path_for(storage_class.name) is None
    ):
        raise SettingsError(
            f"{key}.volumeBindingMode",
            "Immediate needs a sharedFileSystemPath for this class: a node-local volume has no "
            "node until a pod is scheduled; use WaitForFirstConsumer",
        )


def _class_key_of(key: str, key_path: str) -> str:
    """Maps a key path of validate_storage_class_parameters (relative to the StorageClass, or a
    top-level config.json key) to stack config."""
    if key_path == f"annotations.{naming.DEFAULT_VOLUME_TYPE_ANNOTATION}":
        return f"{key}.defaultVolumeType"
    if key_path.startswith("annotations."):
        return f"{key}.annotations[{show(key_path.removeprefix('annotations.'))}]"
    if key_path.startswith("parameters."):
        return f"{key}.{key_path}"
    return key_path


def _check_storage_class_name(value: str) -> str | None:
    if len(value) <= 253 and DNS_SUBDOMAIN.fullmatch(value):
        return None
    return (
        f"{show(value)} is not a valid StorageClass name "
        '(lower-case letters, digits, "-" and ".", at most 253 characters)'
    )
