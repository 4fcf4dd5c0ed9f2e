"""Stack config `adopt`: the settings it gives, its one-line refusals, and the resources the
program registers for a takeover (imports kept on delete, rancher scaled to 0 first)."""

from __future__ import annotations

from typing import Any

import pytest

from components.adoption import adoption_summary
from components.args import AdoptionArgs
from components.naming import CONFIG_NAMESPACE
from components.package_args import stack_config_values
from components.program import run
from components.settings import parse_settings
from components.stack_values import SettingsError
from tests.components.mocked_engine import Run, run_mocked
from tests.components.stack_files import engine_config, stack_file

RANCHER_CLASS = {
    "name": "local-path",
    "reclaimPolicy": "Delete",
    "volumeBindingMode": "WaitForFirstConsumer",
}
PREFIX = f"stack config {CONFIG_NAMESPACE}:"


def takeover(**overrides: Any) -> dict[str, str]:
    """The dev stack adopting rancher's v0.0.37 installation, with keys replaced (None
    removes a key)."""
    config = dict(stack_file("dev")["config"])
    config[f"{CONFIG_NAMESPACE}:adopt"] = {"from": "rancher"}
    config[f"{CONFIG_NAMESPACE}:storageClasses"] = [RANCHER_CLASS]
    for key, value in overrides.items():
        full_key = f"{CONFIG_NAMESPACE}:{key}"
        if value is None:
            config.pop(full_key, None)
        else:
            config[full_key] = value
    return engine_config(config)


def test_adopt_gives_the_installation_rancher_s_names() -> None:
    settings = parse_settings(takeover())
    deployment = settings.deployment
    assert deployment.adopt == AdoptionArgs()
    assert (deployment.namespace, deployment.provisioner_name, deployment.config_map_name) == (
        "local-path-storage",
        "rancher.io/local-path",
        "local-path-config",
    )
    assert deployment.create_namespace is False
    assert settings.storage_classes.provisioner_name == "rancher.io/local-path"
    assert settings.storage_classes.adopted == ("local-path",)


def test_every_adopt_key_can_name_another_installation() -> None:
    adopt = {
        "from": "rancher",
        "namespace": "storage",
        "provisionerName": "example.com/local",
        "configMapName": "paths",
        "deploymentName": "local-provisioner",
        "clusterRoleBindingName": "local-provisioner",
        "roleBindingName": "local-provisioner-pods",
        "storageClasses": ["local", "local-retain"],
    }
    classes = [{**RANCHER_CLASS, "name": "local"}, {**RANCHER_CLASS, "name": "local-retain"}]
    settings = parse_settings(takeover(adopt=adopt, storageClasses=classes, namespace="storage"))
    assert settings.deployment.adopt == AdoptionArgs(
        namespace="storage",
        provisioner_name="example.com/local",
        config_map_name="paths",
        deployment_name="local-provisioner",
        cluster_role_binding_name="local-provisioner",
        role_binding_name="local-provisioner-pods",
        storage_classes=("local", "local-retain"),
    )
    assert settings.deployment.namespace == "storage"
    assert settings.storage_classes.adopted == ("local", "local-retain")


def test_without_adopt_nothing_is_adopted() -> None:
    settings = parse_settings(engine_config(stack_file("dev")["config"]))
    assert settings.deployment.adopt is None
    assert settings.storage_classes.adopted == ()


BAD_ADOPTIONS: list[tuple[str, dict[str, Any], str]] = [
    ("not an object", {"adopt": "rancher"}, "adopt: must be an object such as {from: rancher}"),
    ("no from", {"adopt": {}}, "adopt.from: is required: the installation taken over, one of"),
    ("other from", {"adopt": {"from": "openebs"}}, 'adopt.from: "openebs" is not known'),
    ("unknown key", {"adopt": {"from": "rancher", "namepsace": "x"}}, "adopt.namepsace: unknown"),
    (
        "bad namespace",
        {"adopt": {"from": "rancher", "namespace": "Local_Path"}},
        'adopt.namespace: "Local_Path" is not a valid namespace name',
    ),
    (
        "bad provisioner",
        {"adopt": {"from": "rancher", "provisionerName": "a/b/c"}},
        'adopt.provisionerName: "a/b/c" is not a valid provisioner name',
    ),
    (
        "no classes",
        {"adopt": {"from": "rancher", "storageClasses": []}},
        "adopt.storageClasses: must be a non-empty list of class names",
    ),
    (
        "class twice",
        {"adopt": {"from": "rancher", "storageClasses": ["local-path", "local-path"]}},
        'adopt.storageClasses[1]: "local-path" is listed twice',
    ),
    (
        "other namespace",
        {"namespace": "storage"},
        'namespace: is "storage", but adopt.namespace is "local-path-storage": an adopted '
        "installation keeps rancher's namespace",
    ),
    (
        "other provisioner",
        {"provisionerName": "example.com/local"},
        'provisionerName: is "example.com/local", but adopt.provisionerName is',
    ),
    (
        "class not declared",
        {"storageClasses": [{**RANCHER_CLASS, "name": "mine"}]},
        'adopt.storageClasses[0]: "local-path" is not one of storageClasses: declare it there',
    ),
    ("render mode", {"renderYamlToDirectory": "out"}, "adopt: needs a cluster"),
]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [pytest.param(overrides, message, id=name) for name, overrides, message in BAD_ADOPTIONS],
)
def test_a_bad_adoption_fails_with_one_line_naming_the_key(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings(takeover(**overrides))
    assert str(caught.value).startswith(PREFIX + message)
    assert "\n" not in str(caught.value)
    assert caught.value.key_path == message.split(": ", 1)[0]


def test_the_package_arg_spells_from_as_the_stack_does() -> None:
    values = stack_config_values({"adopt": {"from_": "rancher", "storage_classes": ["a"]}})
    assert values[f"{CONFIG_NAMESPACE}:adopt"] == '{"from": "rancher", "storageClasses": ["a"]}'


def takeover_run() -> Run:
    result = run_mocked(takeover(), run)
    assert result.error is None, result.error
    return result


def test_rancher_s_class_and_config_map_are_imported_and_kept_on_delete() -> None:
    result = takeover_run()
    (storage_class,) = result.of_type("kubernetes:storage.k8s.io/v1:StorageClass")
    assert storage_class.import_id == "local-path"
    assert storage_class.retain_on_delete
    assert not storage_class.delete_before_replace
    assert storage_class.inputs["provisioner"] == "rancher.io/local-path"
    config_map = result.one("kubernetes:core/v1:ConfigMap")
    assert config_map.import_id == "local-path-storage/local-path-config"
    assert config_map.retain_on_delete
    assert config_map.inputs["metadata"]["namespace"] == "local-path-storage"
    assert result.of_type("kubernetes:core/v1:Namespace") == []


def test_rancher_s_deployment_is_scaled_to_zero_before_ours_starts() -> None:
    result = takeover_run()
    patch = result.one("kubernetes:apps/v1:DeploymentPatch")
    assert patch.inputs["metadata"]["name"] == "local-path-provisioner"
    assert patch.inputs["metadata"]["namespace"] == "local-path-storage"
    assert patch.inputs["spec"] == {"replicas": 0}
    assert patch.retain_on_delete
    ours = result.one("kubernetes:apps/v1:Deployment")
    assert any(urn.endswith(f"::{patch.name}") for urn in ours.dependencies)
    args = ours.inputs["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--provisioner-name=rancher.io/local-path" in args
    assert "--predecessor-selector=app=local-path-provisioner" in args
    assert ours.inputs["metadata"]["namespace"] == "local-path-storage"


def test_rancher_s_account_loses_its_rights_once_ours_runs_and_the_bindings_stay() -> None:
    result = takeover_run()
    ours = result.one("kubernetes:apps/v1:Deployment")
    cluster_patch = result.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBindingPatch")
    role_patch = result.one("kubernetes:rbac.authorization.k8s.io/v1:RoleBindingPatch")
    assert cluster_patch.inputs["metadata"]["name"] == "local-path-provisioner-bind"
    assert role_patch.inputs["metadata"]["name"] == "local-path-provisioner-bind"
    assert role_patch.inputs["metadata"]["namespace"] == "local-path-storage"
    for patch in (cluster_patch, role_patch):
        # Only the subjects: roleRef is immutable and the roles stay for the way back.
        assert patch.inputs["subjects"] == [
            {
                "kind": "Group",
                "apiGroup": "rbac.authorization.k8s.io",
                "name": "local-path-storage:taken-over-from-rancher",
            }
        ]
        assert "roleRef" not in patch.inputs
        assert patch.inputs["metadata"]["annotations"] == {"pulumi.com/patchForce": "true"}
        assert patch.retain_on_delete
        assert any(urn.endswith(f"::{ours.name}") for urn in patch.dependencies)
    # rancher's roles are not the stack's: the policy pack would refuse their cluster-wide pods.
    roles = result.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")
    assert all(not role.import_id for role in roles)


def test_a_stack_without_adopt_imports_nothing() -> None:
    result = run_mocked(engine_config(stack_file("dev")["config"]), run)
    assert result.error is None, result.error
    assert all(not r.import_id and not r.retain_on_delete for r in result.registrations)
    assert result.of_type("kubernetes:apps/v1:DeploymentPatch") == []
    assert result.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBindingPatch") == []
    assert result.of_type("kubernetes:rbac.authorization.k8s.io/v1:RoleBindingPatch") == []


def test_the_preview_says_what_is_adopted() -> None:
    line = adoption_summary(AdoptionArgs())
    for part in (
        "local-path-storage",
        "local-path",
        "local-path-config",
        "scaled to 0",
        "ClusterRoleBinding local-path-provisioner-bind",
        "bound to no one",
    ):
        assert part in line
