"""The real engine plans and applies this project's stacks as a platform team would review them:
a fresh stack's exact creates, a clean no-op afterwards, a config change that updates the
ConfigMap alone, a flag change that updates the Deployment alone, and each immutable
StorageClass field planned as a replacement that `up` carries out."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi import automation as auto

from components import naming
from localcluster import LocalCluster
from scripts import build_image
from tests.engine.support import READER, EngineStack, StackFactory, api_get, base_config

INSTANCE = "local-path-storage"
CORE = "kubernetes:core/v1"
RBAC = "kubernetes:rbac.authorization.k8s.io/v1"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"


def expected_creates(class_name: str) -> list[tuple[str, str]]:
    return sorted(
        [
            ("pulumi:pulumi:Stack", f"local-path-storage-{class_name.rsplit('-', 1)[-1]}"),
            ("pulumi:providers:kubernetes", "kubernetes"),
            ("local-path-storage:index:ProvisionerDeployment", INSTANCE),
            ("local-path-storage:index:StorageClasses", INSTANCE),
            (f"{CORE}:Namespace", f"{INSTANCE}-namespace"),
            (f"{CORE}:ServiceAccount", f"{INSTANCE}-provisioner-sa"),
            (f"{CORE}:ServiceAccount", f"{INSTANCE}-helper-sa"),
            (f"{RBAC}:ClusterRole", f"{INSTANCE}-clusterrole"),
            (f"{RBAC}:ClusterRoleBinding", f"{INSTANCE}-clusterrolebinding"),
            (f"{RBAC}:Role", f"{INSTANCE}-role"),
            (f"{RBAC}:RoleBinding", f"{INSTANCE}-rolebinding"),
            (f"{CORE}:ConfigMap", f"{INSTANCE}-config"),
            ("kubernetes:apps/v1:Deployment", f"{INSTANCE}-deployment"),
            (STORAGE_CLASS, f"{INSTANCE}-{class_name}"),
        ]
    )


def stack_resource_name(stack: EngineStack) -> str:
    return f"local-path-storage-{stack.stack.name}"


def deployment(cluster: LocalCluster, namespace: str) -> dict[str, Any]:
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/local-path-storage-provisioner"
    found = api_get(cluster, path)
    assert found is not None, path
    return found


def storage_class(cluster: LocalCluster, name: str) -> dict[str, Any]:
    found = api_get(cluster, f"/apis/storage.k8s.io/v1/storageclasses/{name}")
    assert found is not None, name
    return found


def test_fresh_stack_creates_exactly_its_objects_then_plans_nothing(
    stacks: StackFactory, cluster: LocalCluster
) -> None:
    stack = stacks.create()
    names = stack.names
    expected = [
        (kind, stack_resource_name(stack) if kind == "pulumi:pulumi:Stack" else name)
        for kind, name in expected_creates(names.class_name)
    ]

    # A preview also reads the stack's own last outputs (components/program.py), through the
    # default `pulumi` provider; an update does not.
    preview = stack.preview()
    assert preview.of("create") == sorted([*expected, READER])
    assert preview.of("read") == [("pulumi:pulumi:StackReference", "deployed-outputs")]
    assert preview.ops() == {"create": len(expected) + 1, "read": 1}

    up = stack.up()
    assert up.of("create") == sorted(expected)
    assert storage_class(cluster, names.class_name)["provisioner"] == names.provisioner_name
    assert deployment(cluster, names.namespace)["spec"]["replicas"] == 1
    assert stack.outputs()["namespace"] == names.namespace

    # `pulumi preview --expect-no-changes` right after: exit 0 (it raises otherwise).
    stack.preview(expect_no_changes=True)
    second = stack.up()
    assert second.changed() == []
    assert second.ops() == {"same": len(expected)}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (
            "nodePathMap",
            [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/opt/elsewhere"]}],
        ),
        ("setupScript", '#!/bin/sh\nset -eu\nmkdir -m 0700 -p "$VOL_DIR"\n'),
        (
            "helperPodTemplate",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "helper-pod"},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "tolerations": [
                        {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists"}
                    ],
                    "containers": [
                        {
                            "name": "helper-pod",
                            "image": "busybox:1.37",
                            "imagePullPolicy": "IfNotPresent",
                        }
                    ],
                },
            },
        ),
    ],
    ids=["nodePathMap", "setupScript", "helperPodTemplate"],
)
def test_config_change_is_one_in_place_configmap_update(
    stacks: StackFactory, cluster: LocalCluster, key: str, value: Any
) -> None:
    stack = stacks.create()
    stack.up()
    before = deployment(cluster, stack.names.namespace)

    stack.set_config(key, value)
    preview = stack.preview()
    assert [(c.op, c.type) for c in preview.changed()] == [("update", f"{CORE}:ConfigMap")]
    up = stack.up()
    assert [(c.op, c.type) for c in up.changed()] == [("update", f"{CORE}:ConfigMap")]

    after = deployment(cluster, stack.names.namespace)
    # The pod template did not change: nothing rolled, nothing restarted.
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"]["template"] == before["spec"]["template"]


@pytest.mark.parametrize(
    ("key", "value", "check"),
    [
        ("image", "local-path-storage/provisioner:0.1.1", "local-path-storage/provisioner:0.1.1"),
        ("workers", 3, "--worker-threads=3"),
    ],
    ids=["image", "workers-flag"],
)
def test_image_or_flag_change_updates_the_deployment_only(
    stacks: StackFactory, cluster: LocalCluster, key: str, value: Any, check: str
) -> None:
    stack = stacks.create()
    stack.up()

    stack.set_config(key, value)
    expected = [("update", "kubernetes:apps/v1:Deployment")]
    assert [(c.op, c.type) for c in stack.preview().changed()] == expected
    assert [(c.op, c.type) for c in stack.up().changed()] == expected
    container = deployment(cluster, stack.names.namespace)["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert check in [container["image"], *container["args"]]


def test_image_pinned_by_digest_is_rolled_out(stacks: StackFactory, cluster: LocalCluster) -> None:
    """docs/install.md's "Pinning the image by digest": the stack key takes
    `repository@sha256:...` (here the built image's own digest, which the cluster runs), and `up`
    waits for the rollout."""
    pinned = f"{naming.IMAGE_REPOSITORY}@{build_image.image().digest}"
    stack = stacks.create()
    stack.up()

    stack.set_config("image", pinned)
    expected = [("update", "kubernetes:apps/v1:Deployment")]
    assert [(c.op, c.type) for c in stack.preview().changed()] == expected
    assert [(c.op, c.type) for c in stack.up().changed()] == expected
    found = deployment(cluster, stack.names.namespace)
    assert found["spec"]["template"]["spec"]["containers"][0]["image"] == pinned
    assert found["status"].get("updatedReplicas") == found["status"].get("readyReplicas") == 1


@pytest.mark.parametrize(
    ("change", "field", "expected"),
    [
        ("reclaimPolicy", "reclaimPolicy", "Retain"),
        ("volumeBindingMode", "volumeBindingMode", "Immediate"),
        ("parameters", "parameters", {"pathPattern": "{{ .PVC.Namespace }}/{{ .PVC.Name }}"}),
        ("provisionerName", "provisioner", None),
    ],
)
def test_immutable_storage_class_change_is_a_replacement_that_succeeds(
    stacks: StackFactory, cluster: LocalCluster, change: str, field: str, expected: Any
) -> None:
    stack = stacks.create()
    config = base_config(stack.names)
    if change == "volumeBindingMode":
        # Immediate binding needs a shared path (no node to choose): the config says so.
        config["nodePathMap"] = []
        config["sharedFileSystemPath"] = "/mnt/shared-local-path"
        stack.set_config("nodePathMap", [])
        stack.set_config("sharedFileSystemPath", "/mnt/shared-local-path")
        stack.up()
        stack.stack.refresh()
    else:
        stack.up()
    uid_before = storage_class(cluster, stack.names.class_name)["metadata"]["uid"]

    if change == "provisionerName":
        expected = f"renamed-{stack.names.suffix}.local-path-storage.io/local-path"
        stack.set_config("provisionerName", expected)
    else:
        classes = config["storageClasses"]
        classes[0][change] = expected
        stack.set_config("storageClasses", classes)

    preview = stack.preview()
    # delete_before_replace: the engine plans delete-replaced, replace, create-replacement.
    # A new provisioner name is also the Deployment's flag: a rolling update beside it.
    changed_types = {STORAGE_CLASS}
    if change == "provisionerName":
        changed_types.add("kubernetes:apps/v1:Deployment")
    assert {c.type for c in preview.changed()} == changed_types, preview.output
    assert [c.op for c in preview.changed() if c.type == STORAGE_CLASS].count("replace") == 1
    up = stack.up()
    assert {c.type for c in up.changed()} == changed_types
    after = storage_class(cluster, stack.names.class_name)
    assert after["metadata"]["uid"] != uid_before
    assert after[field] == expected


def test_expect_no_changes_fails_when_a_change_is_pending(stacks: StackFactory) -> None:
    stack = stacks.create()
    stack.up()
    stack.set_config("workers", 4)
    with pytest.raises(auto.CommandError):
        stack.preview(expect_no_changes=True)
