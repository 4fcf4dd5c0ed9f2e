"""The provisioner itself: namespace, service accounts, RBAC, ConfigMap, Deployment, PDB, and
the CSIDriver that makes the kube-scheduler read its published capacities.

A config change updates the ConfigMap and nothing else: the ConfigMap is mounted as a
directory (no subPath), kubelet swaps its symlink, and the runtime's hot reload picks it up
within seconds. So the pod template carries no config hash and the Deployment never rolls for
a config edit; the kubernetes provider is expected to update ConfigMaps in place
(`enableConfigMapMutable`, see program.py) rather than replace them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pulumi
import pulumi_kubernetes as kubernetes

from components import naming, node_plugin, node_plugin_resources, rbac
from components.args import AdoptionArgs, ProvisionerDeploymentArgs
from components.plain_args import refuse_outputs

core = kubernetes.core.v1
access = kubernetes.rbac.v1

CONTAINER_NAME = "provisioner"
DEPLOYMENT_NAME = "local-path-storage-provisioner"
RUN_AS_USER = 65532
TERMINATION_GRACE_PERIOD_SECONDS = 60
STARTUP_PROBE_DELAY_SECONDS = 2
"""The interpreter's start and imports before the probe port listens: a fraction of a second
on an idle node, above one second on a busy node whose page cache does not hold the image yet
(measured on real nodes). A probe sent earlier would be refused and logged as a Warning."""
STARTUP_PROBE_TIMEOUT_SECONDS = 10
STARTUP_PROBE_FAILURES = 60
"""A minute to start (a slow node, a large cluster's first list) before the kubelet restarts
the container."""

"""A fixed non-root uid/gid (distroless' `nonroot`)."""


def provisioner_arguments(args: ProvisionerDeploymentArgs) -> list[str]:
    """The runtime's command-line flags (provisioner/configuration/options.py). The namespace comes
    from the POD_NAMESPACE environment variable (downward API) instead."""
    arguments = [
        f"--provisioner-name={args.provisioner_name}",
        f"--config={naming.CONFIG_DIRECTORY}/config.json",
        f"--configmap-name={args.config_map_name}",
        f"--service-account-name={naming.HELPER_SERVICE_ACCOUNT}",
        f"--worker-threads={args.workers}",
        f"--provisioning-retry-count={args.provisioning_retry_count}",
        f"--deletion-retry-count={args.deletion_retry_count}",
        f"--metrics-port={args.metrics_port}",
        "--leader-election" if args.leader_election else "--no-leader-election",
    ]
    if args.debug:
        arguments.append("--debug")
    if args.json_logs:
        arguments.append("--json-logs")
    if args.allow_unsafe_helper_template:
        arguments.append("--allow-unsafe-helper-template")
    if args.adopt is not None:
        # rancher holds no lock to share: the leader works only once rancher's pods are gone.
        arguments.append(f"--predecessor-selector={args.adopt.pod_selector}")
    return arguments


def pod_template(args: ProvisionerDeploymentArgs, instance: str) -> core.PodTemplateSpecArgsDict:
    """The Deployment's pod template."""
    probe_port = "metrics"
    container: core.ContainerArgsDict = {
        "name": CONTAINER_NAME,
        "image": args.image,
        "image_pull_policy": args.image_pull_policy,
        "command": [naming.PROVISIONER_COMMAND],
        "args": provisioner_arguments(args),
        "env": [
            {
                "name": "POD_NAMESPACE",
                "value_from": {"field_ref": {"field_path": "metadata.namespace"}},
            }
        ],
        "ports": [{"name": probe_port, "container_port": args.metrics_port, "protocol": "TCP"}],
        # Once a second once the port listens, so the pod is Ready (and a rolling update stops
        # the old leader) as soon as it serves, not up to a readiness period later. Its first
        # answer waits for the informers' first sync (provisioner.process.app
        # STARTUP_SETTLE_SECONDS, below this timeout): it succeeds at once, and the kubelet
        # then asks /readyz at once. The liveness endpoint, not /readyz: a replica that is
        # alive but rightly not ready (an invalid config, a predecessor still running) must
        # not be restarted for it.
        "startup_probe": {
            "http_get": {"path": "/healthz", "port": probe_port},
            "initial_delay_seconds": STARTUP_PROBE_DELAY_SECONDS,
            "period_seconds": 1,
            "timeout_seconds": STARTUP_PROBE_TIMEOUT_SECONDS,
            "failure_threshold": STARTUP_PROBE_FAILURES,
        },
        "liveness_probe": {
            "http_get": {"path": "/healthz", "port": probe_port},
            "period_seconds": 10,
            "timeout_seconds": 3,
            "failure_threshold": 3,
        },
        "readiness_probe": {
            "http_get": {"path": "/readyz", "port": probe_port},
            "period_seconds": 5,
            # Above the API server check /readyz may make (2 s, provisioner.process.app): on a
            # busy node the default 1 s timed out and logged a Warning for a healthy replica
            # (and the liveness probe's, answered without any API call, timed out there too).
            "timeout_seconds": 3,
            "failure_threshold": 2,
        },
        "resources": {
            "requests": args.resources.requests(),
            "limits": args.resources.limits(),
        },
        "security_context": {
            "allow_privilege_escalation": False,
            "read_only_root_filesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volume_mounts": [
            {"name": "config", "mount_path": naming.CONFIG_DIRECTORY, "read_only": True},
            {"name": "tmp", "mount_path": "/tmp"},
        ],
    }
    spec: core.PodSpecArgsDict = {
        "service_account_name": naming.PROVISIONER_SERVICE_ACCOUNT,
        # Above the provisioner's bounded stop on SIGTERM
        # (provisioner.process.app.STOP_BUDGET_SECONDS, 51 s: drain, helper pods, lease release,
        # and our finalizers released when the installation is being removed), so all of it is
        # done before any SIGKILL.
        "termination_grace_period_seconds": TERMINATION_GRACE_PERIOD_SECONDS,
        "security_context": {
            "run_as_non_root": True,
            "run_as_user": RUN_AS_USER,
            "run_as_group": RUN_AS_USER,
            "seccomp_profile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {"name": "config", "config_map": {"name": args.config_map_name}},
            # Python and its libraries may want a scratch directory; the root is read-only.
            {"name": "tmp", "empty_dir": {"size_limit": "16Mi"}},
        ],
    }
    if args.node_selector:
        spec["node_selector"] = dict(args.node_selector)
    # Tolerations and affinity come from the stack in Kubernetes' camelCase shape, which the
    # provider takes as it is; the SDK's TypedDicts spell them in snake_case (hence the ignores).
    if args.tolerations:
        spec["tolerations"] = [dict(toleration) for toleration in args.tolerations]  # type: ignore[misc]
    if args.priority_class_name is not None:
        spec["priority_class_name"] = args.priority_class_name
    if args.image_pull_secrets:
        spec["image_pull_secrets"] = [{"name": secret} for secret in args.image_pull_secrets]
    affinity = _affinity(args, instance)
    if affinity:
        spec["affinity"] = affinity  # type: ignore[typeddict-item]
    metadata: kubernetes.meta.v1.ObjectMetaArgsDict = {
        "labels": {
            **args.common_labels,
            **args.pod_labels,
            **naming.labels(instance, "provisioner"),
        }
    }
    if args.pod_annotations:
        metadata["annotations"] = dict(args.pod_annotations)
    return {"metadata": metadata, "spec": spec}


def _affinity(args: ProvisionerDeploymentArgs, instance: str) -> dict[str, Any]:
    """The stack's affinity (in Kubernetes' camelCase shape); with replicas above 1 and no
    podAntiAffinity of the stack's own, stand-by replicas prefer other nodes, so losing one
    node does not lose the provisioner."""
    affinity = dict(args.affinity)
    if args.replicas > 1 and "podAntiAffinity" not in affinity:
        affinity["podAntiAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": naming.selector_labels(instance)},
                    },
                }
            ]
        }
    return affinity


def csi_driver_spec() -> kubernetes.storage.v1.CSIDriverSpecArgsDict:
    """What the kube-scheduler reads (storageCapacity) and what keeps kubelet and the
    attach/detach controller out of our volumes' way: nothing to attach, no pod info to pass,
    persistent volumes only (they are hostPath or local, never CSI, so no node plugin is
    asked for them)."""
    return {
        "storage_capacity": True,
        "attach_required": False,
        "pod_info_on_mount": False,
        "volume_lifecycle_modes": ["Persistent"],
    }


SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"


def service_monitor_spec(instance: str) -> dict[str, Any]:
    """Scrape /metrics of the pods behind the metrics Service (selected by its labels)."""
    return {
        "selector": {"matchLabels": naming.labels(instance, "metrics")},
        "endpoints": [{"port": "metrics", "path": "/metrics"}],
    }


def _policy_rule(rule: rbac.PolicyRule) -> access.PolicyRuleArgsDict:
    return {
        "api_groups": [rule.api_group],
        "resources": list(rule.resources),
        "verbs": list(rule.verbs),
    }


def _adopted(parent: pulumi.Resource, namespace: str, object_name: str) -> pulumi.ResourceOptions:
    """An object of the adopted installation: imported (then updated to the stack's inputs)
    and left in the cluster when the stack deletes it, for the way back to rancher."""
    return pulumi.ResourceOptions(
        parent=parent, import_=f"{namespace}/{object_name}", retain_on_delete=True
    )


def _scale_down_rancher(
    parent: pulumi.Resource, name: str, namespace: str, adopt: AdoptionArgs
) -> pulumi.Resource:
    """rancher's Deployment at 0 replicas (a server-side apply patch of that one field, taken
    over from whoever set it), otherwise untouched: the way back scales it up again. Kept at 0
    when the stack goes, so that destroying never restarts rancher beside a running provisioner
    of ours."""
    return kubernetes.apps.v1.DeploymentPatch(
        f"{name}-rancher-scale-down",
        metadata={
            "name": adopt.deployment_name,
            "namespace": namespace,
            "annotations": {"pulumi.com/patchForce": "true"},
        },
        spec={"replicas": 0},
        opts=pulumi.ResourceOptions(parent=parent, retain_on_delete=True),
    )


TAKEN_OVER_GROUP = "local-path-storage:taken-over-from-rancher"
"""The one subject left in rancher's bindings: a group no identity is put in. Why not none: an
apply patch cannot send an empty list (the provider drops it, and the field keeps its owner), and
it says in `kubectl get rolebinding -o wide` what happened to the binding."""
TAKEN_OVER_SUBJECT: access.SubjectPatchArgsDict = {
    "kind": "Group",
    "api_group": "rbac.authorization.k8s.io",
    "name": TAKEN_OVER_GROUP,
}


def _take_rancher_rights(
    parent: pulumi.Resource,
    name: str,
    namespace: str,
    adopt: AdoptionArgs,
    after: pulumi.Resource,
) -> None:
    """rancher's two bindings name no one but TAKEN_OVER_GROUP (server-side apply patches of
    that one field, taken over from whoever set it): its service account keeps no rights once
    the provisioner that replaces it runs (`after`: a rancher still running would fail its
    writes half-way). The roles and bindings stay, kept so when the stack goes: the way back
    puts the account back (docs/rancher.md, "The way back")."""
    options = pulumi.ResourceOptions(parent=parent, depends_on=[after], retain_on_delete=True)
    patch_force = {"pulumi.com/patchForce": "true"}
    cluster_metadata: kubernetes.meta.v1.ObjectMetaPatchArgsDict = {
        "name": adopt.cluster_role_binding_name,
        "annotations": patch_force,
    }
    access.ClusterRoleBindingPatch(
        f"{name}-rancher-unbind-cluster",
        metadata=cluster_metadata,
        subjects=[TAKEN_OVER_SUBJECT],
        opts=options,
    )
    metadata: kubernetes.meta.v1.ObjectMetaPatchArgsDict = {
        "name": adopt.role_binding_name,
        "namespace": namespace,
        "annotations": patch_force,
    }
    access.RoleBindingPatch(
        f"{name}-rancher-unbind",
        metadata=metadata,
        subjects=[TAKEN_OVER_SUBJECT],
        opts=options,
    )


class ProvisionerDeployment(pulumi.ComponentResource):
    """One installation of the provisioner (everything but the StorageClasses)."""

    namespace: pulumi.Output[str]
    """The namespace the provisioner runs in."""
    config_map_name: pulumi.Output[str]
    """The ConfigMap holding config.json, setup, teardown and helperPod.yaml."""
    provisioner_name: pulumi.Output[str]
    """The provisioner name StorageClasses must use."""
    deployment_name: pulumi.Output[str]
    """The provisioner Deployment."""

    def _service_monitor(
        self,
        name: str,
        args: ProvisionerDeploymentArgs,
        metadata: Callable[[str, str], kubernetes.meta.v1.ObjectMetaArgsDict],
        service: core.Service,
    ) -> None:
        """The Prometheus Operator's ServiceMonitor for the metrics Service. Applying to a
        cluster, the stack first reads the CRD: a cluster without it fails preview on that read
        (naming the CRD), before anything is changed, instead of failing the update halfway.
        Rendering, there is no cluster to ask: the manifest is written, for a cluster that has
        the CRD."""
        depends_on: list[pulumi.Resource] = [service]
        if args.look_up_service_monitor_crd:
            depends_on.append(
                kubernetes.apiextensions.v1.CustomResourceDefinition.get(
                    f"{name}-servicemonitor-crd",
                    SERVICE_MONITOR_CRD,
                    opts=pulumi.ResourceOptions(parent=self),
                )
            )
        kubernetes.apiextensions.CustomResource(
            f"{name}-servicemonitor",
            api_version="monitoring.coreos.com/v1",
            kind="ServiceMonitor",
            metadata=metadata(naming.METRICS_SERVICE_NAME, "metrics"),
            spec=service_monitor_spec(name),
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on),
        )

    def __init__(
        self,
        name: str,
        args: ProvisionerDeploymentArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        refuse_outputs(args)
        super().__init__("local-path-storage:index:ProvisionerDeployment", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        def labels(component: str) -> dict[str, str]:
            return {**args.common_labels, **naming.labels(name, component)}

        namespace: pulumi.Input[str] = args.namespace
        if args.create_namespace:
            namespace_resource = core.Namespace(
                f"{name}-namespace",
                metadata={
                    "name": args.namespace,
                    "annotations": naming.FIELD_OWNERSHIP_ANNOTATIONS,
                    # Helper pods mount hostPath volumes, which the baseline and restricted Pod
                    # Security levels forbid; the provisioner pod itself is restricted-compliant.
                    "labels": {**labels("namespace"), naming.POD_SECURITY_LABEL: "privileged"},
                },
                opts=child,
            )
            # Using the namespace's output (not the plain string) orders every namespaced child
            # after the namespace's creation.
            namespace = namespace_resource.metadata.name
        # Otherwise the namespace is the stack's input, not its resource: the stack neither
        # creates nor deletes it (nor sets its Pod Security level: see components/README.md).

        def metadata(object_name: str, component: str) -> kubernetes.meta.v1.ObjectMetaArgsDict:
            return {
                "name": object_name,
                "namespace": namespace,
                "labels": labels(component),
                "annotations": naming.FIELD_OWNERSHIP_ANNOTATIONS,
            }

        provisioner_account = core.ServiceAccount(
            f"{name}-provisioner-sa",
            metadata={
                **metadata(naming.PROVISIONER_SERVICE_ACCOUNT, "provisioner"),
                "annotations": {
                    **args.service_account_annotations,
                    **naming.FIELD_OWNERSHIP_ANNOTATIONS,
                },
            },
            opts=child,
        )
        core.ServiceAccount(
            f"{name}-helper-sa",
            metadata=metadata(naming.HELPER_SERVICE_ACCOUNT, "helper"),
            automount_service_account_token=False,
            opts=child,
        )
        subject: access.SubjectArgsDict = {
            "kind": "ServiceAccount",
            "name": provisioner_account.metadata.name,
            "namespace": namespace,
        }
        cluster_name = naming.cluster_scoped_name(args.namespace)
        cluster_metadata: kubernetes.meta.v1.ObjectMetaArgsDict = {
            "name": cluster_name,
            "labels": labels("rbac"),
            "annotations": naming.FIELD_OWNERSHIP_ANNOTATIONS,
        }
        cluster_role = access.ClusterRole(
            f"{name}-clusterrole",
            metadata=cluster_metadata,
            rules=[
                _policy_rule(rule)
                for rule in rbac.CLUSTER_RULES
                + (rbac.NODE_LOSS_RULES if args.release_claims_on_node_loss else ())
                + (rbac.SNAPSHOT_RULES if args.node_plugin is not None else ())
            ],
            opts=child,
        )
        cluster_role_binding = access.ClusterRoleBinding(
            f"{name}-clusterrolebinding",
            metadata=cluster_metadata,
            role_ref={
                "api_group": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_role.metadata.name,
            },
            subjects=[subject],
            opts=child,
        )
        role = access.Role(
            f"{name}-role",
            metadata=metadata(naming.PROVISIONER_SERVICE_ACCOUNT, "rbac"),
            rules=[_policy_rule(rule) for rule in rbac.NAMESPACE_RULES],
            opts=child,
        )
        role_binding = access.RoleBinding(
            f"{name}-rolebinding",
            metadata=metadata(naming.PROVISIONER_SERVICE_ACCOUNT, "rbac"),
            role_ref={
                "api_group": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": role.metadata.name,
            },
            subjects=[subject],
            opts=child,
        )
        config_map = core.ConfigMap(
            f"{name}-config",
            metadata=metadata(args.config_map_name, "config"),
            data=args.config_files.to_data(),
            opts=child
            if args.adopt is None
            else _adopted(self, args.namespace, args.config_map_name),
        )
        # rancher holds no lock (v0.0.37 runs without leader election): it stops before ours
        # starts, and a claim it was working on is ours to finish (same PV name, same path).
        predecessors: list[pulumi.Resource] = []
        if args.adopt is not None:
            predecessors.append(_scale_down_rancher(self, name, args.namespace, args.adopt))
        spec: kubernetes.apps.v1.DeploymentSpecArgsDict = {
            "replicas": args.replicas,
            "selector": {"match_labels": naming.selector_labels(name)},
            "template": pod_template(args, name),
        }
        if args.update_strategy is not None:
            spec["strategy"] = args.update_strategy.to_spec()  # type: ignore[typeddict-item]
        deployment = kubernetes.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={
                **metadata(DEPLOYMENT_NAME, "provisioner"),
                "annotations": {
                    **naming.FIELD_OWNERSHIP_ANNOTATIONS,
                    **naming.FOREGROUND_DELETION_ANNOTATIONS,
                },
            },
            spec=spec,
            opts=pulumi.ResourceOptions(
                parent=self,
                # The pod template names its ConfigMap and service account by their fixed
                # names; the rights must be in place before the first pod starts.
                depends_on=[
                    config_map,
                    provisioner_account,
                    cluster_role_binding,
                    role_binding,
                    *predecessors,
                ],
                # A replacement (a new namespace) moves the leader-election Lease with it: the
                # new pods cannot see the old ones' Lease, so the old Deployment and its pods
                # (foreground deletion) must be gone before the new one is created, or two
                # leaders would work the same claims.
                delete_before_replace=True,
            ),
        )
        if args.adopt is not None:
            _take_rancher_rights(self, name, args.namespace, args.adopt, deployment)
        if args.node_plugin is not None:
            # One CSIDriver, named as the node plugin names its driver: the kubelet and the
            # attach/detach controller look it up by the PV's driver (without it they would
            # wait for an attachment that never comes). With a provisionerName without "/" it is
            # also the scheduler's (its name is then the provisioner's), capacity included.
            kubernetes.storage.v1.CSIDriver(
                f"{name}-csidriver",
                metadata={
                    "name": node_plugin.driver_name(args.provisioner_name),
                    "labels": labels("csi-driver"),
                    "annotations": naming.FIELD_OWNERSHIP_ANNOTATIONS,
                },
                spec=cast(
                    "kubernetes.storage.v1.CSIDriverSpecArgsDict",
                    node_plugin.csi_driver_spec(args.deploy_csi_driver),
                ),
                opts=pulumi.ResourceOptions(
                    parent=self,
                    replace_on_changes=list(node_plugin.CSI_DRIVER_REPLACED_ON),
                    delete_before_replace=True,
                ),
            )
            node_plugin_resources.register(
                self, name, args, args.node_plugin, namespace, metadata, labels, config_map
            )
        elif args.deploy_csi_driver:
            # Named as the StorageClasses' provisioner: that is how the scheduler finds it.
            # Cluster-scoped, so a rename replaces it (a new name is a new object).
            kubernetes.storage.v1.CSIDriver(
                f"{name}-csidriver",
                metadata={
                    "name": args.provisioner_name,
                    "labels": labels("scheduling"),
                    "annotations": naming.FIELD_OWNERSHIP_ANNOTATIONS,
                },
                spec=csi_driver_spec(),
                opts=child,
            )
        if args.replicas > 1:
            kubernetes.policy.v1.PodDisruptionBudget(
                f"{name}-pdb",
                metadata=metadata(DEPLOYMENT_NAME, "provisioner"),
                spec={
                    "min_available": 1,
                    "selector": {"match_labels": naming.selector_labels(name)},
                },
                opts=child,
            )

        if args.metrics.service:
            service = core.Service(
                f"{name}-metrics",
                metadata=metadata(naming.METRICS_SERVICE_NAME, "metrics"),
                spec={
                    "type": "ClusterIP",
                    "selector": naming.selector_labels(name),
                    "ports": [
                        {
                            "name": "metrics",
                            "port": args.metrics_port,
                            "target_port": "metrics",
                            "protocol": "TCP",
                        }
                    ],
                },
                opts=child,
            )
            if args.metrics.service_monitor:
                self._service_monitor(name, args, metadata, service)

        self.namespace = pulumi.Output.from_input(namespace)
        self.config_map_name = config_map.metadata.name
        self.provisioner_name = pulumi.Output.from_input(args.provisioner_name)
        self.deployment_name = deployment.metadata.name
        self.register_outputs(
            {
                "namespace": self.namespace,
                "config_map_name": self.config_map_name,
                "provisioner_name": self.provisioner_name,
                "deployment_name": self.deployment_name,
            }
        )
