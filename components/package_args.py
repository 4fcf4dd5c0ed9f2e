"""The arguments of the LocalPathStorage package component, and their way into the stack's parser.

Each field is a stack config key (the schema's camelCase name is the key, e.g. `nodePathMap`),
typed `pulumi.Input[...]` so any SDK can pass another resource's output. The provider host
infers the package schema from these annotations and the docstring after each field
(docs/pulumi-package.md), which is why this module keeps its annotations evaluated (no
`from __future__ import annotations`), declares TypedDicts (the host hands the component plain
dicts keyed by these Python names) and avoids unions and tuples (the host refuses both).

Validation is not repeated here: `settings_from_resolved_args` turns the resolved values back
into the raw stack config the engine gives the program and calls `parse_settings`, so a bad
value fails with the stack's one-line message, naming the arg by its schema name.
"""

import inspect
import json
import typing
from collections.abc import Awaitable, Mapping
from typing import Any, TypedDict

import pulumi
from pydantic.alias_generators import to_camel

from components import naming
from components.settings import StackSettings, parse_settings
from components.stack_values import SettingsError


class TopologyLabelRequirement(TypedDict, total=False):
    """A node label and the values it may have."""

    key: pulumi.Input[str]
    """The node label, e.g. topology.kubernetes.io/zone."""
    values: pulumi.Input[list[pulumi.Input[str]]]
    """The values accepted."""


class TopologySelectorTerm(TypedDict, total=False):
    """Label expressions a node must all match."""

    match_label_expressions: pulumi.Input[list[pulumi.Input[TopologyLabelRequirement]]]
    """The expressions, all of which must match."""


class SnapshotClass(TypedDict, total=False):
    """The VolumeSnapshotClass of a csi class: snapshots taken by the node plugin's driver."""

    name: pulumi.Input[str]
    """VolumeSnapshotClass name (cluster-wide); default: the StorageClass's."""
    deletion_policy: pulumi.Input[str]
    """Delete (the default: deleting a VolumeSnapshot removes its data) or Retain (the data
    stays, to import again by its handle)."""
    default: pulumi.Input[bool]
    """The default snapshot class of the driver (at most one class)."""


class StorageClass(TypedDict, total=False):
    """One StorageClass served by the provisioner (a storageClasses entry of the stack)."""

    name: pulumi.Input[str]
    """StorageClass name (cluster-wide); required."""
    is_default: pulumi.Input[bool]
    """Mark as the cluster's default class (at most one)."""
    reclaim_policy: pulumi.Input[str]
    """Delete (teardown removes the directory, the default) or Retain (data is never touched)."""
    volume_binding_mode: pulumi.Input[str]
    """WaitForFirstConsumer (the default; node-local paths) or Immediate (sharedFileSystemPath
    classes only)."""
    parameters: pulumi.Input[dict[str, pulumi.Input[str]]]
    """rancher's class parameters: nodePath, pathPattern, nodeAffinityKey, userPattern,
    groupPattern, permPattern, allowUnsafePathPattern."""
    default_volume_type: pulumi.Input[str]
    """hostPath or local: the class's defaultVolumeType annotation."""
    volume_type: pulumi.Input[str]
    """csi: the class's volumes are CSI volumes of the node plugin (the class parameter
    volumeType: csi, fixed once the class exists); unset for hostPath or local."""
    annotations: pulumi.Input[dict[str, pulumi.Input[str]]]
    """Further annotations of the class, copied as they are."""
    allowed_topologies: pulumi.Input[list[pulumi.Input[TopologySelectorTerm]]]
    """Where volumes can be provisioned: a node must match every expression of one term."""
    mount_options: pulumi.Input[list[pulumi.Input[str]]]
    """Mount options copied into each PersistentVolume."""
    allow_volume_expansion: pulumi.Input[bool]
    """Let claims grow when the volume's path has room (default true)."""
    snapshot_class: pulumi.Input[SnapshotClass]
    """With volumeType csi: a VolumeSnapshotClass of the node plugin's driver (needs the
    snapshot CRDs and snapshot-controller, external-snapshotter v8)."""


class NodePathMapEntry(TypedDict, total=False):
    """The base paths of one node (config.json nodePathMap entry)."""

    node: pulumi.Input[str]
    """A node name, or DEFAULT_PATH_FOR_NON_LISTED_NODES for every node not listed."""
    paths: pulumi.Input[list[Any]]
    """Absolute base paths: each a path, or an object {path, capacity, create, mountPoint}
    (a union the schema cannot express, hence untyped items)."""


class StorageClassConfig(TypedDict, total=False):
    """config.json storageClassConfigs entry: the paths of one class instead of the global ones."""

    node_path_map: pulumi.Input[list[pulumi.Input[NodePathMapEntry]]]
    """The class's own nodePathMap; exclusive with sharedFileSystemPath."""
    shared_file_system_path: pulumi.Input[str]
    """The class's own shared filesystem path, mounted on every node."""


class Toleration(TypedDict, total=False):
    """A Kubernetes toleration of the provisioner pod."""

    key: pulumi.Input[str]
    """The taint key; empty with operator Exists to tolerate every taint."""
    operator: pulumi.Input[str]
    """Exists or Equal (the default)."""
    value: pulumi.Input[str]
    """The taint value, with operator Equal."""
    effect: pulumi.Input[str]
    """NoSchedule, PreferNoSchedule or NoExecute; empty for all."""
    toleration_seconds: pulumi.Input[int]
    """With NoExecute: how long the pod stays bound after the taint appears."""


class NodePluginResources(TypedDict, total=False):
    """Requests and limits of the node plugin container (Kubernetes quantities)."""

    cpu_request: pulumi.Input[str]
    """CPU request (default 10m)."""
    memory_request: pulumi.Input[str]
    """Memory request (default 48Mi)."""
    cpu_limit: pulumi.Input[str]
    """CPU limit; empty (the default) for none."""
    memory_limit: pulumi.Input[str]
    """Memory limit (default 128Mi); empty for none."""


class CsiNodePlugin(TypedDict, total=False):
    """The CSI node plugin's DaemonSet, deployed when a class has volumeType csi."""

    kubelet_directory: pulumi.Input[str]
    """The kubelet's root directory on the nodes (default /var/lib/kubelet)."""
    image: pulumi.Input[str]
    """The node plugin's image; empty for the provisioner's."""
    node_selector: pulumi.Input[dict[str, pulumi.Input[str]]]
    """The node plugin pod's nodeSelector."""
    tolerations: pulumi.Input[list[pulumi.Input[Toleration]]]
    """The node plugin pod's tolerations."""
    priority_class_name: pulumi.Input[str]
    """The node plugin pod's PriorityClass (e.g. system-node-critical)."""
    resources: pulumi.Input[NodePluginResources]
    """The node plugin container's requests and limits."""


class ServiceAccount(TypedDict, total=False):
    """The provisioner's ServiceAccount."""

    annotations: pulumi.Input[dict[str, pulumi.Input[str]]]
    """Its annotations (e.g. IRSA, workload identity)."""


class RollingUpdate(TypedDict, total=False):
    """RollingUpdate bounds; each a number of pods or a percentage ("25%")."""

    max_unavailable: pulumi.Input[Any]
    """Pods (an integer) or a percentage (a string) that may be down during an update."""
    max_surge: pulumi.Input[Any]
    """Pods (an integer) or a percentage (a string) above replicas during an update."""


class UpdateStrategy(TypedDict, total=False):
    """The provisioner Deployment's update strategy."""

    type: pulumi.Input[str]
    """RollingUpdate (the default) or Recreate."""
    rolling_update: pulumi.Input[RollingUpdate]
    """Bounds of a RollingUpdate."""


class Exposure(TypedDict, total=False):
    """Whether one metrics object is deployed."""

    enabled: pulumi.Input[bool]
    """Deploy it (default false)."""


class Metrics(TypedDict, total=False):
    """How Prometheus finds the provisioner's /metrics."""

    service: pulumi.Input[Exposure]
    """A ClusterIP Service on the metrics port."""
    service_monitor: pulumi.Input[Exposure]
    """A Prometheus Operator ServiceMonitor for that Service (needs its CRD and the Service)."""


class Adoption(TypedDict, total=False):
    """A rancher/local-path-provisioner installation taken over in place (v0.0.37's names)."""

    from_: pulumi.Input[str]
    """The installation's kind: rancher (stack config `from`)."""
    namespace: pulumi.Input[str]
    """rancher's namespace (default local-path-storage)."""
    provisioner_name: pulumi.Input[str]
    """rancher's provisioner name (default rancher.io/local-path)."""
    config_map_name: pulumi.Input[str]
    """rancher's ConfigMap, imported (default local-path-config)."""
    deployment_name: pulumi.Input[str]
    """rancher's Deployment, scaled to 0 (default local-path-provisioner)."""
    cluster_role_binding_name: pulumi.Input[str]
    """rancher's ClusterRoleBinding, bound to no one (default local-path-provisioner-bind)."""
    role_binding_name: pulumi.Input[str]
    """rancher's RoleBinding, bound to no one (default local-path-provisioner-bind)."""
    storage_classes: pulumi.Input[list[pulumi.Input[str]]]
    """rancher's StorageClasses, imported; each one of storageClasses (default [local-path])."""


class LocalPathStorageArgs(TypedDict, total=False):
    """The settings of one installation, the same as a stack's config keys (docs/reference.md,
    "Stack config"); every one is optional except storageClasses and a path (nodePathMap,
    sharedFileSystemPath or storageClassConfigs)."""

    namespace: pulumi.Input[str]
    """Namespace of the provisioner, its ConfigMap, helper pods and leader Lease (default
    local-path-storage-system); created unless createNamespace is false."""
    create_namespace: pulumi.Input[bool]
    """Create the namespace (and delete it on destroy; the default); false uses an existing
    one, for example one the program created itself."""
    config_map_name: pulumi.Input[str]
    """Name of the ConfigMap holding config.json, the scripts and helperPod.yaml."""
    image: pulumi.Input[str]
    """Provisioner container image."""
    image_pull_policy: pulumi.Input[str]
    """Always, IfNotPresent (the default) or Never."""
    replicas: pulumi.Input[int]
    """Provisioner replicas (default 1); one leader works, the rest stand by. Above 1 a
    PodDisruptionBudget is added."""
    provisioner_name: pulumi.Input[str]
    """The provisioner name the StorageClasses use; the runtime serves only those classes."""
    log_level: pulumi.Input[str]
    """info (the default) or debug."""
    json_logs: pulumi.Input[bool]
    """One JSON object per log line."""
    workers: pulumi.Input[int]
    """Concurrent reconcilers (default 8)."""
    metrics_port: pulumi.Input[int]
    """Port of /healthz, /readyz (the probes) and /metrics (default 8080)."""
    provisioning_retry_count: pulumi.Input[int]
    """Failures after which a claim waits for its next change or resync (default 15); 0
    retries forever."""
    deletion_retry_count: pulumi.Input[int]
    """The same for deleting a released volume (default 15)."""
    priority_class_name: pulumi.Input[str]
    """PriorityClass of the provisioner pods; empty for the cluster's default."""
    leader_election: pulumi.Input[bool]
    """Elect one active replica on a coordination.k8s.io Lease (default true)."""
    capacity_aware_scheduling: pulumi.Input[bool]
    """Deploy a CSIDriver named after provisionerName when a path declares a capacity, so the
    kube-scheduler places pods only on nodes with room (default true)."""
    cpu_request: pulumi.Input[str]
    """CPU request of the provisioner container (default 50m)."""
    memory_request: pulumi.Input[str]
    """Memory request of the provisioner container (default 64Mi)."""
    cpu_limit: pulumi.Input[str]
    """CPU limit of the provisioner container; empty (the default) for none."""
    memory_limit: pulumi.Input[str]
    """Memory limit of the provisioner container (default 192Mi); empty for none."""
    helper_image: pulumi.Input[str]
    """Image of the helper pods that create and remove volume directories; empty keeps the
    helper template's image."""
    allow_unsafe_helper_template: pulumi.Input[bool]
    """Trust helperPodTemplate without the safety checks (trusted administrators only)."""
    shared_file_system_path: pulumi.Input[str]
    """config.json sharedFileSystemPath, one path mounted on every node; exclusive with
    nodePathMap."""
    setup_command: pulumi.Input[str]
    """config.json setupCommand, a binary in the helper image run instead of the setup script."""
    teardown_command: pulumi.Input[str]
    """config.json teardownCommand, run instead of the teardown script."""
    cmd_timeout_seconds: pulumi.Input[int]
    """config.json cmdTimeoutSeconds, how long a helper pod may run (default 120)."""
    node_path_map: pulumi.Input[list[pulumi.Input[NodePathMapEntry]]]
    """config.json nodePathMap: the base paths of each node."""
    storage_class_configs: pulumi.Input[dict[str, pulumi.Input[StorageClassConfig]]]
    """config.json storageClassConfigs: paths per StorageClass name."""
    storage_classes: pulumi.Input[list[pulumi.Input[StorageClass]]]
    """The StorageClasses served (at least one)."""
    helper_pod_template: pulumi.Input[str]
    """helperPod.yaml, the helper pod template as YAML text; empty keeps the built-in one."""
    setup_script: pulumi.Input[str]
    """The setup script helper pods run to create a volume directory."""
    teardown_script: pulumi.Input[str]
    """The teardown script helper pods run to remove a volume directory."""
    common_labels: pulumi.Input[dict[str, pulumi.Input[str]]]
    """Labels on every object of the installation."""
    node_selector: pulumi.Input[dict[str, pulumi.Input[str]]]
    """The provisioner pod's nodeSelector."""
    tolerations: pulumi.Input[list[pulumi.Input[Toleration]]]
    """The provisioner pod's tolerations."""
    affinity: pulumi.Input[dict[str, Any]]
    """The provisioner pod's affinity, in Kubernetes' shape; without a podAntiAffinity, replicas
    above 1 are spread over nodes."""
    image_pull_secrets: pulumi.Input[list[pulumi.Input[str]]]
    """Names of Secrets in the namespace for pulling the provisioner image."""
    pod_annotations: pulumi.Input[dict[str, pulumi.Input[str]]]
    """Annotations of the provisioner pods."""
    pod_labels: pulumi.Input[dict[str, pulumi.Input[str]]]
    """Further labels of the provisioner pods (never the selector's)."""
    service_account: pulumi.Input[ServiceAccount]
    """The provisioner's ServiceAccount."""
    update_strategy: pulumi.Input[UpdateStrategy]
    """The Deployment's update strategy; unset keeps Kubernetes' (RollingUpdate, 25%/25%)."""
    metrics: pulumi.Input[Metrics]
    """A metrics Service and ServiceMonitor."""
    csi_node_plugin: pulumi.Input[CsiNodePlugin]
    """The CSI node plugin's DaemonSet knobs, used when a class has volumeType csi."""
    adopt: pulumi.Input[Adoption]
    """Take over a running rancher/local-path-provisioner in place (its names, classes,
    ConfigMap; its Deployment scaled to 0)."""


def stack_config_values(resolved: Mapping[str, Any]) -> dict[str, str]:
    """Resolved args (Python field names, as the provider host passes them) -> the engine's raw
    stack config: `local-path-storage:<key>` -> a string, structured values as JSON text."""
    values = _stack_value(resolved, LocalPathStorageArgs)
    return {
        f"{naming.CONFIG_NAMESPACE}:{key}": value if isinstance(value, str) else json.dumps(value)
        for key, value in values.items()
        if value is not None
    }


def settings_from_resolved_args(resolved: Mapping[str, Any]) -> StackSettings:
    """The stack's settings from resolved args; a bad value raises pulumi.InputPropertyError
    naming the arg by its schema path, with the stack's own message."""
    try:
        return parse_settings(stack_config_values(resolved))
    except SettingsError as error:
        raise pulumi.InputPropertyError(error.key_path, error.message) from None


def _stack_value(value: Any, annotation: Any) -> Any:
    """`value` with the field names of the TypedDicts in `annotation` camelCased (the stack's
    and the schema's spelling) and every other key (labels, parameters) left as it is."""
    shape = _plain_type(annotation)
    if isinstance(value, Mapping) and typing.is_typeddict(shape):
        fields = inspect.get_annotations(shape)
        return {
            # A keyword as a key (`from`) is a field with a trailing underscore.
            to_camel(name.rstrip("_")): _stack_value(item, fields.get(name, Any))
            for name, item in value.items()
        }
    origin = typing.get_origin(shape)
    if isinstance(value, list) and origin is list:
        (item_type,) = typing.get_args(shape)
        return [_stack_value(item, item_type) for item in value]
    if isinstance(value, Mapping) and origin is dict:
        item_type = typing.get_args(shape)[1]
        return {key: _stack_value(item, item_type) for key, item in value.items()}
    return value


def _plain_type(annotation: Any) -> Any:
    """T of `pulumi.Input[T]` (a union of T, Awaitable[T] and Output[T]); other types as given."""
    if typing.get_origin(annotation) is not typing.Union:
        return annotation
    for member in typing.get_args(annotation):
        if typing.get_origin(member) not in (Awaitable, pulumi.Output) and not isinstance(
            member, typing.ForwardRef
        ):
            return member
    return Any
