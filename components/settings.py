"""Stack config -> StackSettings, the one validated model the components are built from.

The path, pure and engine-free (program.py only reads the config and hands the result on):

1. stack_config.read_stack_config(): key -> the engine's string (structured values as JSON
   text), and the keys the stack file holds as secrets.
2. parse_settings(): refuses unknown and secret keys, then validates the stack's parts in
   order. Each part is a pydantic model declaring its keys (the stack key is the field name in
   camelCase) with a reader of stack_values.py and a default read from the arg it sets
   (args.py; Pulumi.yaml repeats it, a test holds the two equal): the names, the ConfigMap
   (config.json parsed once by provisioner.configuration.config, the runtime's own parser and rules,
   and the files then checked with that model), the Deployment, the StorageClasses (each then
   checked against config.json).
3. StackSettings holds the components' arguments (args.py).

Every failure is a SettingsError whose text is one line naming the stack config key, e.g.
`stack config local-path-storage:nodePathMap[1].paths[0]: "data" must be an absolute path`;
the parts are checked in order, so it is the first problem on the path.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from components import naming
from components.adoption import (
    ADOPT_KEY,
    adopted_value,
    check_adopted_classes,
    check_stack_keys,
    parse_adoption,
)
from components.args import (
    ConfigMapFiles,
    ConfigMapFilesError,
    ContainerResources,
    MetricsExposure,
    ProvisionerDeploymentArgs,
    StorageClassArgs,
    StorageClassesArgs,
    TopologyTerm,
    UpdateStrategy,
)
from components.capacity_scheduling import csi_driver_name_problem
from components.node_plugin import driver_name
from components.node_plugin_keys import NODE_PLUGIN_KEY, NodePluginKeys
from components.node_plugin_settings import check_csi_class, node_plugin_args, volume_type_key
from components.snapshot_classes import SnapshotClassKeys, check_snapshot_class, snapshot_class_key
from components.stack_values import (
    InvalidValueError,
    SettingsError,
    affinity_object,
    boolean,
    check_dns_label,
    check_label_value,
    check_not_empty,
    check_object_name,
    check_provisioner_name,
    check_quantity,
    check_storage_class_name,
    class_annotations,
    class_parameters,
    decode_structured,
    deployment_strategy,
    integer,
    metrics_exposure,
    nullable_string,
    one_of,
    optional_text,
    secret_names,
    service_account_object,
    settings_error,
    show,
    string,
    string_map,
    strings,
    structured,
    toleration_list,
    topologies,
    unknown_key,
    yaml_text,
)
from provisioner.configuration import defaults
from provisioner.configuration.class_parameters import validate_storage_class_parameters
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    ConfigBundle,
    ConfigError,
    ProvisionerConfig,
    check_affinity_key_agrees,
    parse_config_json,
)

Part = TypeVar("Part", bound=BaseModel)


@dataclass(frozen=True)
class StackSettings:
    """Everything the program builds, parsed and validated from one stack's config."""

    deployment: ProvisionerDeploymentArgs
    """The provisioner's namespace, RBAC, ConfigMap and Deployment."""
    storage_classes: StorageClassesArgs
    """The StorageClasses it serves."""
    render_yaml_to_directory: str | None
    """When set, write manifests to this directory instead of applying them to a cluster."""
    warnings: tuple[str, ...] = ()
    """Deployable, but worth a line in the preview (each names its stack config key)."""


def parse_settings(
    raw_config: Mapping[str, str], secret_keys: frozenset[str] = frozenset()
) -> StackSettings:
    """Parses and validates the stack config; raises SettingsError naming the first bad key.

    `raw_config` is the engine's config bag: keys with their namespace (`ns:key`, other
    namespaces are ignored), values as strings, structured values as JSON text. `secret_keys`
    are the keys (without namespace) set as secrets, which are refused.
    """
    values = _own_values(raw_config, secret_keys)
    adoption = parse_adoption(values[ADOPT_KEY]) if ADOPT_KEY in values else None
    if adoption is not None:
        check_stack_keys(adoption, values, SCALAR_DEFAULTS)
        values = {
            **values,
            **{key: adopted_value(adoption, key) for key in ADOPTED_NAMES},
            "createNamespace": "false",
        }
    names = _validated(_Names, values)
    if adoption is not None and names.render_yaml_to_directory is not None:
        raise SettingsError(
            ADOPT_KEY,
            "needs a cluster: the takeover imports rancher's objects, which rendering manifests"
            " cannot; remove renderYamlToDirectory or adopt",
        )
    config_map = _validated(_ConfigMapKeys, values)
    config_files, config = config_map.files()
    keys = _validated(_DeploymentKeys, values)
    # The runtime's own model says whether a path has a budget: one reader of that fact.
    wants_csi_driver = keys.capacity_aware_scheduling and config.declares_capacity()
    name_problem = csi_driver_name_problem(names.provisioner_name) if wants_csi_driver else None
    warnings: tuple[str, ...] = (
        () if name_problem is None else (str(SettingsError("provisionerName", name_problem)),)
    )
    deployment = ProvisionerDeploymentArgs(
        config_files=config_files,
        namespace=names.namespace,
        create_namespace=names.create_namespace,
        config_map_name=names.config_map_name,
        image=keys.image,
        image_pull_policy=keys.image_pull_policy,
        replicas=keys.replicas,
        provisioner_name=names.provisioner_name,
        debug=keys.log_level == "debug",
        json_logs=keys.json_logs,
        workers=keys.workers,
        metrics_port=keys.metrics_port,
        leader_election=keys.leader_election,
        allow_unsafe_helper_template=config_map.allow_unsafe_helper_template,
        resources=ContainerResources(
            cpu_request=keys.cpu_request,
            memory_request=keys.memory_request,
            cpu_limit=keys.cpu_limit,
            memory_limit=keys.memory_limit,
        ),
        provisioning_retry_count=keys.provisioning_retry_count,
        deletion_retry_count=keys.deletion_retry_count,
        node_selector=keys.node_selector or {},
        tolerations=keys.tolerations or (),
        affinity=keys.affinity or {},
        priority_class_name=keys.priority_class_name,
        image_pull_secrets=keys.image_pull_secrets or (),
        pod_annotations=keys.pod_annotations or {},
        pod_labels=keys.pod_labels or {},
        common_labels=names.common_labels or {},
        service_account_annotations=keys.service_account or {},
        update_strategy=keys.update_strategy,
        metrics=keys.metrics or MetricsExposure(),
        # Render mode has no cluster to read the CRD from.
        look_up_service_monitor_crd=names.render_yaml_to_directory is None,
        deploy_csi_driver=wants_csi_driver and name_problem is None,
        adopt=adoption,
    )
    classes = _storage_classes(values.get("storageClasses"), config)
    # Releasing a claim for its node's loss deletes it: a right granted only when a class asks.
    if any("nodeLossGracePeriod" in storage_class.parameters for storage_class in classes):
        deployment = dataclasses.replace(deployment, release_claims_on_node_loss=True)
    plugin_keys = _validated(_NodePluginPart, values).csi_node_plugin
    plugin = node_plugin_args(plugin_keys, names.provisioner_name, classes, config)
    if plugin is not None:
        deployment = dataclasses.replace(deployment, node_plugin=plugin)
        if name_problem is not None:
            # A CSIDriver is deployed after all, for the csi classes: say which one.
            driver = driver_name(names.provisioner_name)
            problem = csi_driver_name_problem(names.provisioner_name, driver) or name_problem
            warnings = (str(SettingsError("provisionerName", problem)),)
    elif plugin_keys is not None:
        warnings += (
            str(
                SettingsError(
                    NODE_PLUGIN_KEY,
                    "is set, but no class is a csi class (storageClasses[].volumeType: csi), so"
                    " no node plugin is deployed",
                )
            ),
        )
    if adoption is not None:
        check_adopted_classes(adoption, [storage_class.name for storage_class in classes])
    return StackSettings(
        deployment=deployment,
        storage_classes=StorageClassesArgs(
            classes=classes,
            provisioner_name=names.provisioner_name,
            common_labels=names.common_labels or {},
            adopted=adoption.storage_classes if adoption is not None else (),
            # Render mode has no cluster to read the CRD from.
            look_up_snapshot_crd=names.render_yaml_to_directory is None,
        ),
        render_yaml_to_directory=names.render_yaml_to_directory,
        warnings=warnings,
    )


class _Keys(BaseModel):
    """Some keys of the stack: a key the stack does not set takes the field's default, which is
    Pulumi.yaml's (so parsing does not depend on the engine filling it in), read like a set one.
    The other parts' keys are ignored; unknown keys were refused before."""

    model_config = ConfigDict(
        frozen=True, alias_generator=to_camel, validate_default=True, extra="ignore"
    )


def _stack_defaults(args: type[Any]) -> dict[str, Any]:
    """The stack keys' defaults: the components' own defaults of the args they set (args.py),
    so each is written once. An arg's None (unset) is the empty string Pulumi.yaml declares."""
    return {
        item.name: "" if item.default is None else item.default
        for item in dataclasses.fields(args)
        if item.default is not dataclasses.MISSING
    }


_DEPLOYMENT = _stack_defaults(ProvisionerDeploymentArgs)
_RESOURCES = _stack_defaults(ContainerResources)


_STACK_LABELS = {
    **{
        key: "is set by the stack on every object (and selects the provisioner's pods)"
        for key in naming.labels("instance", "component")
    },
    naming.POD_SECURITY_LABEL: "is set by the stack on its namespace: helper pods mount hostPath "
    "volumes, which only the privileged level allows",
}
"""Labels commonLabels may not set: the stack's own."""
_SELECTOR_LABELS = {
    key: "selects the provisioner's pods: the stack sets it" for key in naming.selector_labels("")
}
"""Labels podLabels may not set: a pod with another value would not belong to its Deployment."""


class _Names(_Keys):
    """The installation's names, which both components use, and where its objects go."""

    namespace: Annotated[str, string(check_dns_label("namespace name", 63))] = (
        naming.DEFAULT_NAMESPACE
    )
    provisioner_name: Annotated[str, string(check_provisioner_name)] = (
        naming.DEFAULT_PROVISIONER_NAME
    )
    render_yaml_to_directory: Annotated[str | None, optional_text()] = ""
    create_namespace: Annotated[bool, boolean()] = _DEPLOYMENT["create_namespace"]
    config_map_name: Annotated[str, string(check_object_name)] = naming.CONFIG_MAP_NAME
    common_labels: Annotated[
        dict[str, str] | None,
        string_map("label keys to values", check_label_value, _STACK_LABELS),
    ] = None


class _ConfigMapKeys(_Keys):
    """config.json (its keys under the same names), the scripts and the helper template."""

    node_path_map: Annotated[list[Any] | None, structured(list, "a list of {node, paths}")] = None
    storage_class_configs: Annotated[
        dict[str, Any] | None, structured(dict, "a map of class names")
    ] = None
    shared_file_system_path: Annotated[str | None, optional_text()] = ""
    setup_command: Annotated[str | None, optional_text()] = ""
    teardown_command: Annotated[str | None, optional_text()] = ""
    cmd_timeout_seconds: Annotated[int, integer()] = defaults.CMD_TIMEOUT_SECONDS
    setup_script: str = DEFAULT_SETUP_SCRIPT
    teardown_script: str = DEFAULT_TEARDOWN_SCRIPT
    helper_pod_template: Annotated[str, yaml_text()] = DEFAULT_HELPER_POD_YAML
    allow_unsafe_helper_template: Annotated[bool, boolean()] = _DEPLOYMENT[
        "allow_unsafe_helper_template"
    ]
    helper_image: Annotated[str | None, optional_text()] = ""
    """Checked by files(), after the files themselves."""

    def files(self) -> tuple[ConfigMapFiles, ProvisionerConfig]:
        """The ConfigMap's four files, validated together by provisioner.configuration.config, and
        config.json as its model: parsed once, then written in its canonical rendering."""
        document: dict[str, Any] = {}
        for key, value in (
            ("nodePathMap", self.node_path_map),
            ("storageClassConfigs", self.storage_class_configs),
            ("sharedFileSystemPath", self.shared_file_system_path),
            ("setupCommand", self.setup_command),
            ("teardownCommand", self.teardown_command),
        ):
            if value is not None:
                document[key] = value
        document["cmdTimeoutSeconds"] = self.cmd_timeout_seconds
        try:
            config = parse_config_json(json.dumps(document))
        except ConfigError as error:
            raise SettingsError(*_stack_key_of(error)) from error
        files = self._files(config, self.helper_pod_template)
        if self.helper_image is not None:
            problem = check_not_empty(self.helper_image)
            if problem is not None:
                raise SettingsError("helperImage", problem)
            files = self._files(config, _with_helper_image(files.bundle, self.helper_image))
        return files, config

    def _files(self, config: ProvisionerConfig, helper_pod_yaml: str) -> ConfigMapFiles:
        try:
            return ConfigMapFiles(
                # The canonical rendering: rancher's key spelling, whatever case the stack used.
                config_json=config.to_config_json(),
                setup=self.setup_script,
                teardown=self.teardown_script,
                helper_pod_yaml=helper_pod_yaml,
                allow_unsafe_helper_template=self.allow_unsafe_helper_template,
                parsed_config=config,
            )
        except ConfigMapFilesError as error:
            raise SettingsError(*_stack_key_of(error.error)) from error


class _DeploymentKeys(_Keys):
    """The provisioner Deployment (and the CSIDriver beside it)."""

    capacity_aware_scheduling: Annotated[bool, boolean()] = True
    image: Annotated[str, string(check_not_empty)] = _DEPLOYMENT["image"]
    image_pull_policy: Annotated[str, one_of("Always", "IfNotPresent", "Never")] = _DEPLOYMENT[
        "image_pull_policy"
    ]
    replicas: Annotated[int, integer(minimum=1)] = _DEPLOYMENT["replicas"]
    log_level: Annotated[str, one_of("info", "debug")] = "info"
    json_logs: Annotated[bool, boolean()] = _DEPLOYMENT["json_logs"]
    workers: Annotated[int, integer(minimum=1)] = _DEPLOYMENT["workers"]
    metrics_port: Annotated[int, integer(minimum=1, maximum=65535)] = _DEPLOYMENT["metrics_port"]
    leader_election: Annotated[bool, boolean()] = _DEPLOYMENT["leader_election"]
    cpu_request: Annotated[str, string(check_quantity)] = _RESOURCES["cpu_request"]
    memory_request: Annotated[str, string(check_quantity)] = _RESOURCES["memory_request"]
    cpu_limit: Annotated[str | None, optional_text(check_quantity)] = _RESOURCES["cpu_limit"]
    memory_limit: Annotated[str | None, optional_text(check_quantity)] = _RESOURCES["memory_limit"]
    provisioning_retry_count: Annotated[int, integer(minimum=0)] = _DEPLOYMENT[
        "provisioning_retry_count"
    ]
    deletion_retry_count: Annotated[int, integer(minimum=0)] = _DEPLOYMENT["deletion_retry_count"]
    priority_class_name: Annotated[str | None, optional_text(check_object_name)] = _DEPLOYMENT[
        "priority_class_name"
    ]
    node_selector: Annotated[
        dict[str, str] | None, string_map("node label keys to values", check_label_value)
    ] = None
    tolerations: Annotated[tuple[dict[str, Any], ...] | None, toleration_list()] = None
    affinity: Annotated[dict[str, Any] | None, affinity_object()] = None
    image_pull_secrets: Annotated[tuple[str, ...] | None, secret_names()] = None
    pod_annotations: Annotated[dict[str, str] | None, string_map("annotation keys to values")] = (
        None
    )
    pod_labels: Annotated[
        dict[str, str] | None,
        string_map("label keys to values", check_label_value, _SELECTOR_LABELS),
    ] = None
    service_account: Annotated[dict[str, str] | None, service_account_object()] = None
    update_strategy: Annotated[UpdateStrategy | None, deployment_strategy()] = None
    metrics: Annotated[MetricsExposure | None, metrics_exposure()] = None


STORAGE_CLASS_KEYS = (
    "name",
    "isDefault",
    "reclaimPolicy",
    "volumeBindingMode",
    "parameters",
    "defaultVolumeType",
    "volumeType",
    "annotations",
    "allowedTopologies",
    "mountOptions",
    "allowVolumeExpansion",
    "snapshotClass",
)
"""The keys of a storageClasses entry, in the order an unknown key's message lists them."""


class _NodePluginPart(_Keys):
    csi_node_plugin: Annotated[
        NodePluginKeys | None, structured(dict, "an object {kubeletDirectory, image, ...}")
    ] = None


class _StorageClassKeys(BaseModel):
    """One entry of storageClasses, its keys checked in this order; a key it does not set keeps
    StorageClassArgs' default."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, extra="forbid")

    name: Annotated[str, string(check_storage_class_name)]
    reclaim_policy: Annotated[str | None, one_of("Delete", "Retain")] = None
    volume_binding_mode: Annotated[str | None, one_of("WaitForFirstConsumer", "Immediate")] = None
    is_default: Annotated[bool | None, boolean()] = None
    parameters: Annotated[dict[str, str] | None, class_parameters()] = None
    default_volume_type: Annotated[str | None, nullable_string()] = None
    """hostPath or local: provisioner.configuration.config's rule, checked against config.json."""
    volume_type: Annotated[str | None, volume_type_key()] = None
    """csi: the class's volumes are the node plugin's (the parameter volumeType: csi)."""
    annotations: Annotated[dict[str, str] | None, class_annotations()] = None
    allowed_topologies: Annotated[tuple[TopologyTerm, ...] | None, topologies()] = None
    mount_options: Annotated[tuple[str, ...] | None, strings()] = None
    allow_volume_expansion: Annotated[bool | None, boolean()] = None
    snapshot_class: Annotated[SnapshotClassKeys | None, snapshot_class_key()] = None
    """A csi class's VolumeSnapshotClass (components/snapshot_classes.py)."""

    @model_validator(mode="before")
    @classmethod
    def _an_object_of_known_keys(cls, value: object) -> object:
        if not isinstance(value, dict):
            raise InvalidValueError(f"must be an object with at least a name, got {show(value)}")
        for field_name in value:
            if field_name not in STORAGE_CLASS_KEYS:
                raise InvalidValueError(
                    unknown_key(field_name, STORAGE_CLASS_KEYS), f".{field_name}"
                )
        return value

    def to_args(self) -> StorageClassArgs:
        given = {name: value for name, value in self if name in self.model_fields_set}
        if self.snapshot_class is not None:
            given["snapshot_class"] = self.snapshot_class.to_args(self.name)
        return StorageClassArgs(**given)


def _fields_by_key(part: type[BaseModel]) -> dict[str, FieldInfo]:
    """A part's fields by their stack keys, in declaration order."""
    return {field.alias or name: field for name, field in part.model_fields.items()}


STRUCTURED_KEYS = (
    "nodePathMap",
    "storageClassConfigs",
    "storageClasses",
    "helperPodTemplate",
    "setupScript",
    "teardownScript",
    "commonLabels",
    "nodeSelector",
    "tolerations",
    "affinity",
    "imagePullSecrets",
    "podAnnotations",
    "podLabels",
    "serviceAccount",
    "updateStrategy",
    "metrics",
    NODE_PLUGIN_KEY,
    ADOPT_KEY,
)
"""Keys without a default in Pulumi.yaml (lists, objects, multi-line text)."""
ADOPTED_NAMES = ("namespace", "provisionerName", "configMapName")
"""The stack keys whose values `adopt` gives (components/adoption.py)."""

SCALAR_DEFAULTS: Mapping[str, str | int | bool] = {
    key: field.default
    for part in (_Names, _ConfigMapKeys, _DeploymentKeys)
    for key, field in _fields_by_key(part).items()
    if key not in STRUCTURED_KEYS
}
"""Scalar keys and their defaults, as the parts declare them; Pulumi.yaml declares the same
keys with the same defaults (a test holds them equal), so `pulumi config` shows them and the
engine checks their types."""

KNOWN_KEYS = frozenset(SCALAR_DEFAULTS) | frozenset(STRUCTURED_KEYS)


def _own_values(raw_config: Mapping[str, str], secret_keys: frozenset[str]) -> dict[str, str]:
    prefix = f"{naming.CONFIG_NAMESPACE}:"
    values = {}
    for full_key, value in raw_config.items():
        if not full_key.startswith(prefix):
            continue
        key = full_key[len(prefix) :]
        if key not in KNOWN_KEYS:
            raise SettingsError(key, unknown_key(key, tuple(sorted(KNOWN_KEYS))))
        values[key] = value
    secret = sorted(secret_keys)
    if secret:
        raise SettingsError(secret[0], secret_refused(secret[0]))
    return values


def secret_refused(key: str) -> str:
    """The message for a value set with `pulumi config set --secret`: no Kubernetes object this
    stack makes is a Secret, so it would be written in plaintext."""
    return (
        f"is a secret, but it would be stored in plaintext in {_stored_in(key)} and the stack's "
        f"state; set it without --secret (`pulumi config set {key} ...`) and keep credentials "
        "out of it"
    )


def _stored_in(key: str) -> str:
    """Where a key's value ends up in plaintext, besides the stack's state."""
    if key == "capacityAwareScheduling":
        return "the stack's CSIDriver"
    if key == "commonLabels":
        return "the labels of every object"
    if key == "serviceAccount":
        return "the provisioner ServiceAccount"
    if key == "metrics":
        return "the metrics Service"
    if key == NODE_PLUGIN_KEY:
        return "the node plugin DaemonSet"
    if key in _fields_by_key(_DeploymentKeys) or key == "allowUnsafeHelperTemplate":
        return "the provisioner Deployment"
    if key == "storageClasses":
        return "the StorageClasses"
    if key == "configMapName":
        return "the ConfigMap's name and the provisioner Deployment"
    if key == "createNamespace":
        return "the stack's resource graph"
    if key in ("namespace", "provisionerName", ADOPT_KEY):
        return "object names, the Deployment and the StorageClasses"
    if key == "renderYamlToDirectory":
        return "the stack outputs"
    return f"the ConfigMap {naming.CONFIG_MAP_NAME}"


def _validated(part: type[Part], values: Mapping[str, str]) -> Part:
    try:
        return part.model_validate(values)
    except ValidationError as error:
        raise settings_error(error) from None


def _with_helper_image(bundle: ConfigBundle, image: str) -> str:
    template = json.loads(json.dumps(bundle.helper_pod_template))
    template["spec"]["containers"][0]["image"] = image
    return yaml.safe_dump(template, sort_keys=False)


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
    """Maps a provisioner.configuration.config error (key path within the ConfigMap's files) to
    stack config.

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
    """The storageClasses key (JSON text; None when unset) as classes, each checked against the
    ones before it and against config.json before the next is read."""
    if text is None:
        raise SettingsError(
            "storageClasses",
            "at least one StorageClass is required, e.g. [{name: local-path, isDefault: true}]",
        )
    try:
        items = decode_structured(text, list, "a list of StorageClass objects")
    except InvalidValueError as error:
        raise SettingsError("storageClasses", error.message) from None
    if not items:
        raise SettingsError("storageClasses", "at least one StorageClass is required")
    classes: list[StorageClassArgs] = []
    for index, item in enumerate(items):
        key = f"storageClasses[{index}]"
        try:
            storage_class = _StorageClassKeys.model_validate(item).to_args()
        except ValidationError as error:
            raise settings_error(error, key) from None
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
        check_snapshot_class(key, storage_class, classes)
        try:
            check_affinity_key_agrees(
                storage_class.name,
                storage_class.parameters,
                {earlier.name: earlier.parameters for earlier in classes},
                config,
            )
        except ConfigError as error:
            raise SettingsError(_class_key_of(key, error.key_path), error.message) from error
        classes.append(storage_class)
    return tuple(classes)


def _check_against_config(
    key: str, storage_class: StorageClassArgs, config: ProvisionerConfig
) -> None:
    """The class's parameters and binding mode against the paths config.json gives it."""
    try:
        validate_storage_class_parameters(
            storage_class.name,
            storage_class.all_parameters(),
            storage_class.all_annotations(),
            config,
        )
    except ConfigError as error:
        if (
            error.key_path == "parameters.volumeType"
            and "volumeType" not in storage_class.parameters
        ):
            raise SettingsError(f"{key}.volumeType", error.message) from error
        raise SettingsError(_class_key_of(key, error.key_path), error.message) from error
    check_csi_class(key, storage_class)
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
