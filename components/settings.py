"""Stack config -> typed component arguments, validated before anything is registered.

Pure functions on the raw config bag the engine hands the program (`PULUMI_CONFIG`: full
key -> string, structured values as JSON text), so every rule is tested without the engine.
The storage rules themselves (absolute paths, duplicate nodes, shared path vs node map,
pathPattern, volume types, the helper template...) live in provisioner.core.config and are only
called from here: a rule is written once, for the runtime and the deployment alike. This module
adds what only a deployment has: types of stack values, Deployment settings, and the
StorageClass list (class_settings.py).

Every failure is a SettingsError whose text is one line naming the stack config key, e.g.
`stack config local-path-storage:nodePathMap[1].paths[0]: "data" must be an absolute path`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from components import naming
from components.args import (
    ConfigMapFiles,
    ContainerResources,
    ProvisionerDeploymentArgs,
    StorageClassesArgs,
)
from components.capacity_scheduling import csi_driver_name_problem
from components.class_settings import parse_storage_classes
from components.stack_values import (
    DNS_SUBDOMAIN,
    SettingsError,
    decode_structured,
    show,
    unknown_key,
)
from provisioner.core.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
    ConfigBundle,
    ConfigError,
    ProvisionerConfig,
    load_config_bundle,
)

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
    "capacityAwareScheduling": True,
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

_DEPLOYMENT_KEYS = frozenset(
    {
        "image",
        "imagePullPolicy",
        "replicas",
        "logLevel",
        "jsonLogs",
        "workers",
        "metricsPort",
        "leaderElection",
        "cpuRequest",
        "memoryRequest",
        "cpuLimit",
        "memoryLimit",
        "allowUnsafeHelperTemplate",
    }
)


def _stored_in(key: str) -> str:
    """Where a key's value ends up in plaintext, besides the stack's state."""
    if key in _DEPLOYMENT_KEYS:
        return "the provisioner Deployment"
    if key == "storageClasses":
        return "the StorageClasses"
    if key in ("namespace", "provisionerName"):
        return "object names, the Deployment and the StorageClasses"
    if key == "renderYamlToDirectory":
        return "the stack outputs"
    if key == "capacityAwareScheduling":
        return "the stack's CSIDriver"
    return f"the ConfigMap {naming.CONFIG_MAP_NAME}"


def secret_refused(key: str) -> str:
    """The message for a value set with `pulumi config set --secret`: no Kubernetes object this
    stack makes is a Secret, so it would be written in plaintext."""
    return (
        f"is a secret, but it would be stored in plaintext in {_stored_in(key)} and the stack's "
        f"state; set it without --secret (`pulumi config set {key} ...`) and keep credentials "
        "out of it"
    )


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_QUANTITY = re.compile(r"\+?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+|[mkMGTPE]|[KMGTPE]i)?")


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
    scalars = _Scalars(values)
    namespace = scalars.text("namespace", _check_dns_label("namespace name", 63))
    provisioner_name = scalars.text("provisionerName", _check_provisioner_name)
    config_files, config = _config_files(values, scalars)
    # The runtime's own model says whether a path has a budget: one reader of that fact.
    wants_csi_driver = scalars.boolean("capacityAwareScheduling") and config.declares_capacity()
    name_problem = csi_driver_name_problem(provisioner_name) if wants_csi_driver else None
    warnings = (
        () if name_problem is None else (str(SettingsError("provisionerName", name_problem)),)
    )
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
        deploy_csi_driver=wants_csi_driver and name_problem is None,
    )
    classes = parse_storage_classes(values.get("storageClasses"), config)
    return StackSettings(
        deployment=deployment,
        storage_classes=StorageClassesArgs(classes=classes, provisioner_name=provisioner_name),
        render_yaml_to_directory=scalars.optional_text("renderYamlToDirectory", None),
        warnings=warnings,
    )


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
            raise SettingsError(key, f"must be an integer, got {show(value)}") from None
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
            raise SettingsError(key, f"must be true or false, got {show(value)}")
        return value == "true"

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        value = self._raw(key)
        if value not in choices:
            raise SettingsError(key, f"must be one of {', '.join(choices)}; got {show(value)}")
        return value


def _check_not_empty(value: str) -> str | None:
    return "must not be empty" if not value.strip() else None


def _check_dns_label(what: str, limit: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if len(value) <= limit and _DNS_LABEL.fullmatch(value):
            return None
        return (
            f"{show(value)} is not a valid {what} "
            f'(lower-case letters, digits and "-", at most {limit} characters)'
        )

    return check


def _check_provisioner_name(value: str) -> str | None:
    # Kubernetes' rule for a StorageClass's provisioner: a qualified name such as
    # example.com/local-path, checked in lower case.
    prefix, _, name = value.lower().rpartition("/")
    valid_prefix = prefix == "" or (len(prefix) <= 253 and DNS_SUBDOMAIN.fullmatch(prefix))
    if valid_prefix and len(name) <= 63 and _QUALIFIED_NAME_PART.fullmatch(name):
        return None
    return f"{show(value)} is not a valid provisioner name (e.g. example.com/local-path)"


def _check_quantity(value: str) -> str | None:
    if _QUANTITY.fullmatch(value):
        return None
    return f"{show(value)} is not a Kubernetes quantity (e.g. 100m, 64Mi, 1Gi)"


def _config_files(
    values: Mapping[str, str], scalars: _Scalars
) -> tuple[ConfigMapFiles, ProvisionerConfig]:
    """config.json, the scripts and helperPod.yaml, validated together by provisioner.core.config;
    also config.json as the stack gave it."""
    document: dict[str, Any] = {}
    for key in STRUCTURED_CONFIG_JSON_KEYS:
        if key in values:
            expected: type[Any] = list if key == "nodePathMap" else dict
            what = "a list of {node, paths}" if key == "nodePathMap" else "a map of class names"
            document[key] = decode_structured(key, values[key], expected, what)
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
    """Maps a provisioner.core.config error (key path within the ConfigMap's files) to stack config.

    config.json keys are stack keys of the same name; a helper template error keeps its path
    inside the template in the message, since the template may be given as YAML text.
    """
    file_name = error.source or error.key_path
    if file_name in _FILE_KEYS:
        inner = error.key_path if error.source else ""
        message = error.message.replace(_RUNTIME_UNSAFE_HINT, _STACK_UNSAFE_HINT)
        return _FILE_KEYS[file_name], f"{inner}: {message}" if inner else message
    return error.key_path, error.message
