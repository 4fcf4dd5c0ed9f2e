"""Every type token that writes an object the pack guards gets that object's checks: a
`<Kind>Patch` (what it sets), each item of a `<Kind>List`, a Job's and a CronJob's pod template,
any API version of a kind; and a pod spec in a kind the pack does not read fails closed when it
would run the provisioner."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from pulumi_policy.proxy import unknown_checking_proxy

from policy import default_class, helper_pods, production, provisioner_config, rbac, storage_paths
from policy.resources import Resource
from tests.components.test_adoption import takeover_run
from tests.policy.resources import GOOD_CONFIG, PINNED_HELPER_POD, helper_pod, storage_class

KUBELET = {
    "nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/var/lib/kubelet"]}]
}
IN_KUBELET = '"/var/lib/kubelet" lies in the system directory /var/lib/kubelet'
UNSAFE = "runs with --allow-unsafe-helper-template"
UNSAFE_PROVISIONER = {
    "name": "provisioner",
    "image": "local-path-storage/provisioner:0.1.0",
    "command": ["local-path-storage-provisioner"],
    "args": ["--allow-unsafe"],
}


def token(group_version: str, kind: str) -> str:
    return f"kubernetes:{group_version}:{kind}"


def listed(kind_token: str, *items: dict[str, Any]) -> Resource:
    """A `<Kind>List` resource (auto-named: no metadata.name) holding `items`."""
    return Resource(f"{kind_token}List", {"items": list(items)}, "urn::list::things")


def config_map_body(data: dict[str, str], name: str = "local-path-config") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "lps"}, "data": data}


def config_map_patch(**data: str) -> Resource:
    return Resource(token("core/v1", "ConfigMapPatch"), config_map_body(data), "urn::cmp")


CONFIG_MAP_TOKEN = token("core/v1", "ConfigMap")


def test_a_config_map_patch_of_config_json_alone_gets_the_path_check() -> None:
    """The finding: a ConfigMapPatch alone put volumes under /var/lib/kubelet."""
    [message] = storage_paths.check_resource(
        config_map_patch(**{"config.json": json.dumps(KUBELET)})
    )
    assert message.startswith(
        "ConfigMapPatch local-path-config config.json.nodePathMap[0].paths[0]: " + IN_KUBELET
    )


def test_each_item_of_a_config_map_list_gets_the_path_check() -> None:
    items = [
        config_map_body({"config.json": json.dumps(GOOD_CONFIG)}, "good"),
        config_map_body({"config.json": json.dumps(KUBELET)}, "bad"),
    ]
    [message] = storage_paths.check_resource(listed(CONFIG_MAP_TOKEN, *items))
    assert message.startswith(
        "ConfigMapList things items[1] (ConfigMap bad) config.json.nodePathMap[0].paths[0]: "
    )
    assert IN_KUBELET in message


def test_config_json_in_binary_data_is_read_as_the_mounted_file() -> None:
    """binaryData keys are files of the ConfigMap's volume, which the provisioner reads."""
    encoded = base64.b64encode(json.dumps(KUBELET).encode()).decode()
    props = {"metadata": {"name": "local-path-config"}, "binaryData": {"config.json": encoded}}
    [message] = storage_paths.check_resource(Resource(CONFIG_MAP_TOKEN, props, "urn::cm"))
    assert IN_KUBELET in message


def test_a_config_map_patch_of_the_helper_template_alone_gets_the_helper_checks() -> None:
    """A Patch that sets only helperPod.yaml keeps the cluster's config.json: still ours."""
    privileged = config_map_patch(
        **{"helperPod.yaml": helper_pod(securityContext={"privileged": True})}
    )
    [message] = helper_pods.check_privileged(privileged)
    assert message.startswith("ConfigMapPatch local-path-config helperPod.yaml: ")
    assert "securityContext.privileged" in message
    unpinned = config_map_patch(**{"helperPod.yaml": helper_pod(image="busybox")})
    [message] = helper_pods.check_pinned_image(unpinned)
    assert '"busybox" has no tag' in message
    not_a_pod = config_map_patch(**{"helperPod.yaml": "kind: Deployment\nspec: {}\n"})
    [message] = provisioner_config.check_resource(not_a_pod)
    assert "helperPod.yaml" in message and "must be a v1 Pod" in message


def test_a_config_map_patch_is_validated_on_what_it_sets() -> None:
    """config.json the runtime refuses is refused; the scripts and template a Patch leaves out
    keep the cluster's values, so their absence is not an empty script."""
    refused = config_map_patch(
        **{"config.json": '{"nodePathMap": [{"node": "n", "paths": ["data"]}]}'}
    )
    [message] = provisioner_config.check_resource(refused)
    assert message.startswith("ConfigMapPatch local-path-config ")
    assert '"data" must be an absolute path' in message
    assert (
        provisioner_config.check_resource(
            config_map_patch(**{"config.json": json.dumps(GOOD_CONFIG)})
        )
        == []
    )
    emptied = config_map_patch(**{"config.json": json.dumps(GOOD_CONFIG), "setup": ""})
    [message] = provisioner_config.check_resource(emptied)
    assert "the setup script is empty" in message


def test_a_config_map_list_item_is_validated() -> None:
    bad = config_map_body({"config.json": "{not json", "helperPod.yaml": PINNED_HELPER_POD})
    [message] = provisioner_config.check_resource(listed(CONFIG_MAP_TOKEN, bad))
    assert message.startswith("ConfigMapList things items[0] (ConfigMap local-path-config) ")


def test_a_config_map_patch_of_other_keys_is_not_the_provisioners() -> None:
    other = config_map_patch(**{"nginx.conf": "server {}"})
    for check in (storage_paths.check_resource, provisioner_config.check_resource):
        assert check(other) == []


POD = {"spec": {"containers": [UNSAFE_PROVISIONER]}}
TEMPLATED = {"spec": {"template": POD}}
WORKLOADS = [
    ("apps/v1", "Deployment", TEMPLATED),
    ("apps/v1", "StatefulSet", TEMPLATED),
    ("apps/v1", "DaemonSet", TEMPLATED),
    ("apps/v1", "ReplicaSet", TEMPLATED),
    ("core/v1", "Pod", POD),
    ("batch/v1", "Job", TEMPLATED),
    ("batch/v1", "CronJob", {"spec": {"jobTemplate": TEMPLATED}}),
    # Old API versions the provider still has: the kind, not the version, says where the pod is.
    ("extensions/v1beta1", "Deployment", TEMPLATED),
    ("apps/v1beta2", "DaemonSet", TEMPLATED),
    ("batch/v1beta1", "CronJob", {"spec": {"jobTemplate": TEMPLATED}}),
]


@pytest.mark.parametrize(("group_version", "kind", "body"), WORKLOADS)
@pytest.mark.parametrize("form", ["", "Patch", "List"])
def test_every_workload_form_running_the_provisioner_unsafe_is_refused(
    group_version: str, kind: str, body: dict[str, Any], form: str
) -> None:
    kind_token = token(group_version, kind)
    named = {"metadata": {"name": "lps"}, **body}
    resource = listed(kind_token, named) if form == "List" else Resource(kind_token + form, named)
    [message] = helper_pods.check_unsafe_flag(resource)
    assert UNSAFE in message
    where = f"{kind}List things items[0] ({kind} lps)" if form == "List" else f"{kind}{form} lps"
    assert message.startswith(f"{where} container provisioner: ")


def test_a_patch_that_sets_only_the_flag_on_the_provisioner_container_is_refused() -> None:
    """Server-side apply merges containers by name: the patch's args (or env) become the
    provisioner's, whatever command the cluster's Deployment gives."""
    for container in (
        {"name": "provisioner", "args": ["--allow-unsafe-helper-template"]},
        {"name": "provisioner", "env": [{"name": "ALLOW_UNSAFE_HELPER_TEMPLATE", "value": "1"}]},
    ):
        pod = {"template": {"spec": {"containers": [container]}}}
        patch = Resource(
            token("apps/v1", "DeploymentPatch"), {"metadata": {"name": "d"}, "spec": pod}
        )
        [message] = helper_pods.check_unsafe_flag(patch)
        assert UNSAFE in message


def test_an_init_container_running_the_provisioner_is_read() -> None:
    pod = {
        "initContainers": [UNSAFE_PROVISIONER],
        "containers": [{"name": "app", "command": ["sleep"]}],
    }
    resource = Resource(token("apps/v1", "Deployment"), {"spec": {"template": {"spec": pod}}})
    [message] = helper_pods.check_unsafe_flag(resource)
    assert UNSAFE in message


ROLLOUT = token("argoproj.io/v1alpha1", "Rollout")


@pytest.mark.parametrize(
    ("resource", "where"),
    [
        (
            Resource(ROLLOUT, {"metadata": {"name": "r"}, **TEMPLATED}),
            "Rollout r spec.template.spec",
        ),
        (
            Resource(
                token("example.com/v1", "Runner"),
                {"metadata": {"name": "x"}, "spec": {"workers": [{"pod": {"spec": POD["spec"]}}]}},
            ),
            "Runner x spec.workers[0].pod.spec",
        ),
        (
            Resource(token("core/v1", "PodTemplate"), {"metadata": {"name": "t"}, "template": POD}),
            "PodTemplate t template.spec",
        ),
        (
            listed(ROLLOUT, {"metadata": {"name": "r"}, **TEMPLATED}),
            "RolloutList things items[0].spec.template.spec",
        ),
    ],
)
def test_a_pod_spec_in_a_kind_the_pack_does_not_read_fails_closed(
    resource: Resource, where: str
) -> None:
    [message] = helper_pods.check_unsafe_flag(resource)
    assert message.startswith(
        f"{where}: this pod spec may run the provisioner (container provisioner runs it)"
    )
    assert "the pack does not read this kind" in message
    assert "local-path-storage-policy:allowUnsafeHelperTemplate" in message


def test_an_unread_kind_fails_closed_even_when_its_container_looks_safe() -> None:
    """Safe as the pack reads the container; but a controller the pack does not know may add
    to the template (or run it as something else), so it cannot be told."""
    container = {**UNSAFE_PROVISIONER, "args": []}
    rollout = Resource(
        ROLLOUT, {"spec": {"template": {"spec": {"containers": [container]}}}}, "urn::r"
    )
    [message] = helper_pods.check_unsafe_flag(rollout)
    assert "may run the provisioner" in message
    entrypoint = {"name": "app", "image": "local-path-storage/provisioner:0.1.0"}
    rollout = Resource(
        ROLLOUT, {"spec": {"template": {"spec": {"containers": [entrypoint]}}}}, "urn::r"
    )
    [message] = helper_pods.check_unsafe_flag(rollout)
    assert "container app has no command (its image's may be it)" in message


def test_an_unread_kind_that_runs_something_else_passes() -> None:
    nginx = {"name": "web", "image": "nginx:1.27", "command": ["nginx", "-g", "daemon off;"]}
    rollout = Resource(ROLLOUT, {"spec": {"template": {"spec": {"containers": [nginx]}}}}, "urn::r")
    assert helper_pods.check_unsafe_flag(rollout) == []
    service = Resource(token("core/v1", "Service"), {"spec": {"ports": [{"port": 80}]}}, "urn::s")
    assert helper_pods.check_unsafe_flag(service) == []


def test_a_component_holding_objects_is_left_to_its_children() -> None:
    """A ConfigGroup registers each of its objects as a resource the pack checks: its own
    `objs` are not read a second time, as an unreadable kind."""
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", **TEMPLATED}
    group = Resource(token("yaml/v2", "ConfigGroup"), {"objs": [deployment]}, "urn::g")
    assert helper_pods.check_unsafe_flag(group) == []
    child = Resource(token("apps/v1", "Deployment"), deployment, "urn::g$d")
    assert UNSAFE in helper_pods.check_unsafe_flag(child)[0]


RBAC = "rbac.authorization.k8s.io/v1"


@pytest.mark.parametrize("kind", ["ClusterRoleBindingPatch", "RoleBindingPatch"])
def test_a_binding_patch_to_a_broad_role_is_refused(kind: str) -> None:
    props = {"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"}}
    [message] = rbac.check_resource(Resource(token(RBAC, kind), props))
    assert message.startswith(f"{kind} b binds the built-in role cluster-admin")


def test_the_adopt_modes_binding_patches_pass() -> None:
    """What the adopt mode writes: rancher's bindings left naming a group no one is in."""
    subjects = [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "nobody"}]
    for kind in ("ClusterRoleBindingPatch", "RoleBindingPatch"):
        patch = Resource(token(RBAC, kind), {"metadata": {"name": "b"}, "subjects": subjects})
        assert rbac.check_resource(patch) == []


SECRETS_RULE = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}


@pytest.mark.parametrize("kind", ["ClusterRolePatch", "RolePatch"])
def test_a_role_patch_that_grants_secrets_is_refused(kind: str) -> None:
    role = Resource(token(RBAC, kind), {"metadata": {"name": "lps"}, "rules": [SECRETS_RULE]})
    [message] = rbac.check_resource(role)
    assert message.startswith(f"{kind} lps rules[0] ") and "it grants secrets" in message


@pytest.mark.parametrize("kind", ["ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"])
def test_each_item_of_an_rbac_list_is_checked(kind: str) -> None:
    item = {"metadata": {"name": "x"}, "rules": [SECRETS_RULE], "roleRef": {"name": "admin"}}
    [message] = rbac.check_resource(listed(token(RBAC, kind), item))
    assert message.startswith(f"{kind}List things items[0] ({kind} x) ")


STORAGE_CLASS_TOKEN = token("storage.k8s.io/v1", "StorageClass")


def test_a_storage_class_patch_and_list_get_the_node_path_check() -> None:
    patch = Resource(
        STORAGE_CLASS_TOKEN + "Patch",
        {"metadata": {"name": "fast"}, "parameters": {"nodePath": "/var/lib/kubelet"}},
    )
    [message] = storage_paths.check_resource(patch)
    assert message.startswith("StorageClassPatch fast parameters.nodePath: " + IN_KUBELET)
    listed_class = listed(STORAGE_CLASS_TOKEN, dict(storage_class("b", nodePath="/etc/x").props))
    [message] = storage_paths.check_resource(listed_class)
    assert message.startswith(
        "StorageClassList things items[0] (StorageClass b) parameters.nodePath"
    )


def test_a_storage_class_patch_that_makes_a_second_default_is_reported() -> None:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"}
    patch = Resource(
        STORAGE_CLASS_TOKEN + "Patch",
        {"metadata": {"name": "legacy", "annotations": annotations}},
        "urn::scp::legacy",
    )
    found = default_class.check_stack([storage_class("a", default=True), patch])
    assert [urn for _, urn in found] == ["urn::scp::legacy"]
    assert found[0][0].startswith(
        "StorageClassPatch legacy is a default class, and so are a, legacy"
    )
    in_a_list = listed(STORAGE_CLASS_TOKEN, {"metadata": {"name": "c", "annotations": annotations}})
    assert len(default_class.check_stack([storage_class("a", default=True), in_a_list])) == 1


def test_a_class_and_a_patch_of_it_are_one_default_class() -> None:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"}
    patch = Resource(
        STORAGE_CLASS_TOKEN + "Patch", {"metadata": {"name": "a", "annotations": annotations}}
    )
    assert default_class.check_stack([storage_class("a", default=True), patch]) == []


def deployment_patch(spec: dict[str, Any]) -> Resource:
    return Resource(
        token("apps/v1", "DeploymentPatch"), {"metadata": {"name": "lps"}, "spec": spec}, "urn::dp"
    )


RETAIN = storage_class("keep", reclaim_policy="Retain")


def test_a_deployment_patch_is_held_to_production_on_what_it_sets() -> None:
    provisioner = {"name": "provisioner", "command": ["local-path-storage-provisioner"]}
    one = deployment_patch({"replicas": 1.0, "template": {"spec": {"containers": [provisioner]}}})
    [(message, urn)] = production.check_stack([one, RETAIN])
    assert message.startswith("DeploymentPatch lps: 1 replica") and urn == "urn::dp"
    # The patch leaves replicas and the memory limit to the cluster's Deployment.
    off = {**provisioner, "args": ["--no-leader-election"]}
    [(message, _)] = production.check_stack(
        [deployment_patch({"template": {"spec": {"containers": [off]}}}), RETAIN]
    )
    assert "DeploymentPatch lps container provisioner: leader election is off" in message
    # The adopt mode's scale-down of rancher's Deployment runs no provisioner.
    assert production.check_stack([deployment_patch({"replicas": 0.0}), RETAIN]) == []


def test_a_storage_class_patch_leaving_reclaim_policy_out_is_not_read_as_delete() -> None:
    patch = Resource(STORAGE_CLASS_TOKEN + "Patch", {"metadata": {"name": "legacy"}})
    assert production.check_stack([storage_class("a"), patch]) == []
    listed_delete = listed(STORAGE_CLASS_TOKEN, {"metadata": {"name": "b"}})
    [(message, _)] = production.check_stack([storage_class("a"), listed_delete])
    assert message.startswith("every StorageClass (a, b) has reclaimPolicy Delete")


def test_the_engines_proxied_inputs_are_read_alike() -> None:
    """The engine hands a policy its inputs wrapped (Mapping and Sequence proxies that raise
    on a value unknown in preview), not dicts and lists."""
    rollout = {"metadata": {"name": "r"}, **TEMPLATED}
    proxied = Resource(ROLLOUT, unknown_checking_proxy(rollout), "urn::r")
    assert "may run the provisioner" in helper_pods.check_unsafe_flag(proxied)[0]
    items = {"items": [config_map_body({"config.json": json.dumps(KUBELET)})]}
    in_a_list = Resource(f"{CONFIG_MAP_TOKEN}List", unknown_checking_proxy(items), "urn::l")
    assert IN_KUBELET in storage_paths.check_resource(in_a_list)[0]


def test_the_adopt_modes_objects_pass_the_pack_with_its_patches_read() -> None:
    """The takeover of rancher writes three Patch types (rancher's Deployment scaled to 0,
    its two bindings emptied): the pack reads them now, and finds nothing wrong in them."""
    result = takeover_run()
    resources = [
        Resource(r.type, r.inputs, r.name)
        for r in result.registrations
        if r.type.startswith("kubernetes:")
    ]
    patches = sorted(r.type.rsplit(":", 1)[-1] for r in resources if r.type.endswith("Patch"))
    assert patches == ["ClusterRoleBindingPatch", "DeploymentPatch", "RoleBindingPatch"]
    for resource in resources:
        assert storage_paths.check_resource(resource) == []
        assert helper_pods.check_unsafe_flag(resource) == []
        assert rbac.check_resource(resource) == []
        assert provisioner_config.check_resource(resource) == []
    assert default_class.check_stack(resources) == []
