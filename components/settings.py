"""Stack config -> typed component arguments, validated before anything is registered.

Pure functions on the raw config bag the engine hands the program (`PULUMI_CONFIG`: full
key -> string, structured values as JSON text), so every rule is tested without the engine.
The storage rules themselves (absolute paths, duplicate nodes, shared path vs node map,
pathPattern, volume types, the helper template...) live in provisioner.config and are only
called from here: a rule is written once, for the runtime and the deployment alike. This module
adds what only a deployment has: types of stack values, Deployment settings, and the
StorageClass list.

Every failure is a SettingsError whose text is one line naming the stack config key, e.g.
`stack config local-path-storage:nodePathMap[1].paths[0]: "data" must be an absolute path`.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml

from components import naming
from components.args import (
    ConfigMapFiles,
    ContainerResources,
    LabelExpression,
    ProvisionerDeploymentArgs,
    StorageClassArgs,
    StorageClassesArgs,
    TopologyTerm,
)
from provisioner.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    ConfigBundle,
    ConfigError,
    ProvisionerConfig,
    load_config_bundle,
    validate_storage_class_parameters,
)

T = TypeVar("T")

# Keys of config.json, carried over from stack config under the same names.
CONFIG_JSON_KEYS = (
    "nodePathMap",
    "sharedFileSystemPath",
    "storageClassConfigs",
    "setupCommand",
    "teardownCommand",
    "cmdTimeoutSeconds",
)
STRUCTURED_CONFIG_JSON_KEYS = ("nodePathMap", "storageClassConfigs")

SCALAR_DEFAULTS: Mapping[str, str | int | bool] = {
    "namespace": naming.DEFAULT_NAMESPACE,
    "image": naming.DEFAULT_IMAGE,
    "imagePullPolicy": "IfNotPresent",
    "replicas": 1,
    "provisionerName": naming.DEFAULT_PROVISIONER_NAME,
    "logLevel": "info",
    "jsonLogs": False,
    "workers": 8,
    "metricsPort": 8080,
    "leaderElection": True,
    "cpuRequest": "50m",
    "memoryRequest": "64Mi",
    "cpuLimit": "",
    "memoryLimit": "192Mi",
    "helperImage": "",
    "allowUnsafeHelperTemplate": False,
    "renderYamlToDirectory": "",
    "sharedFileSystemPath": "",
    "setupCommand": "",
    "teardownCommand": "",
    "cmdTimeoutSeconds": 120,
}
"""Scalar keys and their defaults; Pulumi.yaml declares the same keys with the same defaults
(a test holds them equal), so `pulumi config` shows them and the engine checks their types."""

STRUCTURED_KEYS = (
    "nodePathMap",
    "storageClassConfigs",
    "storageClasses",
    "helperPodTemplate",
    "setupScript",
    "teardownScript",
)
"""Keys without a default in Pulumi.yaml (lists, objects, multi-line text)."""

KNOWN_KEYS = frozenset(SCALAR_DEFAULTS) | frozenset(STRUCTURED_KEYS)

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

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_QUANTITY = re.compile(r"\+?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+|[mkMGTPE]|[KMGTPE]i)?")


class SettingsError(ValueError):
    """A stack config value that cannot be deployed; `str()` is the one line users see."""

    def __init__(self, key_path: str, message: str) -> None:
        self.key_path = key_path
        self.message = message
        super().__init__(f"stack config {naming.CONFIG_NAMESPACE}:{key_path}: {message}")


@dataclass(frozen=True)
class StackSettings:
    """Everything the program builds, parsed and validated from one stack's config."""

    deployment: ProvisionerDeploymentArgs
    """The provisioner's namespace, RBAC, ConfigMap and Deployment."""
    storage_classes: StorageClassesArgs
    """The StorageClasses it serves."""
    render_yaml_to_directory: str | None
    """When set, write manifests to this directory instead of applying them to a cluster."""


def parse_settings(raw_config: Mapping[str, str]) -> StackSettings:
    """Parses and validates the stack config; raises SettingsError naming the first bad key.

    `raw_config` is the engine's config bag: keys with their namespace (`ns:key`, other
    namespaces are ignored), values as strings, structured values as JSON text.
    """
    values = _own_values(raw_config)
    scalars = _Scalars(values)
    namespace = scalars.text("namespace", _check_dns_label("namespace name", 63))
    provisioner_name = scalars.text("provisionerName", _check_provisioner_name)
    config_files, config = _config_files(values, scalars)
    deployment = ProvisionerDeploymentArgs(
        config_files=config_files,
        namespace=namespace,
        image=scalars.text("image", _check_not_empty),
        image_pull_policy=scalars.choice("imagePullPolicy", ("Always", "IfNotPresent", "Never")),
        replicas=scalars.integer("replicas", minimum=1),
        provisioner_name=provisioner_name,
        debug=scalars.choice("logLevel", ("info", "debug")) == "debug",
        json_logs=scalars.boolean("jsonLogs"),
        workers=scalars.integer("workers", minimum=1),
        metrics_port=scalars.integer("metricsPort", minimum=1, maximum=65535),
        leader_election=scalars.boolean("leaderElection"),
        allow_unsafe_helper_template=scalars.boolean("allowUnsafeHelperTemplate"),
        resources=ContainerResources(
            cpu_request=scalars.text("cpuRequest", _check_quantity),
            memory_request=scalars.text("memoryRequest", _check_quantity),
            cpu_limit=scalars.optional_text("cpuLimit", _check_quantity),
            memory_limit=scalars.optional_text("memoryLimit", _check_quantity),
        ),
    )
    classes = _storage_classes(values.get("storageClasses"), config)
    return StackSettings(
        deployment=deployment,
        storage_classes=StorageClassesArgs(classes=classes, provisioner_name=provisioner_name),
        render_yaml_to_directory=scalars.optional_text("renderYamlToDirectory", None),
    )


def _own_values(raw_config: Mapping[str, str]) -> dict[str, str]:
    prefix = f"{naming.CONFIG_NAMESPACE}:"
    values = {}
    for full_key, value in raw_config.items():
        if not full_key.startswith(prefix):
            continue
        key = full_key[len(prefix) :]
        if key not in KNOWN_KEYS:
            close = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1)
            hint = (
                f"did you mean {close[0]}?"
                if close
                else f"known keys: {', '.join(sorted(KNOWN_KEYS))}"
            )
            raise SettingsError(key, f"unknown key; {hint}")
        values[key] = value
    return values


def _show(value: object) -> str:
    """A value as it appears in messages: JSON, so strings are quoted and nothing is ambiguous."""
    return json.dumps(value)


class _Scalars:
    """Reads top-level scalar keys, which the engine always hands over as strings."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = values

    def _raw(self, key: str) -> str:
        if key in self._values:
            return self._values[key]
        default = SCALAR_DEFAULTS[key]
        return json.dumps(default) if not isinstance(default, str) else default

    def text(self, key: str, check: Callable[[str], str | None] | None = None) -> str:
        value = self._raw(key)
        problem = check(value) if check is not None else None
        if problem is not None:
            raise SettingsError(key, problem)
        return value

    def optional_text(self, key: str, check: Callable[[str], str | None] | None) -> str | None:
        """An empty string (the declared default) means unset."""
        value = self._raw(key)
        return self.text(key, check) if value != "" else None

    def integer(self, key: str, minimum: int | None = None, maximum: int | None = None) -> int:
        value = self._raw(key)
        try:
            number = int(value)
        except ValueError:
            raise SettingsError(key, f"must be an integer, got {_show(value)}") from None
        if minimum is None:
            return number
        if number < minimum or (maximum is not None and number > maximum):
            bounds = (
                f"at least {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            )
            raise SettingsError(key, f"must be {bounds}, got {number}")
        return number

    def boolean(self, key: str) -> bool:
        value = self._raw(key)
        if value not in ("true", "false"):
            raise SettingsError(key, f"must be true or false, got {_show(value)}")
        return value == "true"

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        value = self._raw(key)
        if value not in choices:
            raise SettingsError(key, f"must be one of {', '.join(choices)}; got {_show(value)}")
        return value


def _check_not_empty(value: str) -> str | None:
    return "must not be empty" if not value.strip() else None


def _check_dns_label(what: str, limit: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if len(value) <= limit and _DNS_LABEL.fullmatch(value):
            return None
        return (
            f"{_show(value)} is not a valid {what} "
            f'(lower-case letters, digits and "-", at most {limit} characters)'
        )

    return check


def _check_storage_class_name(value: str) -> str | None:
    if len(value) <= 253 and _DNS_SUBDOMAIN.fullmatch(value):
        return None
    return (
        f"{_show(value)} is not a valid StorageClass name "
        '(lower-case letters, digits, "-" and ".", at most 253 characters)'
    )


def _check_provisioner_name(value: str) -> str | None:
    # Kubernetes' rule for a StorageClass's provisioner: a qualified name such as
    # example.com/local-path, checked in lower case.
    prefix, _, name = value.lower().rpartition("/")
    valid_prefix = prefix == "" or (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix))
    if valid_prefix and len(name) <= 63 and _QUALIFIED_NAME_PART.fullmatch(name):
        return None
    return f"{_show(value)} is not a valid provisioner name (e.g. example.com/local-path)"


def _check_quantity(value: str) -> str | None:
    if _QUANTITY.fullmatch(value):
        return None
    return f"{_show(value)} is not a Kubernetes quantity (e.g. 100m, 64Mi, 1Gi)"


def _decode_structured(key: str, text: str, expected: type[T], what: str) -> T:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    if not isinstance(value, expected):
        raise SettingsError(
            key,
            f"must be {what} (edit it in the stack file or with `pulumi config set --path`), "
            f"got {_show(value)}",
        )
    return value


def _config_files(
    values: Mapping[str, str], scalars: _Scalars
) -> tuple[ConfigMapFiles, ProvisionerConfig]:
    """config.json, the scripts and helperPod.yaml, validated together by provisioner.config."""
    document: dict[str, Any] = {}
    for key in STRUCTURED_CONFIG_JSON_KEYS:
        if key in values:
            expected: type[Any] = list if key == "nodePathMap" else dict
            what = "a list of {node, paths}" if key == "nodePathMap" else "a map of class names"
            document[key] = _decode_structured(key, values[key], expected, what)
    for key in ("sharedFileSystemPath", "setupCommand", "teardownCommand"):
        text = scalars.optional_text(key, None)
        if text is not None:
            document[key] = text
    document["cmdTimeoutSeconds"] = scalars.integer("cmdTimeoutSeconds")
    setup = values.get("setupScript", DEFAULT_SETUP_SCRIPT)
    teardown = values.get("teardownScript", DEFAULT_TEARDOWN_SCRIPT)
    helper_pod_yaml = _helper_pod_yaml(values.get("helperPodTemplate"))
    allow_unsafe = scalars.boolean("allowUnsafeHelperTemplate")
    bundle = _load_bundle(json.dumps(document), setup, teardown, helper_pod_yaml, allow_unsafe)
    helper_image = scalars.optional_text("helperImage", _check_not_empty)
    if helper_image is not None:
        helper_pod_yaml = _with_helper_image(bundle, helper_image)
        bundle = _load_bundle(json.dumps(document), setup, teardown, helper_pod_yaml, allow_unsafe)
    files = ConfigMapFiles(
        # The canonical rendering: rancher's key spelling, whatever case the stack used.
        config_json=bundle.config.to_config_json(),
        setup=setup,
        teardown=teardown,
        helper_pod_yaml=helper_pod_yaml,
    )
    return files, bundle.config


def _helper_pod_yaml(value: str | None) -> str:
    """helperPodTemplate may be YAML text (as in rancher's ConfigMap) or a structured object
    (editable with `pulumi config set --path`)."""
    if value is None:
        return DEFAULT_HELPER_POD_YAML
    try:
        decoded = json.loads(value)
    except json.JSONDecodeError:
        return value
    if isinstance(decoded, dict):
        return yaml.safe_dump(decoded, sort_keys=False)
    return value


def _with_helper_image(bundle: ConfigBundle, image: str) -> str:
    template = json.loads(json.dumps(bundle.helper_pod_template))
    template["spec"]["containers"][0]["image"] = image
    return yaml.safe_dump(template, sort_keys=False)


def _load_bundle(
    config_json: str, setup: str, teardown: str, helper_pod_yaml: str, allow_unsafe: bool
) -> ConfigBundle:
    try:
        return load_config_bundle(
            config_json,
            setup,
            teardown,
            helper_pod_yaml,
            allow_unsafe_helper_template=allow_unsafe,
        )
    except ConfigError as error:
        raise SettingsError(*_stack_key_of(error)) from error


_FILE_KEYS = {
    "helperPod.yaml": "helperPodTemplate",
    "setup": "setupScript",
    "teardown": "teardownScript",
    # Only "no storage configured" is about config.json as a whole; the stack's fix is there.
    "config.json": "nodePathMap",
}
"""Stack config keys of the ConfigMap files, for errors about a file as a whole."""


# The runtime's advice for an unsafe helper template, and its equivalent in stack config.
_RUNTIME_UNSAFE_HINT = "start the provisioner with --allow-unsafe-helper-template"
_STACK_UNSAFE_HINT = "set allowUnsafeHelperTemplate to true (trusted administrators only)"


def _stack_key_of(error: ConfigError) -> tuple[str, str]:
    """Maps a provisioner.config error (key path within the ConfigMap's files) to stack config.

    config.json keys are stack keys of the same name; a helper template error keeps its path
    inside the template in the message, since the template may be given as YAML text.
    """
    file_name = error.source or error.key_path
    if file_name in _FILE_KEYS:
        inner = error.key_path if error.source else ""
        message = error.message.replace(_RUNTIME_UNSAFE_HINT, _STACK_UNSAFE_HINT)
        return _FILE_KEYS[file_name], f"{inner}: {message}" if inner else message
    return error.key_path, error.message


def _storage_classes(text: str | None, config: ProvisionerConfig) -> tuple[StorageClassArgs, ...]:
    if text is None:
        raise SettingsError(
            "storageClasses",
            "at least one StorageClass is required, e.g. [{name: local-path, isDefault: true}]",
        )
    items = _decode_structured("storageClasses", text, list, "a list of StorageClass objects")
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
                    f"{_show(storage_class.name)} is already used by "
                    f"storageClasses[{earlier_index}]",
                )
            if earlier.is_default and storage_class.is_default:
                raise SettingsError(
                    f"{key}.isDefault",
                    f"only one class can be the default; storageClasses[{earlier_index}] "
                    f"({_show(earlier.name)}) already is",
                )
        _check_against_config(key, storage_class, config)
        classes.append(storage_class)
    return tuple(classes)


def _storage_class(key: str, item: object) -> StorageClassArgs:
    if not isinstance(item, dict):
        raise SettingsError(key, f"must be an object with at least a name, got {_show(item)}")
    for field_name in item:
        if field_name not in STORAGE_CLASS_KEYS:
            raise SettingsError(f"{key}.{field_name}", _unknown(field_name, STORAGE_CLASS_KEYS))
    if "name" not in item:
        raise SettingsError(f"{key}.name", "is required")
    name = _string(f"{key}.name", item["name"])
    problem = _check_storage_class_name(name)
    if problem is not None:
        raise SettingsError(f"{key}.name", problem)
    reclaim_policy = _one_of(
        f"{key}.reclaimPolicy", item.get("reclaimPolicy", "Delete"), ("Delete", "Retain")
    )
    binding_mode = _one_of(
        f"{key}.volumeBindingMode",
        item.get("volumeBindingMode", "WaitForFirstConsumer"),
        ("WaitForFirstConsumer", "Immediate"),
    )
    volume_type = item.get("defaultVolumeType")
    return StorageClassArgs(
        name=name,
        is_default=_bool(f"{key}.isDefault", item.get("isDefault", False)),
        reclaim_policy=reclaim_policy,
        volume_binding_mode=binding_mode,
        parameters=_parameters(f"{key}.parameters", item.get("parameters", {})),
        default_volume_type=None
        if volume_type is None
        else _string(f"{key}.defaultVolumeType", volume_type),
        annotations=_annotations(f"{key}.annotations", item.get("annotations", {})),
        allowed_topologies=_topologies(
            f"{key}.allowedTopologies", item.get("allowedTopologies", [])
        ),
        mount_options=tuple(_strings(f"{key}.mountOptions", item.get("mountOptions", []))),
    )


def _unknown(name: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return (
        f"unknown key; did you mean {close[0]}?"
        if close
        else f"unknown key; known keys: {', '.join(known)}"
    )


def _string(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise SettingsError(key, f"must be a string, got {_show(value)}")
    return value


def _strings(key: str, value: object) -> list[str]:
    if not isinstance(value, list):
        raise SettingsError(key, f"must be a list of strings, got {_show(value)}")
    return [_string(f"{key}[{index}]", item) for index, item in enumerate(value)]


def _bool(key: str, value: object) -> bool:
    # `pulumi config set --path` without --type stores "true"/"false" as strings.
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise SettingsError(key, f"must be true or false, got {_show(value)}")


def _one_of(key: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise SettingsError(key, f"must be one of {', '.join(choices)}; got {_show(value)}")
    return str(value)


def _parameters(key: str, value: object) -> dict[str, str]:
    """Parameter values must be strings; which names are allowed is provisioner.config's rule."""
    if not isinstance(value, dict):
        raise SettingsError(key, f"must be a map of parameter names to strings, got {_show(value)}")
    parameters = {}
    for name, given in value.items():
        parameter = ("true" if given else "false") if isinstance(given, bool) else given
        if not isinstance(parameter, str):
            # YAML reads 0770 as a number; StorageClass parameters are strings.
            raise SettingsError(
                f"{key}.{name}", f'must be a string (quote it, e.g. "0770"), got {_show(parameter)}'
            )
        parameters[name] = parameter
    return parameters


def _annotations(key: str, value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SettingsError(key, f"must be a map of strings, got {_show(value)}")
    annotations = {}
    for name, annotation in value.items():
        item_key = f"{key}[{_show(name)}]"
        if name in RESERVED_ANNOTATIONS:
            raise SettingsError(item_key, f"set {RESERVED_ANNOTATIONS[name]} instead")
        annotations[name] = _string(item_key, annotation)
    return annotations


def _topologies(key: str, value: object) -> tuple[TopologyTerm, ...]:
    """allowedTopologies in Kubernetes' shape: [{matchLabelExpressions: [{key, values}]}]."""
    if not isinstance(value, list):
        raise SettingsError(key, f"must be a list of {{matchLabelExpressions}}, got {_show(value)}")
    terms = []
    for index, term in enumerate(value):
        term_key = f"{key}[{index}]"
        if not isinstance(term, dict) or set(term) != {"matchLabelExpressions"}:
            raise SettingsError(
                term_key, f"must be {{matchLabelExpressions: [...]}}, got {_show(term)}"
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
        raise SettingsError(key, f"must be {{key, values}}, got {_show(value)}")
    values = _strings(f"{key}.values", value["values"])
    if not values:
        raise SettingsError(f"{key}.values", "must not be empty")
    return LabelExpression(key=_string(f"{key}.key", value["key"]), values=tuple(values))


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
    if key_path.split(".", 1)[0].split("[", 1)[0] in CONFIG_JSON_KEYS:
        return key_path
    if key_path == f"annotations.{naming.DEFAULT_VOLUME_TYPE_ANNOTATION}":
        return f"{key}.defaultVolumeType"
    if key_path.startswith("annotations."):
        return f"{key}.annotations[{_show(key_path.removeprefix('annotations.'))}]"
    return f"{key}.{key_path}"
