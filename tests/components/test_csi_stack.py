"""A stack with a CSI class (storageClasses[].volumeType: csi): its StorageClass parameter, the
node plugin's DaemonSet, RBAC and admission policy, the one CSIDriver; and a stack without one
deploys none of it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components import naming, node_plugin
from components.naming import CONFIG_NAMESPACE
from components.program import run
from components.settings import parse_settings
from components.stack_values import SettingsError
from provisioner.configuration.class_parameters import validate_storage_class_parameters
from provisioner.configuration.config import ConfigError, parse_config_json
from provisioner.objects.node_handoff import NODE_LABEL
from tests.components.mocked_engine import Run, run_mocked
from tests.components.stack_files import engine_config, stack_file

DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
CSI_DRIVER = "kubernetes:storage.k8s.io/v1:CSIDriver"
VAP = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
VAP_BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"
DEFAULT_NODE = "DEFAULT_PATH_FOR_NON_LISTED_NODES"
CSI_CLASS = {"name": "local-csi", "volumeType": "csi"}
DRIVER = "local-path.local-path-storage.io"
NEW_KINDS = (DAEMON_SET, CSI_DRIVER, VAP, VAP_BINDING)


def dev_with(**overrides: Any) -> dict[str, str]:
    config = dict(stack_file("dev")["config"])
    for key, value in overrides.items():
        config[f"{CONFIG_NAMESPACE}:{key}"] = value
    return engine_config(config)


def with_csi_class(**overrides: Any) -> dict[str, str]:
    classes = [*stack_file("dev")["config"][f"{CONFIG_NAMESPACE}:storageClasses"], CSI_CLASS]
    return dev_with(storageClasses=classes, **overrides)


def refusal(raw: dict[str, str]) -> SettingsError:
    with pytest.raises(SettingsError) as caught:
        parse_settings(raw)
    assert "\n" not in str(caught.value)
    return caught.value


def csi_run(**overrides: Any) -> Run:
    result = run_mocked(with_csi_class(**overrides), run, stack="dev")
    assert result.error is None, result.error
    return result


# -- the class ---------------------------------------------------------------------------------


def test_volume_type_csi_is_the_class_parameter() -> None:
    result = csi_run()
    classes = {r.inputs["metadata"]["name"]: r.inputs for r in result.of_type(STORAGE_CLASS)}
    assert classes["local-csi"]["parameters"] == {"volumeType": "csi"}
    assert "volumeType" not in (classes["local-path-storage"].get("parameters") or {})
    assert "defaultVolumeType" not in classes["local-csi"]["metadata"]["annotations"]


def test_the_parameter_given_directly_makes_a_csi_class_too() -> None:
    classes = [{"name": "local-csi", "parameters": {"volumeType": "csi"}}]
    settings = parse_settings(dev_with(storageClasses=classes))
    assert settings.deployment.node_plugin is not None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("hostPath", "defaultVolumeType: hostPath"),
        ("LOCAL", "defaultVolumeType: local"),
        ("nfs", "must be csi"),
    ],
)
def test_other_volume_types_are_refused_naming_the_key(value: str, says: str) -> None:
    error = refusal(dev_with(storageClasses=[{"name": "c", "volumeType": value}]))
    assert error.key_path == "storageClasses[0].volumeType"
    assert says in error.message


def test_a_csi_class_with_a_shared_file_system_is_refused() -> None:
    raw = dev_with(
        storageClasses=[{"name": "c", "volumeType": "csi", "volumeBindingMode": "Immediate"}],
        nodePathMap=[],
        sharedFileSystemPath="/mnt/nfs",
    )
    error = refusal(raw)
    assert error.key_path == "storageClasses[0].volumeType"
    assert "sharedFileSystemPath" in error.message


def test_a_csi_class_with_a_default_volume_type_is_refused() -> None:
    error = refusal(dev_with(storageClasses=[{**CSI_CLASS, "defaultVolumeType": "local"}]))
    assert error.key_path == "storageClasses[0].defaultVolumeType"
    assert "drop the defaultVolumeType" in error.message


def test_a_csi_class_with_another_affinity_key_is_refused() -> None:
    classes = [{**CSI_CLASS, "parameters": {"nodeAffinityKey": "example.com/disk-node"}}]
    error = refusal(dev_with(storageClasses=classes))
    assert error.key_path == "storageClasses[0].parameters.nodeAffinityKey"
    assert "kubernetes.io/hostname" in error.message


def test_a_provisioner_name_no_driver_can_take_is_refused_with_a_csi_class() -> None:
    error = refusal(with_csi_class(provisionerName="Example.com/Local_Path"))
    assert error.key_path == "provisionerName"
    assert "CSI driver" in error.message


def test_a_must_exist_base_path_at_the_root_is_refused() -> None:
    error = refusal(with_csi_class(nodePathMap=[{"node": DEFAULT_NODE, "paths": ["/data"]}]))
    assert error.key_path == "nodePathMap"
    assert "root directory" in error.message


def test_the_runtime_check_accepts_only_csi_as_the_parameter() -> None:
    config = parse_config_json(
        json.dumps({"nodePathMap": [{"node": DEFAULT_NODE, "paths": ["/opt/x"]}]})
    )
    validate_storage_class_parameters("c", {"volumeType": "csi"}, {}, config)
    with pytest.raises(ConfigError) as caught:
        validate_storage_class_parameters("c", {"volumeType": "hostPath"}, {}, config)
    assert caught.value.key_path == "parameters.volumeType"


# -- csiNodePlugin -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ({"kubeletDir": "/x"}, "csiNodePlugin.kubeletDir"),
        ({"kubeletDirectory": "var/lib/kubelet"}, "csiNodePlugin.kubeletDirectory"),
        ({"kubeletDirectory": "/var/lib/../kubelet"}, "csiNodePlugin.kubeletDirectory"),
        ({"kubeletDirectory": "/" + "k" * 120}, "csiNodePlugin.kubeletDirectory"),
        ({"image": " "}, "csiNodePlugin.image"),
        ({"priorityClassName": "Not_A_Name"}, "csiNodePlugin.priorityClassName"),
        ({"tolerations": [{"operator": "Sometimes"}]}, "csiNodePlugin.tolerations[0].operator"),
        ({"nodeSelector": {"disk": 3}}, 'csiNodePlugin.nodeSelector["disk"]'),
        ({"resources": {"cpuLimit": "lots"}}, "csiNodePlugin.resources.cpuLimit"),
        ({"resources": {"gpu": "1"}}, "csiNodePlugin.resources.gpu"),
        ("yes", "csiNodePlugin"),
    ],
)
def test_node_plugin_keys_are_checked_at_preview(value: object, key: str) -> None:
    assert refusal(with_csi_class(csiNodePlugin=value)).key_path == key


def test_node_plugin_keys_without_a_csi_class_are_a_warning() -> None:
    settings = parse_settings(dev_with(csiNodePlugin={"image": "x:1"}))
    assert settings.deployment.node_plugin is None
    (warning,) = settings.warnings
    assert "csiNodePlugin" in warning
    assert "no class is a csi class" in warning


# -- the resource graph ------------------------------------------------------------------------


def test_a_stack_without_a_csi_class_deploys_nothing_new() -> None:
    result = run_mocked(dev_with(), run, stack="dev")
    assert result.error is None, result.error
    for kind in NEW_KINDS:
        assert result.of_type(kind) == []
    assert len(result.of_type(CLUSTER_ROLE)) == 1


def test_the_csi_driver_is_named_for_the_driver_with_the_csi_settings() -> None:
    driver = csi_run().one(CSI_DRIVER)
    assert driver.inputs["metadata"]["name"] == DRIVER
    assert driver.inputs["spec"] == {
        "attachRequired": False,
        "podInfoOnMount": True,
        "fsGroupPolicy": "File",
        "volumeLifecycleModes": ["Persistent"],
        "storageCapacity": False,
    }
    assert driver.delete_before_replace


def test_one_csi_driver_serves_capacity_and_csi_when_the_names_agree() -> None:
    budgeted = [
        {
            "node": DEFAULT_NODE,
            "paths": [{"path": "/opt/local-path-provisioner", "capacity": "1Gi"}],
        }
    ]
    (driver,) = csi_run(provisionerName="local-path-storage.io", nodePathMap=budgeted).of_type(
        CSI_DRIVER
    )
    assert driver.inputs["metadata"]["name"] == "local-path-storage.io"
    assert driver.inputs["spec"]["storageCapacity"] is True
    assert driver.inputs["spec"]["podInfoOnMount"] is True


def test_the_node_plugin_role_grants_only_its_list() -> None:
    roles = {r.inputs["metadata"]["name"]: r.inputs for r in csi_run().of_type(CLUSTER_ROLE)}
    rules = roles["local-path-storage-system:node-plugin"]["rules"]
    assert rules == [
        {
            "apiGroups": [""],
            "resources": ["persistentvolumes"],
            "verbs": ["get", "list", "watch", "patch"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {
            "apiGroups": ["snapshot.storage.k8s.io"],
            "resources": ["volumesnapshotcontents"],
            "verbs": ["get", "list", "watch", "patch"],
        },
        {
            "apiGroups": ["snapshot.storage.k8s.io"],
            "resources": ["volumesnapshotcontents/status"],
            "verbs": ["patch"],
        },
    ]


def test_the_admission_policy_holds_the_plugin_to_its_node() -> None:
    result = csi_run()
    policy = result.one(VAP).inputs
    spec = policy["spec"]
    assert spec["matchConstraints"]["resourceRules"][0]["operations"] == ["UPDATE"]
    username = "system:serviceaccount:local-path-storage-system:local-path-storage-node-plugin"
    assert username in spec["matchConditions"][0]["expression"]
    expressions = " ".join(v["expression"] for v in spec["validations"])
    assert NODE_LABEL in expressions
    assert "variables.node" in expressions
    assert "object.spec == oldObject.spec" in expressions
    binding = result.one(VAP_BINDING).inputs
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_the_daemon_set() -> None:
    result = csi_run(
        image="registry.example/lps:1",
        csiNodePlugin={
            "tolerations": [{"operator": "Exists"}],
            "nodeSelector": {"disk": "ssd"},
            "priorityClassName": "system-node-critical",
            "resources": {"memoryLimit": "256Mi"},
        },
    )
    daemon_set = result.one(DAEMON_SET).inputs
    pod = daemon_set["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/lps:1"
    assert container["command"] == ["local-path-storage-provisioner", "csi-node-plugin"]
    assert container["securityContext"]["privileged"] is True
    assert (
        f"--kubelet-registration-path=/var/lib/kubelet/plugins/{DRIVER}/csi.sock"
        in container["args"]
    )
    assert container["env"] == [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    ]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert container["resources"]["limits"] == {"memory": "256Mi"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/var/lib/kubelet"]["mountPropagation"] == "Bidirectional"
    assert mounts["/opt/local-path-provisioner"]["mountPropagation"] == "HostToContainer"
    assert mounts[naming.CONFIG_DIRECTORY]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    host_paths = {
        v["hostPath"]["path"]: v["hostPath"]["type"] for v in volumes.values() if "hostPath" in v
    }
    assert host_paths == {
        "/var/lib/kubelet": "Directory",
        f"/var/lib/kubelet/plugins/{DRIVER}": "DirectoryOrCreate",
        # rancher's default path may be made where it is missing.
        "/opt/local-path-provisioner": "DirectoryOrCreate",
    }
    assert volumes["config"]["configMap"]["name"] == naming.CONFIG_MAP_NAME
    # The image has no shell: the helper image's busybox is copied for the scripts.
    (shell,) = pod["initContainers"]
    assert shell["image"] == "busybox:1.37.0"  # the default helperPod.yaml's
    assert shell["volumeMounts"] == [{"name": "shell", "mountPath": "/lps-shell"}]
    assert mounts["/lps-shell"]["readOnly"] is True and "emptyDir" in volumes["shell"]
    assert "--shell-directory=/lps-shell" in container["args"]
    assert "--manage-volumes" in container["args"]
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["nodeSelector"] == {"disk": "ssd"}
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["serviceAccountName"] == node_plugin.SERVICE_ACCOUNT
    selector = daemon_set["spec"]["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/name"] == node_plugin.APP_NAME
    deployment = result.one("kubernetes:apps/v1:Deployment").inputs
    assert (
        deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
        != node_plugin.APP_NAME
    )


def test_a_must_exist_base_path_is_mounted_by_its_parent() -> None:
    paths = [
        {
            "node": DEFAULT_NODE,
            "paths": [
                {"path": "/mnt/disk1/lps", "mountPoint": True},
                {"path": "/srv/lps", "create": True},
            ],
        }
    ]
    pod = csi_run(nodePathMap=paths).one(DAEMON_SET).inputs["spec"]["template"]["spec"]
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert {"/mnt/disk1", "/srv/lps"} <= host_paths
    assert "/mnt/disk1/lps" not in host_paths


def test_a_custom_kubelet_directory() -> None:
    pod = (
        csi_run(csiNodePlugin={"kubeletDirectory": "/var/snap/microk8s/common/var/lib/kubelet"})
        .one(DAEMON_SET)
        .inputs["spec"]["template"]["spec"]
    )
    (container,) = pod["containers"]
    assert "--kubelet-root=/var/snap/microk8s/common/var/lib/kubelet" in container["args"]


def test_the_capacity_warning_names_the_csi_driver_deployed_instead() -> None:
    budgeted = [
        {
            "node": DEFAULT_NODE,
            "paths": [{"path": "/opt/local-path-provisioner", "capacity": "1Gi"}],
        }
    ]
    settings = parse_settings(with_csi_class(nodePathMap=budgeted))
    (warning,) = settings.warnings
    assert f'the csi classes\' CSIDriver "{DRIVER}" is deployed without storageCapacity' in warning
    assert settings.deployment.deploy_csi_driver is False
