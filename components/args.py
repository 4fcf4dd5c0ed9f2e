"""Typed arguments of the components: plain frozen data, no Pulumi imports.

settings.py builds these from stack config (StackSettings holds them) and the components
(deployment.py, storage_classes.py) consume them, so both sides are tested without the
engine. Their defaults are the stack keys' defaults: settings.py reads them from here, and
the ones the runtime shares from provisioner.configuration.defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field
from typing import Any

from components import naming
from provisioner.configuration import defaults
from provisioner.configuration.class_parameters import is_csi_class
from provisioner.configuration.config import (
    ConfigBundle,
    ConfigError,
    ProvisionerConfig,
    complete_bundle,
    parse_config_json,
)


class ConfigMapFilesError(ValueError):
    """Files the provisioner would refuse; `error` names the key path within them."""

    def __init__(self, error: ConfigError) -> None:
        super().__init__(f"ConfigMap files: {error}")
        self.error = error


@dataclass(frozen=True)
class ContainerResources:
    """Requests and limits of the provisioner container, as Kubernetes quantities."""

    cpu_request: str = "50m"
    """CPU request, e.g. "50m"."""
    memory_request: str = "64Mi"
    """Memory request, e.g. "64Mi"."""
    cpu_limit: str | None = None
    """CPU limit; None (the default) for no limit, so a busy provisioner is never throttled."""
    memory_limit: str | None = "192Mi"
    """Memory limit; None for no limit."""

    def requests(self) -> dict[str, str]:
        """The container's `resources.requests`."""
        return {"cpu": self.cpu_request, "memory": self.memory_request}

    def limits(self) -> dict[str, str]:
        """The container's `resources.limits`, without the unset ones."""
        limits = {"cpu": self.cpu_limit, "memory": self.memory_limit}
        return {name: value for name, value in limits.items() if value is not None}


@dataclass(frozen=True)
class ConfigMapFiles:
    """The provisioner's ConfigMap: rancher's four files, validated together when built (the
    runtime's own loader), so no way of making one puts a file into a ConfigMap that the
    provisioner would refuse: a relative base path raises here, not in the running pod."""

    config_json: str
    """config.json: nodePathMap / sharedFileSystemPath / storageClassConfigs and commands."""
    setup: str
    """The setup script helper pods run to create a volume directory."""
    teardown: str
    """The teardown script helper pods run to remove a volume directory."""
    helper_pod_yaml: str
    """helperPod.yaml: the helper pod template."""
    allow_unsafe_helper_template: bool = field(default=False, compare=False)
    """The stack's allowUnsafeHelperTemplate: a helper template with host access beyond the
    volume's directory is accepted."""
    parsed_config: InitVar[ProvisionerConfig | None] = None
    """config.json already parsed by the runtime's parser, when `config_json` is its rendering
    (the stack's settings): not parsed a second time. None: `config_json` is parsed here."""
    bundle: ConfigBundle = field(init=False, compare=False, repr=False)
    """The four files as the runtime loads them."""

    def __post_init__(self, parsed_config: ProvisionerConfig | None) -> None:
        if parsed_config is not None and parsed_config.to_config_json() != self.config_json:
            raise ValueError("ConfigMap files: config_json is not the rendering of parsed_config")
        try:
            config = parse_config_json(self.config_json) if parsed_config is None else parsed_config
            bundle = complete_bundle(
                config,
                self.setup,
                self.teardown,
                self.helper_pod_yaml,
                allow_unsafe_helper_template=self.allow_unsafe_helper_template,
            )
        except ConfigError as error:
            raise ConfigMapFilesError(error) from error
        object.__setattr__(self, "bundle", bundle)

    def to_data(self) -> dict[str, str]:
        """The ConfigMap's `data`, keyed by the file names the runtime reads."""
        return {
            "config.json": self.config_json,
            "setup": self.setup,
            "teardown": self.teardown,
            "helperPod.yaml": self.helper_pod_yaml,
        }


@dataclass(frozen=True)
class UpdateStrategy:
    """The Deployment's update strategy. Either is safe with leader election: a new pod works
    only once the old one has released (or lost) the Lease."""

    type: str = "RollingUpdate"
    """RollingUpdate or Recreate."""
    max_unavailable: int | str | None = None
    """RollingUpdate: pods (or a percentage) that may be down; None keeps Kubernetes' 25%."""
    max_surge: int | str | None = None
    """RollingUpdate: pods (or a percentage) above replicas; None keeps Kubernetes' 25%."""

    def to_spec(self) -> dict[str, Any]:
        """The Deployment's `spec.strategy`."""
        bounds = {"maxUnavailable": self.max_unavailable, "maxSurge": self.max_surge}
        rolling = {name: value for name, value in bounds.items() if value is not None}
        return {"type": self.type, **({"rollingUpdate": rolling} if rolling else {})}


@dataclass(frozen=True)
class MetricsExposure:
    """How Prometheus finds the provisioner's /metrics."""

    service: bool = False
    """A ClusterIP Service on the metrics port, selecting the provisioner pods."""
    service_monitor: bool = False
    """A Prometheus Operator ServiceMonitor for that Service (needs its CRD in the cluster)."""


@dataclass(frozen=True)
class AdoptionArgs:
    """A rancher/local-path-provisioner installation this one takes over in place (stack config
    `adopt`): the stack runs in its namespace under its provisioner name, imports its
    StorageClasses and ConfigMap (kept in the cluster when the stack lets go of them), scales
    its Deployment to 0 before the provisioner's own starts and takes its service account's
    rights away (the subjects of its two bindings). Defaults: rancher v0.0.37's manifest
    (deploy/local-path-storage.yaml)."""

    namespace: str = "local-path-storage"
    """rancher's namespace: the provisioner, its helper pods and Lease run there."""
    provisioner_name: str = "rancher.io/local-path"
    """rancher's provisioner name: its classes and PVs name it, so the runtime serves them."""
    config_map_name: str = "local-path-config"
    """rancher's ConfigMap, imported and then written with the stack's files."""
    deployment_name: str = "local-path-provisioner"
    """rancher's Deployment, scaled to 0 replicas (and left so: the way back scales it up)."""
    cluster_role_binding_name: str = "local-path-provisioner-bind"
    """rancher's ClusterRoleBinding: bound to no one (TAKEN_OVER_GROUP), so that rancher's account
    keeps no cluster-wide rights (pods, every PV) beside the provisioner's least-privilege
    ones; the binding and its ClusterRole stay for the way back."""
    role_binding_name: str = "local-path-provisioner-bind"
    """rancher's RoleBinding in its namespace (pods there), bound to no one alike."""
    storage_classes: tuple[str, ...] = ("local-path",)
    """rancher's StorageClasses, imported; each must be one of the stack's storageClasses."""
    pod_selector: str = "app=local-path-provisioner"
    """The label of the pods of rancher's Deployment (its manifest's): the provisioner starts
    working only once none is left (--predecessor-selector), terminating ones included, nor any
    of rancher's helper pods (bare pods with a hostPath)."""


DEFAULT_KUBELET_DIRECTORY = "/var/lib/kubelet"
NODE_PLUGIN_HEALTH_PORT = 9808
"""The node plugin's /healthz port (the community's csi livenessprobe port)."""


@dataclass(frozen=True)
class NodePluginArgs:
    """The CSI node plugin's DaemonSet (stack config `csiNodePlugin`), deployed when a class is
    a CSI class."""

    kubelet_directory: str = DEFAULT_KUBELET_DIRECTORY
    """The kubelet's root directory on the nodes (k0s, microk8s and some others move it)."""
    image: str | None = None
    """The node plugin's image; None: the provisioner Deployment's."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """The node plugin pod's nodeSelector: the nodes whose CSI volumes can be mounted."""
    tolerations: tuple[Mapping[str, Any], ...] = ()
    """The node plugin pod's tolerations, in Kubernetes' shape."""
    priority_class_name: str | None = None
    """The node plugin pod's PriorityClass (e.g. system-node-critical); None: the default."""
    resources: ContainerResources = field(
        default_factory=lambda: ContainerResources(
            cpu_request="10m", memory_request="48Mi", cpu_limit=None, memory_limit="128Mi"
        )
    )
    """The node plugin container's requests and limits."""
    health_port: int = NODE_PLUGIN_HEALTH_PORT
    """The port of its /healthz (host network is not used: the pod's own port)."""
    base_directories: tuple[str, ...] = ()
    """Host directories holding the CSI classes' base paths (node_plugin.base_path_mounts)."""


@dataclass(frozen=True)
class ProvisionerDeploymentArgs:
    """Everything the provisioner's namespace, RBAC, ConfigMap and Deployment are built from."""

    config_files: ConfigMapFiles
    """The ConfigMap content (validated with provisioner.configuration.config)."""
    namespace: str = naming.DEFAULT_NAMESPACE
    """Namespace of the provisioner, its ConfigMap, helper pods and leader Lease."""
    create_namespace: bool = True
    """Create (and on destroy delete) the namespace; False uses an existing one, left alone."""
    config_map_name: str = naming.CONFIG_MAP_NAME
    """The ConfigMap's name (the runtime's --configmap-name)."""
    image: str = naming.DEFAULT_IMAGE
    """Provisioner container image."""
    image_pull_policy: str = "IfNotPresent"
    """Always, IfNotPresent or Never."""
    replicas: int = 1
    """Provisioner replicas; one leader works, the others stand by. Above 1, a
    PodDisruptionBudget keeps one running through node drains."""
    provisioner_name: str = naming.DEFAULT_PROVISIONER_NAME
    """The `provisioner` the StorageClasses name; the runtime serves only those classes."""
    debug: bool = False
    """Debug logging (stack config logLevel: debug)."""
    json_logs: bool = False
    """One JSON object per log line."""
    workers: int = defaults.WORKERS
    """Concurrent reconcilers."""
    metrics_port: int = defaults.METRICS_PORT
    """Port of /healthz, /readyz and /metrics; the probes use it."""
    leader_election: bool = defaults.LEADER_ELECTION
    """Elect one active replica on a Lease; turn off only for a single replica."""
    allow_unsafe_helper_template: bool = False
    """Trust helperPod.yaml without the safety checks (trusted administrators only)."""
    resources: ContainerResources = field(default_factory=ContainerResources)
    """Container requests and limits."""
    provisioning_retry_count: int = defaults.PROVISIONING_RETRY_COUNT
    """Failures after which a claim waits for its next change or resync; 0 retries forever."""
    deletion_retry_count: int = defaults.DELETION_RETRY_COUNT
    """The same for deleting a volume."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """The provisioner pod's nodeSelector."""
    tolerations: tuple[Mapping[str, Any], ...] = ()
    """The provisioner pod's tolerations, in Kubernetes' shape."""
    affinity: Mapping[str, Any] = field(default_factory=dict)
    """The provisioner pod's affinity, in Kubernetes' shape. Without a podAntiAffinity of its
    own, replicas above 1 keep the default one (spread over nodes)."""
    priority_class_name: str | None = None
    """The provisioner pod's PriorityClass; None for the cluster's default."""
    image_pull_secrets: tuple[str, ...] = ()
    """Secrets (in the namespace) for pulling the provisioner image."""
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    """Annotations of the provisioner pods."""
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    """Further labels of the provisioner pods (never the selector's)."""
    common_labels: Mapping[str, str] = field(default_factory=dict)
    """Labels on every object of the installation (never the stack's own)."""
    service_account_annotations: Mapping[str, str] = field(default_factory=dict)
    """Annotations of the provisioner's ServiceAccount (e.g. IRSA, workload identity)."""
    update_strategy: UpdateStrategy | None = None
    """The Deployment's strategy; None keeps Kubernetes' (RollingUpdate, 25%/25%)."""
    metrics: MetricsExposure = field(default_factory=MetricsExposure)
    """A metrics Service and ServiceMonitor."""
    look_up_service_monitor_crd: bool = True
    """Read the ServiceMonitor CRD from the cluster first, so a missing one fails preview rather
    than the update halfway; False in render mode (no cluster)."""
    deploy_csi_driver: bool = False
    """Deploy a CSIDriver named after the provisioner with storageCapacity: true, so the
    kube-scheduler reads the CSIStorageCapacity objects the provisioner publishes and places
    pods only on nodes with room. The stack sets it when capacityAwareScheduling is true, a
    path declares a capacity and the provisioner name can name a CSIDriver
    (components/capacity_scheduling.py)."""
    release_claims_on_node_loss: bool = False
    """Grant the provisioner `delete` on claims (`rbac.NODE_LOSS_RULES`): it releases the claims
    of a class with `nodeLossGracePeriod` whose node has gone. The stack sets it when a class
    sets that parameter; no other class needs the right."""
    node_plugin: NodePluginArgs | None = None
    """The CSI node plugin (DaemonSet, its RBAC and admission policy) and the CSIDriver of the
    CSI classes; None when no class is a CSI class (nothing of it is deployed)."""
    adopt: AdoptionArgs | None = None
    """The rancher installation taken over (its namespace, ConfigMap and Deployment); None for a
    fresh installation."""


@dataclass(frozen=True)
class LabelExpression:
    """A node label and the values it may have (a TopologySelectorLabelRequirement)."""

    key: str
    """The node label, e.g. topology.kubernetes.io/zone."""
    values: tuple[str, ...]
    """The values accepted."""


TopologyTerm = tuple[LabelExpression, ...]
"""A TopologySelectorTerm: label expressions that must all match."""


@dataclass(frozen=True)
class SnapshotClassArgs:
    """The VolumeSnapshotClass of a CSI class (stack config `storageClasses[].snapshotClass`):
    snapshots of its volumes are taken by the node plugin's driver."""

    name: str
    """The VolumeSnapshotClass's name (cluster-wide; the StorageClass's name unless given)."""
    deletion_policy: str = "Delete"
    """Delete (deleting a VolumeSnapshot removes its data, by the removal gate) or Retain (the
    data stays, to import again by handle)."""
    default: bool = False
    """The default class of the driver's snapshots (the is-default-class annotation)."""


@dataclass(frozen=True)
class StorageClassArgs:
    """One StorageClass served by the provisioner."""

    name: str
    """StorageClass name (cluster-wide)."""
    is_default: bool = False
    """Mark as the cluster's default class."""
    reclaim_policy: str = "Delete"
    """Delete (teardown removes the directory) or Retain (data is never touched)."""
    volume_binding_mode: str = "WaitForFirstConsumer"
    """WaitForFirstConsumer (node-local paths) or Immediate (shared filesystem only)."""
    parameters: Mapping[str, str] = field(default_factory=dict)
    """rancher's class parameters: nodePath, pathPattern, nodeAffinityKey, userPattern,
    groupPattern, permPattern, allowUnsafePathPattern."""
    default_volume_type: str | None = None
    """hostPath or local: the `defaultVolumeType` annotation; None leaves the runtime default."""
    annotations: Mapping[str, str] = field(default_factory=dict)
    """Further annotations, copied as they are."""
    allowed_topologies: tuple[TopologyTerm, ...] = ()
    """Where volumes can be provisioned: a node must match every expression of one term."""
    mount_options: tuple[str, ...] = ()
    """Mount options copied into each PersistentVolume."""
    volume_type: str | None = None
    """csi: the class's volumes are CSI volumes of the node plugin (the parameter
    `volumeType: csi`); None: hostPath or local, as default_volume_type says."""
    allow_volume_expansion: bool = True
    """Let claims grow: the runtime grants an expansion when the volume's path has room
    (docs/configure.md, "Budgets, size limits and scheduler-visible capacity")."""
    snapshot_class: SnapshotClassArgs | None = None
    """A CSI class's VolumeSnapshotClass; None: the stack deploys none for it."""

    def all_parameters(self) -> dict[str, str]:
        """The class's parameters including the one derived from volume_type."""
        parameters = dict(self.parameters)
        if self.volume_type is not None:
            parameters["volumeType"] = self.volume_type
        return parameters

    @property
    def is_csi(self) -> bool:
        """Whether the class's volumes are CSI volumes (the key or the parameter says so)."""
        return is_csi_class(self.all_parameters())

    def all_annotations(self) -> dict[str, str]:
        """The class's annotations including the ones derived from is_default and
        default_volume_type."""
        annotations = dict(self.annotations)
        if self.is_default:
            annotations[naming.DEFAULT_CLASS_ANNOTATION] = "true"
        if self.default_volume_type is not None:
            annotations[naming.DEFAULT_VOLUME_TYPE_ANNOTATION] = self.default_volume_type
        return annotations


@dataclass(frozen=True)
class StorageClassesArgs:
    """The StorageClasses of one provisioner."""

    classes: tuple[StorageClassArgs, ...]
    """The classes, in stack-config order."""
    provisioner_name: str = naming.DEFAULT_PROVISIONER_NAME
    """The provisioner every class names."""
    common_labels: Mapping[str, str] = field(default_factory=dict)
    """Labels on every class (the stack's commonLabels)."""
    adopted: tuple[str, ...] = ()
    """Names of classes that exist already (rancher's, stack config `adopt`): imported, and
    left in the cluster when the stack deletes them."""
    look_up_snapshot_crd: bool = True
    """With a snapshot class: read the VolumeSnapshotClass CRD from the cluster first, so a
    cluster without the snapshot API fails preview rather than the update halfway; False in
    render mode (no cluster)."""
