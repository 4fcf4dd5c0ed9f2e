"""The CSI node plugin's Kubernetes objects: its ServiceAccount, ClusterRole and binding, the
ValidatingAdmissionPolicy (and binding) that holds each node's plugin to its node's PVs, and
the DaemonSet. Registered by ProvisionerDeployment when a class is a CSI class; the decisions
are node_plugin.py's."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import cast

import pulumi
import pulumi_kubernetes as kubernetes

from components import naming, node_plugin
from components.args import NodePluginArgs, ProvisionerDeploymentArgs

core = kubernetes.core.v1
access = kubernetes.rbac.v1
admission = kubernetes.admissionregistration.v1

Metadata = Callable[[str, str], kubernetes.meta.v1.ObjectMetaArgsDict]


def pod_template(
    args: ProvisionerDeploymentArgs, plugin: NodePluginArgs, instance: str
) -> core.PodTemplateSpecArgsDict:
    """The DaemonSet's pod template."""
    mounts = node_plugin.host_mounts(plugin, args.provisioner_name, plugin.base_directories)
    container: core.ContainerArgsDict = {
        "name": node_plugin.CONTAINER_NAME,
        "image": plugin.image or args.image,
        "image_pull_policy": args.image_pull_policy,
        # The image's one entrypoint (the image holds no `python` on its PATH).
        "command": [naming.PROVISIONER_COMMAND, "csi-node-plugin"],
        "args": node_plugin.arguments(plugin, args.provisioner_name),
        "env": [
            {"name": "NODE_NAME", "value_from": {"field_ref": {"field_path": "spec.nodeName"}}}
        ],
        "ports": [{"name": "healthz", "container_port": plugin.health_port, "protocol": "TCP"}],
        # /healthz answers only while the CSI socket (and registration, when asked) serve
        # (provisioner/csi/liveness.py): a plugin the kubelet can no longer reach restarts.
        "liveness_probe": {
            "http_get": {"path": "/healthz", "port": "healthz"},
            "initial_delay_seconds": 5,
            "period_seconds": 10,
            "timeout_seconds": 3,
            "failure_threshold": 3,
        },
        "resources": {"requests": plugin.resources.requests(), "limits": plugin.resources.limits()},
        # Privileged because mounts need it: bind-mounting a volume's directory into a pod's
        # directory takes CAP_SYS_ADMIN, and Kubernetes allows Bidirectional propagation (the
        # mount reaching the kubelet's namespace) only in a privileged container. Root, to make
        # directories for any volume owner. The image's filesystem stays read-only.
        "security_context": {
            "privileged": True,
            "run_as_user": 0,
            "read_only_root_filesystem": True,
        },
        "volume_mounts": [
            *(_volume_mount(mount) for mount in mounts),
            {"name": "config", "mount_path": naming.CONFIG_DIRECTORY, "read_only": True},
            {"name": "tmp", "mount_path": "/tmp"},
            {"name": "shell", "mount_path": node_plugin.SHELL_DIRECTORY, "read_only": True},
        ],
    }
    # The plugin's image holds no shell (nor does the provisioner's: it is the same), yet the
    # config's setup and teardown scripts and the fixed steps are shell, as in a helper pod:
    # they run with the helper pod image's own busybox and applets, copied here first.
    shell: core.ContainerArgsDict = {
        "name": "shell",
        "image": helper_image(args),
        "image_pull_policy": "IfNotPresent",
        "command": ["/bin/sh", "-c", node_plugin.SHELL_COPY],
        "volume_mounts": [{"name": "shell", "mount_path": node_plugin.SHELL_DIRECTORY}],
        "security_context": {"read_only_root_filesystem": True},
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}},
    }
    spec: core.PodSpecArgsDict = {
        "service_account_name": node_plugin.SERVICE_ACCOUNT,
        "init_containers": [shell],
        "containers": [container],
        "volumes": [
            *(_volume(mount) for mount in mounts),
            # The provisioner's ConfigMap, at the path its Deployment uses: the plugin reads its
            # node's base paths from config.json, and sees a change as the provisioner does.
            {"name": "config", "config_map": {"name": args.config_map_name}},
            {"name": "tmp", "empty_dir": {"size_limit": "16Mi"}},
            {"name": "shell", "empty_dir": {"size_limit": "16Mi"}},
        ],
    }
    if plugin.node_selector:
        spec["node_selector"] = dict(plugin.node_selector)
    if plugin.tolerations:
        spec["tolerations"] = [dict(toleration) for toleration in plugin.tolerations]  # type: ignore[misc]
    if plugin.priority_class_name is not None:
        spec["priority_class_name"] = plugin.priority_class_name
    if args.image_pull_secrets:
        spec["image_pull_secrets"] = [{"name": secret} for secret in args.image_pull_secrets]
    labels = {
        **args.common_labels,
        **naming.labels(instance, "node-plugin"),
        **selector_labels(instance),
    }
    return {"metadata": {"labels": labels}, "spec": spec}


def helper_image(args: ProvisionerDeploymentArgs) -> str:
    """The image of the helper pods' template (helperPod.yaml): its busybox runs the scripts."""
    template = args.config_files.bundle.helper_pod_template
    return str(template["spec"]["containers"][0]["image"])


def _volume_mount(mount: node_plugin.HostMount) -> core.VolumeMountArgsDict:
    return {
        "name": mount.volume_name,
        "mount_path": mount.mount_path,
        "mount_propagation": mount.propagation,
    }


def _volume(mount: node_plugin.HostMount) -> core.VolumeArgsDict:
    return {"name": mount.volume_name, "host_path": {"path": mount.path, "type": mount.type}}


def selector_labels(instance: str) -> dict[str, str]:
    """The node plugin's pods, by a name of their own: with the provisioner's, its Deployment's
    selector, metrics Service and PodDisruptionBudget would count them as provisioner pods."""
    return {**naming.selector_labels(instance), "app.kubernetes.io/name": node_plugin.APP_NAME}


def register(  # noqa: PLR0917 (the parent component's pieces, passed on as they are)
    parent: pulumi.Resource,
    name: str,
    args: ProvisionerDeploymentArgs,
    plugin: NodePluginArgs,
    namespace: pulumi.Input[str],
    metadata: Metadata,
    labels: Callable[[str], Mapping[str, str]],
    config_map: pulumi.Resource,
) -> None:
    child = pulumi.ResourceOptions(parent=parent)
    account = core.ServiceAccount(
        f"{name}-node-plugin-sa",
        metadata=metadata(node_plugin.SERVICE_ACCOUNT, "node-plugin"),
        opts=child,
    )
    cluster_metadata: kubernetes.meta.v1.ObjectMetaArgsDict = {
        "name": node_plugin.cluster_scoped_name(args.namespace),
        "labels": dict(labels("rbac")),
        "annotations": naming.FIELD_OWNERSHIP_ANNOTATIONS,
    }
    role = access.ClusterRole(
        f"{name}-node-plugin-clusterrole",
        metadata=cluster_metadata,
        rules=[
            {
                "api_groups": [rule.api_group],
                "resources": list(rule.resources),
                "verbs": list(rule.verbs),
            }
            for rule in node_plugin.RULES
        ],
        opts=child,
    )
    binding = access.ClusterRoleBinding(
        f"{name}-node-plugin-clusterrolebinding",
        metadata=cluster_metadata,
        role_ref={
            "api_group": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role.metadata.name,
        },
        subjects=[
            {"kind": "ServiceAccount", "name": account.metadata.name, "namespace": namespace}
        ],
        opts=child,
    )
    policy_metadata: kubernetes.meta.v1.ObjectMetaArgsDict = {
        "name": node_plugin.admission_policy_name(args.namespace),
        "labels": dict(labels("admission")),
        "annotations": naming.FIELD_OWNERSHIP_ANNOTATIONS,
    }
    policy = admission.ValidatingAdmissionPolicy(
        f"{name}-node-plugin-admission-policy",
        metadata=policy_metadata,
        spec=cast(
            "admission.ValidatingAdmissionPolicySpecArgsDict",
            node_plugin.admission_policy_spec(args.namespace),
        ),
        opts=child,
    )
    policy_binding = admission.ValidatingAdmissionPolicyBinding(
        f"{name}-node-plugin-admission-binding",
        metadata=policy_metadata,
        spec={"policy_name": policy.metadata.name, "validation_actions": ["Deny"]},
        opts=child,
    )
    kubernetes.apps.v1.DaemonSet(
        f"{name}-node-plugin",
        metadata=metadata(node_plugin.DAEMON_SET_NAME, "node-plugin"),
        spec={
            "selector": {"match_labels": selector_labels(name)},
            "template": pod_template(args, plugin, name),
        },
        opts=pulumi.ResourceOptions(
            parent=parent,
            # Its rights, and the policy that narrows them, before its first pod runs.
            depends_on=[config_map, account, binding, policy_binding],
        ),
    )
